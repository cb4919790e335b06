# Every target sets itself up from a fresh clone.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.test-installed

HOST ?= 127.0.0.1
PORT ?= 9092
DATA_DIR ?= ./data
PYTEST_ARGS ?=

.PHONY: install run test test-unit test-integration lint clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

$(STAMP): $(PY) pyproject.toml
	$(PIP) install -q -e .
	touch $@

$(TEST_STAMP): $(STAMP)
	$(PIP) install -q -e '.[test]'
	touch $@

install: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/coordinator-server --host $(HOST) --port $(PORT) --data-dir $(DATA_DIR)

test: $(TEST_STAMP)
	$(PY) -m pytest -n 2 $(PYTEST_ARGS)

test-unit: $(TEST_STAMP)
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

test-integration: $(TEST_STAMP)
	$(PY) -m pytest tests/integration $(PYTEST_ARGS)

lint: $(TEST_STAMP)
	$(PIP) install -q ruff mypy
	$(VENV)/bin/ruff check coordinator_server protocol tests

clean:
	rm -rf $(VENV) data .pytest_cache
