# Two commands a newcomer needs: `make demo` (Strait's main job) and `make test` (the suite).
# Each sets itself up: a virtualenv in .venv, the Python packages, and the Kafka/ZooKeeper
# jars from Maven Central (cached in ~/.cache/strait, outside git).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup demo test lint unit bench clean

$(BIN)/strait: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(BIN)/strait

setup: $(BIN)/strait
	$(BIN)/strait sandbox fetch
	bash scripts/vendor_ui.sh

demo: setup
	$(BIN)/strait demo

lint: $(BIN)/strait
	$(BIN)/ruff check src tests $(wildcard bench)
	$(BIN)/mypy

unit: $(BIN)/strait
	$(BIN)/pytest -q tests/unit

test: setup lint
	$(BIN)/pytest -q --durations=15 tests; rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing"; exit 1; fi; exit $$rc

bench: setup
	$(BIN)/strait bench all

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
