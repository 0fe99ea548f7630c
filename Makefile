# Two entry points for a fresh machine (see README.md): `make quickstart` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEFAULT_IMAGE := local-debian12
# Molecule scenarios wait on podman exec more than on the CPU: three workers on two cores pay
# off. Tests that share the local image run in one xdist group (tests/integration/conftest.py).
PYTEST_PARALLEL ?= -n 3 --dist loadgroup

.PHONY: quickstart podman test canary lint bench readme clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

## Set up (venv, podman) and build the embedded default image into a local container image.
quickstart: $(STAMP) podman
	$(BIN)/nodeforge check $(DEFAULT_IMAGE)
	$(BIN)/nodeforge build $(DEFAULT_IMAGE) --target local --reconverge

## podman, runc, debootstrap and the rpm tools with the settings these machines need (root;
## idempotent).
podman:
	@command -v podman >/dev/null && command -v debootstrap >/dev/null \
	  && command -v createrepo_c >/dev/null && command -v promtool >/dev/null \
	  && test -f /etc/containers/containers.conf.d/50-nodeforge.conf \
	  || tools/setup-podman.sh

## Set up and run the whole suite: linters, type checks, unit tests, then the integration
## tests (every Molecule scenario, the local build and its failure modes), which need podman.
test: lint podman
	NODEFORGE_REQUIRE_PODMAN=1 PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/pytest $(PYTEST_PARALLEL) --durations=50 -m "not upstream"

## What live PyPI says of the shipped locks today (tests marked `upstream`): a canary to run on a
## schedule; its verdict changes when PyPI does, so it does not gate `make test`.
canary: $(STAMP)
	$(BIN)/pytest -m upstream

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/yamllint --strict .
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/ansible-lint

bench: $(STAMP) podman
	$(BIN)/python benchmarks/bench_startup.py
	$(BIN)/python benchmarks/bench_check.py
	$(BIN)/python benchmarks/bench_local_build.py
	$(BIN)/python benchmarks/bench_fleet.py

readme: $(STAMP)
	$(BIN)/python tools/readme_matrix.py

clean:
	rm -rf $(VENV) build .pytest_cache .mypy_cache .ruff_cache .hypothesis
