# privacy-ledger: `make run` serves on SQLite, `make test` runs everything.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
HOST   ?= 127.0.0.1
PORT   ?= 8000

.PHONY: install run test lint typecheck bench clean

$(BIN)/.installed: pyproject.toml client/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ./client -e '.[dev]'
	touch $@

install: $(BIN)/.installed

run: install
	$(BIN)/python -m app.cli migrate
	$(BIN)/python -m app.cli serve --host $(HOST) --port $(PORT)

lint: install
	$(BIN)/ruff check app client tests bench examples migrations
	$(BIN)/ruff format --check app client tests bench examples migrations
	$(BIN)/mypy

test: lint
	$(BIN)/python -m pytest $(PYTEST_ARGS)

bench: install
	$(BIN)/python bench/accounting.py
	$(BIN)/python bench/service.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
