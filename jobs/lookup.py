"""The k papers most similar to one paper, with their topics and citation links to it:
    python jobs/lookup.py --run runs/x --paper-id doi:10.7554/elife.00003 [--k 10] [--json | --tsv]
    python jobs/lookup.py --run runs/x --title "words of the title"

Not a stage (it writes nothing into the run), so this door imports the command itself.
Also `python -m jobs.lookup` and `sciencemap lookup`."""
import sys

from sciencemap.cli import unshadow_stage_packages

unshadow_stage_packages()  # before the import: jobs/importance.py must not shadow the importance package
from mapping.lookup import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
