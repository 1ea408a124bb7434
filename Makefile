# Every target installs what it needs on a fresh machine: .venv, CPU torch, the package.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
# torch first, pinned: on this CPU machine it is a local CPU build (no multi-GB CUDA wheels)
TORCH_SPEC ?= torch==2.13.0
# optional features the tests and the README commands use (pyproject.toml extras)
EXTRAS ?= dev,ray,sweep

.PHONY: install test test-slow test-min-deps test-wheel docs docs-check train drive mlflow-ui mlflow-screenshot bench bench-learner bench-learning gpu-check lint format clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest

test-slow: $(STAMP)
	$(PY) -m pytest -m slow

# pyproject's ">=" minimums, installed exactly (scripts/min_deps.py) in a second venv, and the
# default test suite run on them: proves every declared minimum true. TORCH_SPEC is named
# again so that a minimum torch cannot meet fails loudly, never swaps in a multi-GB CUDA torch
MIN_VENV := .venv-min
test-min-deps:
	rm -rf $(MIN_VENV)
	$(PYTHON) -m venv $(MIN_VENV)
	$(MIN_VENV)/bin/python -m pip install -q --upgrade pip
	$(MIN_VENV)/bin/python -m pip install -q "$(TORCH_SPEC)"
	$(MIN_VENV)/bin/python scripts/min_deps.py --extras $(EXTRAS) > $(MIN_VENV)/minimums.txt
	$(MIN_VENV)/bin/python -m pip install -q -c $(MIN_VENV)/minimums.txt "$(TORCH_SPEC)" -e ".[$(EXTRAS)]"
	$(MIN_VENV)/bin/python -m pytest $(MIN_TESTS)

# a pip user's first run: the wheel in a fresh venv, trained through `trackmind-train`
test-wheel: $(STAMP)
	TORCH_SPEC="$(TORCH_SPEC)" $(PY) scripts/wheel_smoke.py --python $(PYTHON)

# the docs site: every table and plot from its result files, then a strict MkDocs build
docs: $(STAMP)
	$(PY) -m pip install -q -e ".[$(EXTRAS),docs]"
	$(PY) scripts/make_docs.py
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# CI's: the pages are what their result files give (nothing rewritten), and the site builds
docs-check: $(STAMP)
	$(PY) -m pip install -q -e ".[$(EXTRAS),docs]"
	$(PY) scripts/make_docs.py --check
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

train: $(STAMP)
	$(PY) scripts/train.py $(ARGS)

drive: $(STAMP)
	$(PY) scripts/drive.py

mlflow-ui: $(STAMP)
	mkdir -p outputs
	$(VENV)/bin/mlflow ui --backend-store-uri sqlite:///outputs/mlflow.db \
		--artifacts-destination outputs/mlartifacts --host 127.0.0.1 --port 5000

# the MLflow UI in a headless browser: docs/mlflow_*.png (needs a system Chromium, e.g.
# apt-get install chromium-headless-shell)
mlflow-screenshot: $(STAMP)
	$(PY) -m pip install -q -e ".[ui]"
	$(PY) scripts/mlflow_ui_screenshot.py $(ARGS)

bench: $(STAMP)
	$(PY) scripts/bench_env.py

bench-learner: $(STAMP)
	$(PY) scripts/bench_learner.py

# on a CUDA machine, ~6 min: learner rows, collection capacity and a 3-minute
# experiment=linesight_gpu run in one table (scripts/gpu_check.py; without CUDA: one line)
gpu-check: $(STAMP)
	$(PY) scripts/gpu_check.py $(ARGS)

# hours of training: one run per map (MINUTES each, default 30), resumable, table into README
MINUTES ?= 30
bench-learning: $(STAMP)
	$(PY) scripts/bench_learning.py --minutes $(MINUTES) $(ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check src scripts tests
	$(VENV)/bin/ruff format --check src scripts tests

format: $(STAMP)
	$(VENV)/bin/ruff format src scripts tests
	$(VENV)/bin/ruff check --fix src scripts tests

clean:
	rm -rf $(VENV) $(MIN_VENV) .pytest_cache
