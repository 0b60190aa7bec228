"""`python jobs/facets.py` / `sciencemap facets`: the facet classifiers (METHODS.md §8.1) and the
labelling of a run's text with them, before an importance run with [importance] facet_signal = intent
and before training the facet objectives (flew, unifar).

    intent-train    fine-tune the citation-intent classifier on SciCite; prints dev and test macro-F1
    intent-label    label the citing sentences of a run's mentions -> context_intents
    splitter-train  fine-tune the abstract facet splitter on CSAbstruct; prints it beside a position-only rule
    splitter-label  split a run's abstracts into facets -> abstract_facets
    weights         FLeW: the facet weights searched on the simplex against held-out citations

A classifier is trained by one command and kept where --out says (the run's models/ folder is where
the label commands look by default): a fine-tuned encoder weighs what the encoder weighs, so none is
shipped, and users train it on the encoder they map with.
"""
from __future__ import annotations

import argparse
import json
import sys

from sciencemap.runtime import UserError


def main(argv=None, prog: str = "facets") -> int:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    for name, what, data in (("intent-train", "the citation-intent classifier (SciCite)", "SciCite train.txt, dev.txt, test.txt"),
                             ("splitter-train", "the abstract facet splitter (CSAbstruct)", "CSAbstruct train.jsonl, dev.jsonl, test.jsonl")):
        t = sub.add_parser(name, help=f"fine-tune {what}")
        t.add_argument("--data", required=True, help=f"folder with {data}")
        t.add_argument("--out", required=True, help="folder to write the classifier to (e.g. runs/x/models/intent)")
        t.add_argument("--model", default="minilm", help="'minilm' or a local Hugging Face directory (e.g. SciBERT)")
        t.add_argument("--epochs", type=int, default=3)
        t.add_argument("--lr", type=float, default=2e-5, help="encoder learning rate")
        t.add_argument("--max-train", type=int, default=0, help="a seeded sample of the train split (0 = all)")
        t.add_argument("--seed", type=int, default=0)
        t.add_argument("--device", default="auto")
    for name, what, default in (("intent-label", "label the citing sentences of a run (writes context_intents)", "intent"),
                                ("splitter-label", "split a run's abstracts into facets (writes abstract_facets)", "splitter")):
        lab = sub.add_parser(name, help=what)
        lab.add_argument("--run", required=True)
        lab.add_argument("--classifier", default=None, help=f"default: <run>/models/{default}")
        lab.add_argument("--device", default="auto")
        if name == "splitter-label":
            lab.add_argument("--all", action="store_true", help="every paper with an abstract, not only the triplets' papers")
    w = sub.add_parser("weights", help="FLeW: search the facet weights on the simplex against held-out citations")
    w.add_argument("--run", required=True, help="a run embedded with a flew model (its 'facets' view)")
    w.add_argument("--step", type=float, default=0.1)
    w.add_argument("--split", default="val", help="the triplets' split whose anchors are the queries")
    a = p.parse_args(argv)
    try:
        if a.cmd.endswith("-train"):
            kw = dict(epochs=a.epochs, lr=a.lr, max_train=a.max_train, seed=a.seed)
            if a.cmd == "intent-train":
                from encoders.facets.intent import train_intent as train
            else:
                from encoders.facets.splitter import train_splitter as train
            res = train(a.data, a.out, a.model, a.device, **kw)
        elif a.cmd == "weights":
            from encoders.facets.weights import search_run

            res = search_run(a.run, a.step, a.split)
            res = {k: v for k, v in res.items() if k != "grid"} | {"top": res["grid"][:5]}
        elif a.cmd == "intent-label":
            from encoders.facets.intent import label_contexts

            res = label_contexts(a.run, a.classifier, a.device)
        else:
            from encoders.facets.splitter import label_abstracts

            res = label_abstracts(a.run, a.classifier, a.device, everything=a.all)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(res, indent=1))
    return 0
