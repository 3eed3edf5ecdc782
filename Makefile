# ml8s — every entry point a developer or CI needs. `make run` and `make test` work from a fresh clone.
SHELL := /bin/bash
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
# torch is pinned here, in the install step: the CPU build of 2.13.0 (a bare `torch` pulls CUDA).
TORCH := torch==2.13.0
FIND_LINKS := $(if $(wildcard /opt/wheels),--find-links /opt/wheels,)
DEMO_DATA := demo_data/churn
PIPELINE_ROOT ?= $(CURDIR)/pipeline_root

.PHONY: setup run test lint typecheck bench clean demo-data proto

$(BIN)/.installed: pyproject.toml requirements/constraints.txt
	command -v $(PY) >/dev/null || { echo "Python 3.11 is required ($(PY) not found)"; exit 1; }
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check $(FIND_LINKS) $(TORCH)
	$(BIN)/pip install -q --disable-pip-version-check $(FIND_LINKS) -c requirements/constraints.txt -e '.[train,flyte,dev]'
	touch $@

setup: $(BIN)/.installed

demo-data: setup
	$(BIN)/python -m ml8s.demo_data --out $(DEMO_DATA)

run: demo-data
	DATA_ROOT=$${DATA_ROOT:-$(DEMO_DATA)} TARGET_COLUMN=$${TARGET_COLUMN:-churned} \
	PIPELINE_ROOT_URI=$${PIPELINE_ROOT_URI:-$(PIPELINE_ROOT)} \
	$(BIN)/pyflyte run workflows/training.py training_pipeline

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: setup
	$(BIN)/mypy ml8s

test: setup lint typecheck
	$(BIN)/python -m pytest -q

bench: setup
	$(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) pipeline_root demo_data .pytest_cache .mypy_cache .ruff_cache build *.egg-info
