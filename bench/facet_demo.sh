#!/bin/bash
# FLeW and UniFAR on the demo run: intent labels, facet triplets, the abstract split, then
# train -> embed -> knn -> cluster -> render -> evaluate, and a facet map (render --view method).
# Usage: bash bench/facet_demo.sh REPO DEMO_RUN INTENT_MODEL SPLITTER_MODEL [STEPS]
# (REPO: a checkout with .venv; DEMO_RUN: a finished `make demo` run; the models: jobs/facets.py
# intent-train / splitter-train --out). Writes DEMO_RUN-flew and DEMO_RUN-unifar beside DEMO_RUN.
set -euo pipefail
REPO=$1; DEMO=$2; INTENT=$3; SPLIT=$4; STEPS=${5:-20}
cd "$REPO"
PY=.venv/bin/python
for obj in flew unifar; do
  R=$DEMO-$obj
  rm -rf "$R"; mkdir -p "$R"
  for t in papers references mentions rejects warnings files; do ln -s "$(readlink -f $DEMO/$t)" "$R/$t"; done
  cp "$DEMO/ingest_summary.json" "$R/"
  [ -d "$DEMO/context_intents" ] || $PY jobs/facets.py intent-label --run "$DEMO" --classifier "$INTENT" > "$DEMO/intent_label.json"
  ln -s "$(readlink -f $DEMO/context_intents)" "$R/context_intents"
  $PY jobs/importance.py --config configs/demo.toml --run "$R" --facet-signal intent > "$R/importance.log" 2>&1
  $PY jobs/facets.py splitter-label --run "$R" --classifier "$SPLIT" > "$R/splitter_label.json"
  $PY jobs/train.py --config configs/demo.toml --run "$R" --objective $obj --max-steps $STEPS > "$R/train.log" 2>&1
  $PY jobs/embed.py --config configs/demo.toml --run "$R" > "$R/embed.log" 2>&1
  $PY jobs/knn.py --config configs/demo.toml --run "$R" > "$R/knn.log" 2>&1
  $PY jobs/cluster.py --config configs/demo.toml --run "$R" > "$R/cluster.log" 2>&1
  $PY jobs/render.py --config configs/demo.toml --run "$R" > "$R/render.log" 2>&1
  $PY jobs/evaluate.py --config configs/demo.toml --run "$R" > "$R/evaluate.log" 2>&1
  $PY jobs/render.py --config configs/demo.toml --run "$R" --view method > "$R/render_method.log" 2>&1
  echo "$obj: $(ls $R/maps/method/map.png) $(grep -c . $R/report.md) report lines"
done
