"""Write a CL-SciSumm annotation file of the text form ("Field: value | Field: value" lines, the
2018 training set) in the CSV form of the 2018 test set (a developer tool, never run by the
pipeline; it wrote the annotator CSVs of tests/data/clscisumm-csv).

The CSV header is the test set's: the text form's fields plus "Citation Text Clean" (the citation
text without its <S ...> markup, whitespace collapsed). Written by Python's csv writer, so fields
holding commas or quotes are quoted and their quotes doubled. --citing keeps only the rows of those
citing papers (an annotator who annotated fewer citances).

    python tools/clscisumm_to_csv.py RP/annotation/RP.annv3.txt out.csv [--citing C02-1033 P04470]
"""
import argparse
import csv
import re
from pathlib import Path

HEADER = ["Citance Number", "Reference Article", "Citing Article", "Citation Marker Offset", "Citation Marker",
          "Citation Offset", "Citation Text", "Citation Text Clean", "Reference Offset", "Reference Text",
          "Discourse Facet"]
FIELD = re.compile(r"\s*([A-Za-z ]+?)\s*:\s*(.*)", re.S)


def text_rows(text: str) -> list[dict]:
    rows = []
    for line in text.splitlines():
        if "Citance Number" not in line:
            continue
        row = {}
        for part in line.split(" | "):
            m = FIELD.match(part)
            if m and m.group(1).strip() in HEADER:
                row.setdefault(m.group(1).strip(), m.group(2).strip())
        row["Citation Text Clean"] = " ".join(re.sub(r"<[^>]+>", " ", row.get("Citation Text", "")).split())
        rows.append(row)
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("annotation", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--citing", nargs="*", help="keep only these citing papers' rows")
    a = ap.parse_args(argv)
    rows = text_rows(a.annotation.read_text(encoding="utf-8", errors="replace"))
    if a.citing:
        rows = [r for r in rows if r.get("Citing Article") in a.citing]
    with a.out.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(HEADER)
        w.writerows([[r.get(h, "") for h in HEADER] for r in rows])
    print(f"{a.out}: {len(rows)} rows")


if __name__ == "__main__":
    main()
