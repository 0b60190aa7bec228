"""Raw reference strings on the unArXive sample (issue 17): the real ingest stage, then the years and
titles of what it wrote, and a hand check of 100 cited-only papers.

Extracts ../shared/data/unarxive-sample/unarXive_data_sample.tar.gz into --cache (once), runs
importance.ingest.run_ingest on it (format unarxive, local Spark) into --run, and prints:

- the year range of all papers (full text and cited-only) and of all references, and how many years
  lie outside [1600, citing year + 1] (a reference: its citing paper's year; a cited-only paper: the
  latest year of the papers citing it; a full-text paper: the current year) — must be 0;
- how many references got a title and how many did not, and the same for the cited-only papers;
- 100 cited-only papers (has_fulltext false) drawn with random.Random(0) from the sorted ids, each
  with its title and the raw string of the reference it was made from.

Verdicts by hand (bench/data/refstrings_unarxive_check.tsv: paper_id, title, raw, verdict ok|wrong,
note): "ok" = the title is the work's title as the string gives it, or null. When the file holds
exactly the printed sample (same ids and titles) the script prints the number of ok verdicts;
otherwise it says which rows differ (the check must then be redone).

Verdict lines (met, MISSED, or not checked with the reason): no year outside the range; at least
--target-ok (90) ok verdicts in the hand check (not checked when the file is missing or holds
another sample). Exit 1 when any is missed or not checked (--no-fail: 0).

    .venv/bin/python bench/refstrings_unarxive.py [--cache /tmp/refstrings_cache] [--run /tmp/refstrings_run]
        [--write-sample bench/data/refstrings_unarxive_sample.tsv]
"""
from __future__ import annotations

import argparse
import csv
import random
import sys
import tarfile
import time
from datetime import date
from pathlib import Path

from verdicts import Verdicts  # bench/verdicts.py; a script's own folder is on its import path

TAR = Path(__file__).resolve().parents[2] / "shared" / "data" / "unarxive-sample" / "unarXive_data_sample.tar.gz"
CHECK = Path(__file__).resolve().parent / "data" / "refstrings_unarxive_check.tsv"
SAMPLE_SIZE, SEED = 100, 0


def extract(cache: Path) -> Path:
    dest = cache / "unarxive"
    if not dest.exists():
        tmp = cache / "unarxive.tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        with tarfile.open(TAR) as t:
            t.extractall(tmp, filter="data")
        tmp.rename(dest)
    return dest


