# Two commands are enough on a fresh machine:  make run  |  make test
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
NPM_STAMP := tests/npm/node_modules/.installed

.PHONY: run test lint typecheck unit fmt clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

$(NPM_STAMP): tests/npm/package.json tests/npm/package-lock.json
	cd tests/npm && npm ci --no-audit --no-fund --loglevel=error
	touch $(NPM_STAMP)

## Run Manifold on the example config (two bundled example servers, no external services).
run: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/manifold serve --config examples/manifold.yaml

## Lint, type-check and run every test.
test: $(STAMP) $(NPM_STAMP) lint typecheck unit

lint: $(STAMP)
	$(BIN)/ruff check proxy tests benchmarks examples
	$(BIN)/ruff format --check proxy tests benchmarks examples

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP) $(NPM_STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/pytest

fmt: $(STAMP)
	$(BIN)/ruff format proxy tests benchmarks examples
	$(BIN)/ruff check --fix proxy tests benchmarks examples

clean:
	rm -rf $(VENV) tests/npm/node_modules
