PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP_RUN := $(VENV)/.installed-run
STAMP_TEST := $(VENV)/.installed-test

.PHONY: run test lint typecheck install clean bench

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP_RUN): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $@

$(STAMP_TEST): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@ $(STAMP_RUN)

install: $(STAMP_RUN)

run: $(STAMP_RUN)
	$(BIN)/jobring run

lint: $(STAMP_TEST)
	$(BIN)/ruff check src tests bench

typecheck: $(STAMP_TEST)
	$(BIN)/mypy

test: $(STAMP_TEST) lint typecheck
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) jobring.db .pytest_cache .mypy_cache .ruff_cache
