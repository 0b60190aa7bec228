"""A representation benchmark's own table from its official release files and your vectors:
    python jobs/benchmark.py --suite scidocs --data /data/scidocs --vectors runs/x
    python jobs/benchmark.py --suite csfcube --data /data/CSFCube --vectors specter2.jsonl [--split dev]

Suites: scidocs, csfcube, relish, scirepeval (METHODS.md §7.1). Vectors: SciDocs embeddings JSONL,
Parquet of paper_id + vector, or a run directory. Not a stage (it writes nothing).
Also `python -m jobs.benchmark` and `sciencemap benchmark`."""
import sys

from sciencemap.cli import unshadow_stage_packages

unshadow_stage_packages()  # before the import: jobs/importance.py must not shadow the importance package
from mapping.evaluation.benchmarks import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
