"""The section classifier on a table of sections (TSV or Parquet) a user brings:
    python jobs/classify_sections.py --input sections.tsv --output classes.tsv [--keep-text]

Not a stage (it reads no run), so this door imports the command itself.
Also `python -m jobs.classify_sections` and `sciencemap classify-sections`."""
import sys

from importance.classify import main

if __name__ == "__main__":
    sys.exit(main())