def one_line(text) -> str:
    return " ".join(str(text).split()) if text is not None else ""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", default="/tmp/refstrings_cache")
    ap.add_argument("--run", default="/tmp/refstrings_run")
    ap.add_argument("--write-sample", help="also write the sample as a TSV (paper_id, title, raw) to this path")
    ap.add_argument("--target-ok", type=int, default=90, help="ok verdicts of the hand check, at least")
    Verdicts.add_arguments(ap)
    a = ap.parse_args(argv)
    import pandas as pd
    import pyarrow.parquet as pq

    from importance.ingest.job import IngestConfig, run_ingest
    from sciencemap.layout import RunLayout

    src = extract(Path(a.cache))
    layout = RunLayout(Path(a.run))
    t = time.time()
    s = run_ingest(IngestConfig(inputs=[{"path": str(src), "format": "unarxive", "source": "unarxive"}]), layout)
    print(f"ingest of {src} done in {time.time() - t:.1f} s; counts add up: {s['check_input_equals_papers_plus_rejects']}")
    papers = pq.read_table(layout.table("papers")).to_pandas()
    refs = pq.read_table(layout.table("references")).to_pandas()

    # ---- years
    year_of = dict(zip(papers.paper_id, papers.year))
    refs["citing_year"] = refs.citing_id.map(year_of)
    now = date.today().year
    ref_bad = refs[refs.year.notna() & ((refs.year < 1600) | (refs.year > refs.citing_year.fillna(now) + 1))]
    latest_citing = refs.groupby("cited_id").citing_year.max()
    cited_only = papers[~papers.has_fulltext]
    full = papers[papers.has_fulltext]
    co_limit = cited_only.paper_id.map(latest_citing).fillna(now) + 1
    co_bad = cited_only[cited_only.year.notna() & ((cited_only.year < 1600) | (cited_only.year > co_limit))]
    ft_bad = full[full.year.notna() & ((full.year < 1600) | (full.year > now + 1))]
    print("\n== years")
    for name, df in (("papers (all)", papers), ("full-text papers", full), ("cited-only papers", cited_only),
                     ("references", refs)):
        y = df.year.dropna()
        print(f"{name:<20} {len(df):>6} rows, {len(y):>6} with a year, range {int(y.min()) if len(y) else '-'}"
              f"..{int(y.max()) if len(y) else '-'}")
    n_out = len(ref_bad) + len(co_bad) + len(ft_bad)
    print(f"years outside [1600, citing year + 1]: references {len(ref_bad)}, cited-only papers {len(co_bad)}, "
          f"full-text papers {len(ft_bad)}; total {n_out}")
    for _, r in ref_bad.head(10).iterrows():
        print(f"  {r.citing_id} {r.ref_key}: {int(r.year)} (citing {r.citing_year}) {one_line(r.raw)[:150]}")

    # ---- titles
    print("\n== titles")
    n_ref_t = int(refs.title.notna().sum())
    print(f"references: {len(refs)}, with a title {n_ref_t}, without {len(refs) - n_ref_t}; with a raw string "
          f"{int(refs.raw.notna().sum())}; title equal to the raw string {int((refs.title == refs.raw).sum())}")
    n_co_t = int(cited_only.title.notna().sum())
    print(f"cited-only papers: {len(cited_only)}, with a title {n_co_t}, without {len(cited_only) - n_co_t}; "
          f"cited_id kinds: " + ", ".join(f"{k} {v}" for k, v in
                                          cited_only.paper_id.str.split(":").str[0].value_counts().items()))

    # ---- the sample: each cited-only paper with the reference its row was made from (the first
    # by (has title, citing_id, ref_key), as importance.ingest.resolve.cited_only_papers picks it)
    ids = sorted(cited_only.paper_id)
    sample = random.Random(SEED).sample(ids, min(SAMPLE_SIZE, len(ids)))
    refs["_no_title"] = refs.title.isna()
    first_ref = refs.sort_values(["_no_title", "citing_id", "ref_key"]).drop_duplicates("cited_id").set_index("cited_id")
    title_of = {pid: (None if pd.isna(t) else t) for pid, t in zip(cited_only.paper_id, cited_only.title)}
    rows = [(pid, title_of[pid], first_ref.raw.get(pid)) for pid in sample]
    print(f"\n== {len(rows)} random cited-only papers (random.Random({SEED}).sample of the sorted ids)")
    for i, (pid, title, raw) in enumerate(rows, 1):
        print(f"{i:>3} {pid}\n    title: {title!r}\n    raw:   {one_line(raw)}")
    if a.write_sample:
        with open(a.write_sample, "w", newline="") as f:
            w = csv.writer(f, delimiter="\t", lineterminator="\n")
            w.writerow(["paper_id", "title", "raw"])
            for pid, title, raw in rows:
                w.writerow([pid, one_line(title) if title is not None else "", one_line(raw)])
        print(f"sample written to {a.write_sample}")

    verdicts = Verdicts()
    verdicts.at_most("years outside [1600, citing year + 1]", n_out, 0, "{:d}")

    # ---- the hand check
    print("\n== hand check")
    hand = f"hand check: ok verdicts of the {len(rows)} sampled cited-only papers"
    if not CHECK.exists():
        verdicts.not_checked(hand, f"no verdicts yet ({CHECK})", f">= {a.target_ok}")
        return verdicts.finish(a.no_fail)
    with open(CHECK, newline="") as f:
        checked = list(csv.DictReader(f, delimiter="\t"))
    got = {r["paper_id"]: r for r in checked}
    differ = [pid for pid, title, _ in rows
              if pid not in got or got[pid]["title"] != (one_line(title) if title is not None else "")]
    if differ or len(checked) != len(rows):
        print(f"{CHECK.name} does not match this sample ({len(differ)} of {len(rows)} rows differ, "
              f"{len(checked)} rows in the file): the check must be redone. First: {differ[:5]}")
        verdicts.not_checked(hand, f"{CHECK.name} holds another sample: the check must be redone", f">= {a.target_ok}")
        return verdicts.finish(a.no_fail)
    ok = sum(r["verdict"] == "ok" for r in checked)
    with_title = [r for r in checked if r["title"]]
    ok_titled = sum(r["verdict"] == "ok" for r in with_title)
    formula = sum(r["verdict"] == "ok" and r["note"].startswith("formula dropped") for r in checked)
    print(f"{CHECK.name} matches the sample: {ok} of {len(checked)} ok (title = the work's title, or null); "
          f"{len(with_title)} have a title, {ok_titled} of them right ({formula} of these lack a formula the "
          f"string held as a placeholder); {len(checked) - len(with_title)} null")
    for r in checked:
        if r["verdict"] != "ok":
            print(f"  wrong: {r['paper_id']} {r['title']!r} ({r['note']})")
    verdicts.at_least(hand, ok, a.target_ok, "{:d}")
    return verdicts.finish(a.no_fail)


if __name__ == "__main__":
    sys.exit(main())
