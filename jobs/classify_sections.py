"""The section classifier on a table of sections (TSV or Parquet) a user brings:
    python jobs/classify_sections.py --input sections.tsv --output classes.tsv [--keep-text]

Not a stage (it reads no run), so this door imports the command itself.
Also `python -m jobs.classify_sections` and `sciencemap classify-sections`."""
import sys

from sciencemap.cli import unshadow_stage_packages

unshadow_stage_packages()  # before the import: jobs/importance.py must not shadow the importance package
from importance.ingest.classify import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
