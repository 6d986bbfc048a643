# Two commands are enough on a fresh machine:  make run  |  make test
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
NPM_STAMP := tests/npm/node_modules/.installed
CONFORMANCE_STAMP := tests/conformance/node_modules/.installed
CONFORMANCE_MODERN_STAMP := tests/conformance_modern/node_modules/.installed

.PHONY: run desktop-config test test-fast lint typecheck unit docs docs-serve conformance bench discovery-eval guard-eval soak system-deps fmt clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

$(NPM_STAMP): tests/npm/package.json tests/npm/package-lock.json
	cd tests/npm && npm ci --no-audit --no-fund --loglevel=error
	touch $(NPM_STAMP)

$(CONFORMANCE_STAMP): tests/conformance/package.json tests/conformance/package-lock.json
	cd tests/conformance && npm ci --no-audit --no-fund --loglevel=error
	touch $(CONFORMANCE_STAMP)

$(CONFORMANCE_MODERN_STAMP): tests/conformance_modern/package.json tests/conformance_modern/package-lock.json
	cd tests/conformance_modern && npm ci --no-audit --no-fund --loglevel=error
	touch $(CONFORMANCE_MODERN_STAMP)

## Debian packages the tests use: Prometheus (promtool and a real scraper), Redis, and Chromium
## (headless, for the approval page).
system-deps:
	@command -v prometheus >/dev/null && command -v promtool >/dev/null && command -v redis-server >/dev/null \
	  && command -v chromium >/dev/null || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	     prometheus redis-server chromium >/dev/null)

## Run Manifold on the example config (two bundled example servers, no external services).
run: $(STAMP)
	@echo "Desktop clients (Claude Desktop, Cursor) spawn it over stdio with this entry (make desktop-config):"
	@$(MAKE) --no-print-directory -s desktop-config
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/manifold serve --config examples/manifold.yaml

## The mcpServers entry that makes a desktop client spawn this checkout's Manifold on the example
## config: absolute paths, and a PATH whose python3 has the SDK the example servers import (a
## desktop app starts its servers with its own working directory and PATH).
desktop-config:
	@printf '{"mcpServers": {"manifold": {"command": "%s", "args": ["stdio", "--config", "%s"], "env": {"PATH": "%s:/usr/local/bin:/usr/bin:/bin"}}}}\n' \
	  "$(abspath $(BIN))/manifold" "$(abspath examples/manifold.yaml)" "$(abspath $(BIN))"

## Lint, type-check and run every test (the conformance suite's npm package too: its task scenarios run
## through Manifold in tests/interaction/test_tasks_conformance.py).
test: $(STAMP) $(NPM_STAMP) $(CONFORMANCE_MODERN_STAMP) system-deps lint typecheck unit

## The fast tier while working: every test that starts no process and waits on no wall clock
## (under a minute and a half on a 2-core box). Tests that do carry the `slow` marker; --fast
## makes a test that starts a process without it fail (tests/conftest.py).
test-fast: $(STAMP)
	$(BIN)/pytest -q -m "not slow" --fast

lint: $(STAMP)
	$(BIN)/ruff check proxy tests benchmarks examples
	$(BIN)/ruff format --check proxy tests benchmarks examples

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP) $(NPM_STAMP) $(CONFORMANCE_MODERN_STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/pytest -n 2 --dist loadscope

## The official MCP conformance suite, 100% of scored checks or it fails. The 0.2 line by
## requirement set (2026-07-28, 2025-11-25): the dual-era fixture alone, then Manifold fronting
## it over stdio and HTTP, and fronting a handshake-only fixture (the bridges). Then the 0.1.16
## runs: Manifold as server and as client. One check cannot pass through a handshake-only server:
## it wants the key the 2026-07-28 fixture gives its question ("user_name"), and a handshake-era
## server's request has no key, so Manifold names it ("elicitation-1").
MODERN := $(BIN)/python tests/conformance_modern/run.py
conformance: $(STAMP) $(CONFORMANCE_STAMP) $(CONFORMANCE_MODERN_STAMP)
	$(MODERN) --min-scored 120
	$(MODERN) --through-manifold --min-scored 120
	$(MODERN) --through-manifold --fixture-transport streamable-http --min-scored 120
	$(MODERN) --through-manifold --fixture-era legacy --min-scored 118 --expect-failure sep-2322-elicitation-incomplete
	$(MODERN) --requirements 2025-11-25 --min-scored 70
	$(MODERN) --requirements 2025-11-25 --through-manifold --min-scored 69
	$(MODERN) --requirements 2025-11-25 --through-manifold --fixture-transport streamable-http --min-scored 69
	$(MODERN) --requirements 2025-11-25 --through-manifold --fixture-era legacy --min-scored 69
	$(BIN)/python tests/conformance/run.py --min-scored 44
	$(BIN)/python tests/conformance/run.py --through-manifold --min-scored 45
	$(BIN)/python tests/conformance/run.py --through-manifold --fixture-transport streamable-http --min-scored 45
	$(BIN)/python tests/conformance/run.py --client --min-scored 10

## What Manifold costs against no proxy at all (see benchmarks/README.md).
bench: $(STAMP)
	$(BIN)/python -m pip install -q -e '.[test,bench]'
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m benchmarks.run
	timeout 120 $(BIN)/python -m benchmarks.discovery.evaluate
	timeout 300 $(BIN)/python -m benchmarks.guard_cost
	timeout 300 $(BIN)/python -m benchmarks.openapi_load

## Progressive discovery: recall@1/@5 of the tool search over vendored catalogs, tokens saved,
## µs per query (offline, a few seconds; writes its section of benchmarks/README.md).
discovery-eval: $(STAMP)
	timeout 120 $(BIN)/python -m benchmarks.discovery.evaluate

## Guardrail detectors: precision and recall per detector and direction on the labelled corpus
## (tuning and held-out sets), beside detect-secrets, and µs per KiB on 4 KiB and 4 MiB
## (offline, about a minute; writes benchmarks/guard/results.md).
guard-eval: $(STAMP)
	$(BIN)/python -m pip install -q -e '.[guard-eval]'
	timeout 600 $(BIN)/python -m benchmarks.guard.evaluate

## Ten minutes of load, session churn, server kills and a hostile client against one Manifold:
## leaks, crossed or lost answers, recovery times (see benchmarks/README.md, "Soak").
soak: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m benchmarks.soak

## The documentation site (docs/, mkdocs.yml) into build/site, offline and strict: a broken link or
## anchor, or a page the nav leaves out, fails it. `make test` builds it too (tests/docs/).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --clean

## Serve the site at http://127.0.0.1:8000 while you edit it (rebuilt on every change).
docs-serve: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --strict --dev-addr 127.0.0.1:8000

fmt: $(STAMP)
	$(BIN)/ruff format proxy tests benchmarks examples
	$(BIN)/ruff check --fix proxy tests benchmarks examples

clean:
	rm -rf $(VENV) tests/npm/node_modules tests/conformance/node_modules tests/conformance_modern/node_modules
