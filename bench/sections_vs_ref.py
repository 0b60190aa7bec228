"""The ingest and importance jobs of an earlier commit beside this checkout's, on the same inputs
(issue 17): time, the share of mentions in class O per source, the section classes, and Table 3.

    nice -n 5 .venv/bin/python bench/sections_vs_ref.py [--ref 0bed0c3] [--rounds 2]
        [--inputs sample | elife | acl] [--cache /tmp/sections_vs_ref]

A git worktree of --ref (default 0bed0c3, the commit before the learned section classifier) is
made in a temporary folder. Each round runs, for both trees in alternating order, `jobs/ingest.py`
then `jobs/importance.py` as child processes (imports from that tree) on a fresh run folder, with
the same settings (configs/demo.toml's [ingest] and [importance] sections, inputs replaced by
--inputs). Prints per tree: each job's wall time (best of rounds) and the ratio this / ref; mentions
per section class and source; the share of mentions in class O per source; Table 3 (entropy
weights) of both and its largest difference.

--inputs: `sample` = the embedded sample (eLife 250, ScisummNet 250, PubMed 1,250); `elife` = all
1,600 eLife research articles of ../shared (extracted to --cache once); `acl` = ScisummNet 2019
(978 papers) and the CL-SciSumm 2018 training set (40 topics) of ../shared.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from pathlib import Path

import pyarrow.dataset as ds

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
SAMPLE_INPUTS = [{"path": str(REPO / "sample/elife"), "format": "jats", "source": "elife"},
                 {"path": str(REPO / "sample/scisummnet"), "format": "scisummnet", "source": "scisummnet"},
                 {"path": str(REPO / "sample/pubmed"), "format": "pubmed_csv", "source": "pubmed"}]
ACL_TARS = {"scisummnet": ("cl-scisumm/scisummnet-2019.tar.gz", "data/Training-Set-2019/Task1/From-ScisummNet-2019"),
            "clscisumm": ("cl-scisumm/training-set-2018-40topics.tar.gz",
                          "data/Training-Set-2019/Task1/From-Training-Set-2018")}
ELIFE_TAR = "elife-articles/elife-articles-6c97171-xml.tar.gz"
RESEARCH = re.compile(rb'<article[^>]*\barticle-type="research-article"')


def extract_elife(cache: Path) -> Path:
    dest = cache / "elife_research"
    if not (dest / ".done").exists():
        dest.mkdir(parents=True, exist_ok=True)
        with tarfile.open(DATA / ELIFE_TAR, "r:gz") as tar:
            for m in tar:
                if m.isfile() and m.name.endswith(".xml"):
                    data = tar.extractfile(m).read()
                    if RESEARCH.search(data[:4096]):
                        (dest / Path(m.name).name).write_bytes(data)
        (dest / ".done").touch()
    return dest


def extract_acl(cache: Path) -> list[dict]:
    out = []
    for fmt, (tar, sub) in ACL_TARS.items():
        dest = cache / fmt
        if not (dest / sub).exists():
            with tarfile.open(DATA / tar, "r:gz") as t:
                t.extractall(dest, filter="data")
        out.append({"path": str(dest / sub), "format": fmt, "source": fmt})
    return out


def inputs_for(kind: str, cache: Path) -> list[dict]:
    if kind == "sample":
        return SAMPLE_INPUTS
    if kind == "elife":
        return [{"path": str(extract_elife(cache)), "format": "jats", "source": "elife"}]
    return extract_acl(cache)


def write_config(path: Path, inputs: list[dict]) -> Path:
    """configs/demo.toml's ingest and importance settings with these inputs (TOML by hand: the
    values are flat)."""
    cfg = tomllib.loads((REPO / "configs/demo.toml").read_text())
    lines = ["[ingest]", "inputs = ["]
    lines += [f'  {{ path = "{i["path"]}", format = "{i["format"]}", source = "{i["source"]}" }},' for i in inputs]
    lines += ["]", "", "[importance]"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in cfg.get("importance", {}).items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def run_job(tree: Path, job: str, run: Path, config: Path) -> float:
    env = dict(os.environ, PYTHONPATH=str(tree))  # imports from `tree`, ahead of the editable install
    cmd = [sys.executable, "-P", str(tree / "jobs" / f"{job}.py"), "--run", str(run), "--config", str(config)]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(f"{tree}: {job} failed:\n{p.stderr[-3000:]}")
    return time.perf_counter() - t0


def mention_classes(run: Path) -> dict[str, dict[str, int]]:
    """{source: {class: mentions}} of the run's mentions (by the citing paper's source)."""
    papers = ds.dataset(run / "papers").to_table(columns=["paper_id", "source"])
    src = dict(zip(papers["paper_id"].to_pylist(), papers["source"].to_pylist()))
    m = ds.dataset(run / "mentions").to_table(columns=["citing_id", "section_class"])
    out: dict[str, dict[str, int]] = {}
    for cid, cls in zip(m["citing_id"].to_pylist(), m["section_class"].to_pylist()):
        d = out.setdefault(src.get(cid, "?"), {})
        d[cls] = d.get(cls, 0) + 1
    return out


def table3(run: Path) -> dict[str, float]:
    t = ds.dataset(run / "weights").to_table()
    return dict(zip(t["feature"].to_pylist(), t["weight"].to_pylist()))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ref", default="0bed0c3")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--inputs", choices=("sample", "elife", "acl"), default="sample")
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "sections_vs_ref")
    a = ap.parse_args(argv)
    a.cache.mkdir(parents=True, exist_ok=True)
    inputs = inputs_for(a.inputs, a.cache)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        ref_tree = tmp / "ref"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(ref_tree), a.ref],
                       check=True, capture_output=True)
        try:
            trees = {"ref": ref_tree, "this": REPO}
            config = write_config(tmp / "config.toml", inputs)
            times = {k: {"ingest": [], "importance": []} for k in trees}
            last = {}
            for r in range(a.rounds):
                order = list(trees) if r % 2 == 0 else list(trees)[::-1]
                for name in order:
                    run = tmp / f"run-{name}-{r}"
                    for job in ("ingest", "importance"):
                        times[name][job].append(run_job(trees[name], job, run, config))
                    last[name] = run
                    print(f"round {r} {name}: ingest {times[name]['ingest'][-1]:.1f} s, "
                          f"importance {times[name]['importance'][-1]:.1f} s", flush=True)
            report(a, times, {k: mention_classes(v) for k, v in last.items()}, {k: table3(v) for k, v in last.items()})
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(ref_tree)], capture_output=True)
    return 0


def report(a, times, classes, weights) -> None:
    print(f"\n== {a.inputs}: ref {a.ref} vs this checkout, best of {a.rounds} rounds ==")
    total = {k: min(v["ingest"]) + min(v["importance"]) for k, v in times.items()}
    for job in ("ingest", "importance"):
        r, t = min(times["ref"][job]), min(times["this"][job])
        print(f"{job:<11} ref {r:7.1f} s   this {t:7.1f} s   this/ref {t / r:.3f}")
    print(f"{'both':<11} ref {total['ref']:7.1f} s   this {total['this']:7.1f} s   this/ref "
          f"{total['this'] / total['ref']:.3f}")
    print("\nmentions per section class (source: I M R D O), and the share in class O:")
    for src in sorted(set(classes["ref"]) | set(classes["this"])):
        for name in ("ref", "this"):
            d = classes[name].get(src, {})
            n = sum(d.values())
            row = "  ".join(f"{c} {d.get(c, 0):>6}" for c in "IMRDO")
            print(f"  {src:<11}{name:<5} {row}   O share {d.get('O', 0) / n if n else float('nan'):.4f}  ({n} mentions)")
    print("\nTable 3 (entropy weights):")
    feats = sorted(set(weights["ref"]) | set(weights["this"]))
    for f in feats:
        r, t = weights["ref"].get(f, float("nan")), weights["this"].get(f, float("nan"))
        print(f"  {f:<6} ref {r:.4f}   this {t:.4f}   diff {t - r:+.4f}")
    print(f"largest |diff| {max(abs(weights['this'].get(f, 0) - weights['ref'].get(f, 0)) for f in feats):.4f}")


if __name__ == "__main__":
    sys.exit(main())
