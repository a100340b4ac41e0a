# privacy-ledger: `make run` serves on SQLite, `make test` runs everything.
#
# Two installs into one .venv: `make run` needs the server's runtime dependencies only (and the
# client, which the CLI uses); `make test` (and `make install`) add the dev extras: test tools,
# oracles, the browser driver, linters. Both install the server and client/ editable.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip
HOST   ?= 127.0.0.1
PORT   ?= 8000
DEPS   := pyproject.toml client/pyproject.toml
SOURCES := app client tests bench examples migrations

.PHONY: install run test lint typecheck bench clean

$(BIN)/python:
	@echo "==> creating $(VENV) with $$($(PYTHON) --version)"
	$(PYTHON) -m venv $(VENV)

$(VENV)/.runtime: $(DEPS) | $(BIN)/python
	@echo "==> installing the server and the client (runtime dependencies only; pip shows each package)"
	$(PIP) install --progress-bar on -e ./client -e .
	@touch $@
	@echo "==> installed"

$(VENV)/.dev: $(DEPS) | $(BIN)/python
	@echo "==> installing the server, the client and the dev extras (tests, oracles, linters, browser driver)"
	$(PIP) install --progress-bar on -e ./client -e '.[dev]'
	@touch $@ $(VENV)/.runtime
	@echo "==> installed"

install: $(VENV)/.dev

run: $(VENV)/.runtime
	@echo "==> migrating the database to the latest schema"
	$(BIN)/privacy-ledger migrate
	@echo "==> serving on http://$(HOST):$(PORT) (API page at /docs; Ctrl-C stops)"
	$(BIN)/privacy-ledger serve --host $(HOST) --port $(PORT)

lint: install
	$(BIN)/ruff check $(SOURCES)
	$(BIN)/ruff format --check $(SOURCES)
	$(BIN)/mypy
	$(BIN)/lint-imports

# the suite runs on TEST_WORKERS pytest-xdist workers (2: this project's machines have 2 cores
# and much of the suite waits on PostgreSQL, subprocess servers and a browser); 0 runs it in
# one process
TEST_WORKERS ?= 2

test: lint
	$(BIN)/python -m pytest -n $(TEST_WORKERS) $(PYTEST_ARGS)

bench: install
	$(BIN)/python bench/accounting.py
	$(BIN)/python bench/service.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
