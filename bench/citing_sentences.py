"""What keeping the citing sentence (mentions.context, METHODS.md §8.1) costs the full-text readers:
CPU seconds to parse the sample's 250 eLife JATS files, and the test fixture's four unArXive papers
(tests/data/unarxive-4.jsonl, read 50 times), with contexts and with the context step stubbed out, best
of three passes each, and their ratio.

    .venv/bin/python bench/citing_sentences.py
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from importance.ingest.readers import jats, s2orc

REPO = Path(__file__).resolve().parents[1]
UNARXIVE = REPO / "tests" / "data" / "unarxive-4.jsonl"


def best_of(fn, n: int = 3) -> float:
    fn()   # warm caches (the section model, regexes)
    out = []
    for _ in range(n):
        t = time.process_time()
        fn()
        out.append(time.process_time() - t)
    return min(out)


def measure(name: str, parse, inputs, stub) -> dict:
    def run():
        for path, data in inputs:
            parse(path, data)
    with_ctx = best_of(run)
    undo = stub()
    try:
        without = best_of(run)
    finally:
        undo()
    print(f"{name}: {len(inputs)} files, with contexts {with_ctx:.2f} CPU-s, without {without:.2f} CPU-s, "
          f"x{with_ctx / without:.2f}")
    return {"files": len(inputs), "with": with_ctx, "without": without}


def main() -> int:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    files = sorted((REPO / "sample" / "elife").glob("*.xml*"))
    inputs = [(str(f), f.read_bytes()) for f in files]

    def stub_jats():
        orig = jats.CitingSentences.of
        jats.CitingSentences.of = lambda self, x: None
        return lambda: setattr(jats.CitingSentences, "of", orig)

    def stub_s2orc():
        orig = s2orc._citing_sentence
        s2orc._citing_sentence = lambda *args: None
        return lambda: setattr(s2orc, "_citing_sentence", orig)

    measure("eLife JATS", lambda p, d: jats.parse(p, d, "elife"), inputs, stub_jats)
    measure("unArXive JSONL (4 papers x 50)", lambda p, d: list(s2orc.parse(p, d, "unarxive")),
            [(str(UNARXIVE), UNARXIVE.read_bytes())] * 50, stub_s2orc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
