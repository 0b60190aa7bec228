"""The facet classifiers and the labelling of a run's text (METHODS.md §8.1):
    python jobs/facets.py intent-train --data DIR/sci-cite --out runs/x/models/intent
    python jobs/facets.py intent-label --run runs/x
    python jobs/facets.py splitter-train --data DIR/csabstruct --out runs/x/models/splitter
    python jobs/facets.py splitter-label --run runs/x

Not a stage (a run without facets never needs it), so this door imports the command itself.
Also `python -m jobs.facets` and `sciencemap facets`."""
import sys

from sciencemap.cli import unshadow_stage_packages

unshadow_stage_packages()  # before the import: jobs/importance.py must not shadow the importance package
from encoders.facets.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
