"""The embed-time sentence split of UniFAR (METHODS.md §8.4): pysbd (sciencemap.text.split_sentences,
what training's abstract_facets and today's embedding use) beside the cheap boundary rule of the citing
sentences (importance.ingest.readers.sentences.sentence_bounds), on real abstracts.

    .venv/bin/python bench/sentence_split.py [--csv FILE.csv.gz ...] [--repeat 3]

Prints CPU seconds per 1,000 abstracts for each, their ratio, and how far the rule agrees with pysbd:
the share of abstracts split identically, the same number of sentences, and boundary precision /
recall / F1 (a boundary = the character offset in the white-space-folded abstract where a sentence
starts, pysbd as the reference). A rule that agrees on nearly every abstract could replace pysbd at
embed time only if training's split changed with it (the model reads the same spans it trained on).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def folded(text: str) -> str:
    from sciencemap.text import clean_text

    return " ".join(clean_text(text).split())


def starts_pysbd(text: str) -> list[int]:
    from sciencemap.text import split_sentences

    out, at = [], 0
    for s in split_sentences([text]):
        i = text.find(s, at)
        if i < 0:           # pysbd changed the text (rare): skip the sentence, keep the others aligned
            continue
        out.append(i)
        at = i + len(s)
    return out


def starts_rule(text: str) -> list[int]:
    from importance.ingest.readers.sentences import sentence_bounds

    return sentence_bounds(text)


def main() -> None:
    import pandas as pd

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--csv", nargs="+", default=None,
                    help="PubMed CSVs (.gz) with an abstract(Text) column (default: the repo sample's three, 1,250 abstracts)")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    paths = [Path(p) for p in a.csv] if a.csv else sorted((REPO / "sample" / "pubmed").glob("*.csv.gz"))
    texts = []
    for path in paths:
        df = pd.read_csv(path)
        col = next(c for c in df.columns if c.lower() in ("abstract", "abstracttext"))
        texts += [folded(t) for t in df[col].dropna().astype(str) if folded(t)]
    starts_pysbd(texts[0])   # load pysbd before timing
    cpu = {}
    res = {}
    for name, fn in (("pysbd", starts_pysbd), ("rule", starts_rule)):
        t = time.process_time()
        for _ in range(a.repeat):
            res[name] = [fn(x) for x in texts]
        cpu[name] = (time.process_time() - t) / a.repeat / len(texts) * 1000
    same = sum(p == r for p, r in zip(res["pysbd"], res["rule"]))
    count = sum(len(p) == len(r) for p, r in zip(res["pysbd"], res["rule"]))
    tp = sum(len(set(p[1:]) & set(r[1:])) for p, r in zip(res["pysbd"], res["rule"]))
    n_p = sum(len(p) - 1 for p in res["pysbd"])
    n_r = sum(len(r) - 1 for r in res["rule"])
    prec, rec = tp / max(n_r, 1), tp / max(n_p, 1)
    print(f"{len(texts)} abstracts from {', '.join(p.name for p in paths)}, "
          f"{n_p + len(texts)} pysbd sentences")
    print(f"CPU s per 1,000 abstracts: pysbd {cpu['pysbd']:.3f}, rule {cpu['rule']:.3f}, "
          f"ratio pysbd/rule {cpu['pysbd'] / max(cpu['rule'], 1e-9):.1f}")
    print(f"rule vs pysbd: identical split {same / len(texts):.4f}, same sentence count {count / len(texts):.4f}, "
          f"boundary precision {prec:.4f} recall {rec:.4f} F1 {2 * prec * rec / max(prec + rec, 1e-12):.4f}")


if __name__ == "__main__":
    main()
