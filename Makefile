# Two entry points for a fresh machine (see README.md): `make quickstart` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEFAULT_IMAGE := local-debian13

.PHONY: quickstart test lint unit bench readme clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

## Set up, check the embedded default image and render its resolved vars.
quickstart: $(STAMP)
	$(BIN)/nodeforge check $(DEFAULT_IMAGE)
	$(BIN)/nodeforge render $(DEFAULT_IMAGE) -o build/$(DEFAULT_IMAGE).vars.json

## Set up and run the whole suite: linters, type checks, unit tests.
test: lint unit

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/yamllint --strict .
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/ansible-lint

unit: $(STAMP)
	$(BIN)/pytest

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_check.py

readme: $(STAMP)
	$(BIN)/python tools/readme_matrix.py

clean:
	rm -rf $(VENV) build .pytest_cache .mypy_cache .ruff_cache .hypothesis
