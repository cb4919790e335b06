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

.PHONY: install run test test-unit test-integration test-interop interop-deps compat-matrix lint clean soak

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

test: $(TEST_STAMP) interop-deps
	$(PY) -m pytest -n 2 $(PYTEST_ARGS)

test-unit: $(TEST_STAMP)
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

test-integration: $(TEST_STAMP)
	$(PY) -m pytest tests/integration $(PYTEST_ARGS)

# The interop suite's clients beyond the Python ones in the test extra: kcat (Debian) and kafkajs (npm,
# pinned by tests/interop/node/package-lock.json). Idempotent and quiet once installed.
SUDO := $(shell [ "$$(id -u)" = 0 ] || ! command -v sudo >/dev/null || echo sudo)
NODE_DIR := tests/interop/node

interop-deps: $(NODE_DIR)/node_modules/.package-lock.json
	@command -v kcat >/dev/null || ($(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat >/dev/null)

$(NODE_DIR)/node_modules/.package-lock.json: $(NODE_DIR)/package.json $(NODE_DIR)/package-lock.json
	cd $(NODE_DIR) && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

test-interop: $(TEST_STAMP) interop-deps
	$(PY) -m pytest tests/interop -n 2 $(PYTEST_ARGS)

# Runs the interop suite and regenerates docs/compatibility.md from its results (even when cells fail).
compat-matrix: $(TEST_STAMP) interop-deps
	mkdir -p build
	-$(PY) -m pytest tests/interop -n 2 --junitxml=build/interop-junit.xml $(PYTEST_ARGS)
	$(PY) scripts/compat_matrix.py build/interop-junit.xml docs/compatibility.md

# The crash-consistency and fuzz suites, longer: more SIGKILL points and more fuzzed frames. Override
# e.g. `make soak SOAK_KILLS=1000`; SOAK_SEED=<printed seed> replays a crash schedule.
SOAK_KILLS ?= 300
SOAK_FUZZ_EXAMPLES ?= 20000
soak: $(TEST_STAMP)
	SOAK_KILLS=$(SOAK_KILLS) SOAK_FUZZ_EXAMPLES=$(SOAK_FUZZ_EXAMPLES) $(PY) -m pytest -s -o timeout=0 \
		tests/durability/test_crash_consistency.py tests/fuzz $(PYTEST_ARGS)

lint: $(TEST_STAMP)
	$(PIP) install -q ruff mypy
	$(VENV)/bin/ruff check coordinator_server protocol tests

clean:
	rm -rf $(VENV) data .pytest_cache
