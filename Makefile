# Every target sets itself up from a fresh clone.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.test-installed
BENCH_STAMP := $(VENV)/.bench-installed
# The request path's hot modules, compiled with mypyc (setup.py, docs/decisions.md "Build and compiled hot
# path"). Only $(BUILD_STAMP) compiles: every install step below installs with COORDINATOR_PURE_PYTHON=1
# (dependencies and the editable package, no compiler), so a fresh clone builds once and a target rebuilds
# only when a compiled source changes. Python imports a module's compiled .so before its .py, so the build is
# redone whenever one of them changes (tests/conftest.py refuses to run on a stale one).
COMPILED_SOURCES := $(shell sed -n 's/^    "\(.*\.\(py\|c\)\)",$$/\1/p' setup.py)
BUILD_STAMP := $(VENV)/.compiled
# The build requirements are in the venv ($(STAMP)), so no install needs pip's isolated build environment;
# setuptools' warning that an editable install is one is no news here.
EDITABLE := PYTHONWARNINGS=ignore $(PIP) install -q --no-build-isolation
PURE_INSTALL := COORDINATOR_PURE_PYTHON=1 $(EDITABLE)

HOST ?= 127.0.0.1
PORT ?= 9092
DATA_DIR ?= ./data
PYTEST_ARGS ?=

.PHONY: install build run test test-unit test-integration test-interop interop-deps cluster-deps cluster cluster-down compat-matrix lint clean bench bench-quick soak soak-hostile

# The build requirements ([build-system] in pyproject.toml, mypy pinned) go into the venv with the package.
$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

$(STAMP): $(PY) pyproject.toml setup.py
	$(PY) -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['build-system']['requires']))" \
		| $(PIP) install -q -r /dev/stdin
	$(PURE_INSTALL) -e .
	touch $@

$(TEST_STAMP): $(STAMP)
	$(PURE_INSTALL) -e '.[test]'
	touch $@

# What an earlier build left is removed first: a module no longer listed would still be imported compiled,
# against another list's shared library (a crash on import). build_ext compiles on every core (setup.py).
$(BUILD_STAMP): $(STAMP) $(COMPILED_SOURCES)
	rm -rf build/mypyc && find coordinator_server protocol -name '*.so' -delete && rm -f *__mypyc.*.so
	$(EDITABLE) --no-deps -e .
	touch $@

install: $(STAMP)

build: $(BUILD_STAMP)

run: $(BUILD_STAMP)
	$(VENV)/bin/coordinator-server --host $(HOST) --port $(PORT) --data-dir $(DATA_DIR)

test: $(TEST_STAMP) interop-deps pipeline-deps cluster-deps kafka-deps $(BUILD_STAMP)
	$(PY) -m pytest -n 2 $(PYTEST_ARGS)

test-unit: $(TEST_STAMP) $(BUILD_STAMP)
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

test-integration: $(TEST_STAMP) $(BUILD_STAMP)
	$(PY) -m pytest tests/integration $(PYTEST_ARGS)

# The interop suite's clients beyond the Python ones in the test extra: kcat (Debian), kafkajs and
# @platformatic/kafka (npm, pinned by tests/interop/node/package-lock.json), Sarama 1.22 and kafka-go 0.2.1
# (Debian's packaged sources, built offline in GOPATH mode), franz-go, IBM Sarama and kafka-go 0.4 (Go modules
# pinned by tests/interop/go/mod/go.mod and go.sum, downloaded once from the module proxy into build/go-mod;
# they need Go >= 1.26 on PATH, newer than Debian 12's golang-go), both drivers built into build/interop-go by
# tests/interop/go_build.py, the Java client's driver compiled against Kafka's jars (kafka-deps) by
# tests/interop/java_build.py, and Burrow (Debian) for the lag-monitor test. Idempotent and quiet once installed.
SUDO := $(shell [ "$$(id -u)" = 0 ] || ! command -v sudo >/dev/null || echo sudo)
NODE_DIR := tests/interop/node
INTEROP_DEBS := kcat golang-go golang-github-shopify-sarama-dev golang-github-segmentio-kafka-go-dev burrow

interop-deps: $(NODE_DIR)/node_modules/.package-lock.json $(TEST_STAMP) kafka-deps
	@dpkg-query -W -f='$${Status}\n' $(INTEROP_DEBS) 2>/dev/null | grep -c '^install ok installed' | grep -qx $(words $(INTEROP_DEBS)) \
		|| ($(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(INTEROP_DEBS) >/dev/null)
	@$(PY) -m tests.interop.go_build >/dev/null
	@$(PY) -m tests.interop.java_build >/dev/null

$(NODE_DIR)/node_modules/.package-lock.json: $(NODE_DIR)/package.json $(NODE_DIR)/package-lock.json
	cd $(NODE_DIR) && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

# The cluster's metadata quorum (docs/decisions.md, "Cluster"): Debian's ZooKeeper 3.8, run by
# coordinator_server/tools/local_zookeeper.py from its jars (never as the system service). Its JRE comes
# from pipeline-deps (default-jre-headless). Idempotent and quiet once installed.
cluster-deps: pipeline-deps
	@[ -f /usr/share/java/zookeeper.jar ] || ($(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq zookeeper >/dev/null)

# ZooKeeper and three nodes on 127.0.0.1 in the background (docs/cluster.md); CLUSTER_ARGS e.g. --base-port 19092.
CLUSTER_ARGS ?=
cluster: $(STAMP) cluster-deps $(BUILD_STAMP)
	$(PY) scripts/cluster.py up $(CLUSTER_ARGS)

cluster-down:
	$(PY) scripts/cluster.py down $(CLUSTER_ARGS)

test-interop: $(TEST_STAMP) interop-deps cluster-deps $(BUILD_STAMP)
	$(PY) -m pytest tests/interop -n 2 $(PYTEST_ARGS)

# Runs the interop suite and regenerates docs/compatibility.md from its results (even when cells fail).
compat-matrix: $(TEST_STAMP) interop-deps cluster-deps $(BUILD_STAMP)
	mkdir -p build
	-$(PY) -m pytest tests/interop -n 2 --junitxml=build/interop-junit.xml $(PYTEST_ARGS)
	$(PY) scripts/compat_matrix.py build/interop-junit.xml docs/compatibility.md

# The crash-consistency suites (one node, and the cluster's kill -9 of leaders) and the fuzz suite, longer:
# more SIGKILL points and more fuzzed frames. Override e.g. `make soak SOAK_KILLS=1000 CLUSTER_SOAK_KILLS=300`;
# SOAK_SEED / CLUSTER_SOAK_SEED=<printed seed> replays a crash schedule.
SOAK_KILLS ?= 300
CLUSTER_SOAK_KILLS ?= 100
SOAK_FUZZ_EXAMPLES ?= 20000
# The hostile-clients soak (tests/durability/test_hostile_soak.py): SOAK_MINUTES of a healthy group beside
# every misbehaving client; results and a plot in build/soak/. `make soak-hostile SOAK_MINUTES=5` runs it alone.
SOAK_MINUTES ?= 20
soak: $(TEST_STAMP) cluster-deps $(BUILD_STAMP)
	SOAK_KILLS=$(SOAK_KILLS) CLUSTER_SOAK_KILLS=$(CLUSTER_SOAK_KILLS) SOAK_FUZZ_EXAMPLES=$(SOAK_FUZZ_EXAMPLES) \
		$(PY) -m pytest -s -o timeout=0 tests/durability/test_crash_consistency.py \
		tests/cluster/test_cluster_crash_consistency.py tests/fuzz $(PYTEST_ARGS)
	$(MAKE) soak-hostile

soak-hostile: $(TEST_STAMP) $(BENCH_STAMP) $(BUILD_STAMP)
	SOAK_MINUTES=$(SOAK_MINUTES) $(PY) -m pytest -s -o timeout=0 tests/durability/test_hostile_soak.py $(PYTEST_ARGS)

lint: $(TEST_STAMP)
	$(PIP) install -q ruff mypy
	$(VENV)/bin/ruff check coordinator_server protocol tests

# Measured speed (benchmarks/, docs/performance.md): every figure a ratio against a floor server and
# librdkafka's mock cluster measured in the same run, and Apache Kafka beside it, one node and a cluster of
# three (hence kafka-deps); the cluster scenario (ZooKeeper and three nodes, hence cluster-deps) against a
# single node. `bench` (21 min on 2 cores, 2026-12-03) writes benchmarks/results/<date>.json,
# docs/performance.md and its plot; `bench-quick` (8 min) only prints.
BENCH_ARGS ?=

$(BENCH_STAMP): $(STAMP)
	$(PURE_INSTALL) -e '.[bench]'
	touch $@

bench: $(BENCH_STAMP) cluster-deps kafka-deps $(BUILD_STAMP)
	$(PY) -m benchmarks.run --profile $(BENCH_ARGS)

bench-quick: $(BENCH_STAMP) cluster-deps kafka-deps $(BUILD_STAMP)
	$(PY) -m benchmarks.run --quick $(BENCH_ARGS)

clean:
	rm -rf $(VENV) data .pytest_cache

# The Spark data pipeline (docs/pipeline.md): Java 17+ from Debian when no suitable one is on PATH, and
# the `pipeline` extra (PySpark 4, pandas, pyarrow, matplotlib). Idempotent and quiet once installed.
.PHONY: pipeline pipeline-deps pipeline-cluster
PIPELINE_STAMP := $(VENV)/.pipeline-installed
PIPELINE_DIR ?= build/pipeline

$(PIPELINE_STAMP): $(STAMP)
	$(PURE_INSTALL) -e '.[pipeline]'
	touch $@

pipeline-deps: $(PIPELINE_STAMP)
	@command -v java >/dev/null && java -version 2>&1 | grep -q 'version "\(1[7-9]\|2[0-9]\)' || ($(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq default-jre-headless >/dev/null)

# Demo history from real servers and clients, then every job and the report over it:
# $(PIPELINE_DIR)/demo (the logs), $(PIPELINE_DIR)/out (Parquet) and $(PIPELINE_DIR)/out/report/index.html.
pipeline: pipeline-deps $(BUILD_STAMP)
	$(VENV)/bin/coordinator-server pipeline demo-data --out $(PIPELINE_DIR)/demo --force
	$(VENV)/bin/coordinator-server pipeline all $(PIPELINE_DIR)/demo/node-0 $(PIPELINE_DIR)/demo/node-1 --out $(PIPELINE_DIR)/out \
		--server-log '$(PIPELINE_DIR)/demo/node-*/server-log.jsonl'
	@echo "report: $(PIPELINE_DIR)/out/report/index.html"

# The same jobs on a Spark standalone cluster of this machine: a master and PIPELINE_WORKERS workers (1 core,
# 1 GiB each) started from the installed pyspark for the run and stopped after it, also on failure or Ctrl-C
# (`pipeline cluster-run`, pipeline/standalone.py). The demo data is made first if missing.
# $(PIPELINE_DIR)/cluster/out (Parquet, report) and $(PIPELINE_DIR)/cluster/logs (master, workers, executors).
PIPELINE_WORKERS ?= 2
pipeline-cluster: pipeline-deps $(BUILD_STAMP)
	@[ -f $(PIPELINE_DIR)/demo/manifest.json ] && [ -f $(PIPELINE_DIR)/demo/node-0/server-log.jsonl ] \
		|| $(VENV)/bin/coordinator-server pipeline demo-data --out $(PIPELINE_DIR)/demo --force
	$(VENV)/bin/coordinator-server pipeline cluster-run --workers $(PIPELINE_WORKERS) --logs $(PIPELINE_DIR)/cluster/logs \
		all $(PIPELINE_DIR)/demo/node-0 $(PIPELINE_DIR)/demo/node-1 --out $(PIPELINE_DIR)/cluster/out \
		--server-log '$(PIPELINE_DIR)/demo/node-*/server-log.jsonl'

# Apache Kafka beside the server (docs/kafka.md): the broker's jars from Maven Central, versions pinned by
# tests/kafka/pom.xml, copied into build/kafka/lib; redone only when the pom changes. Maven (Debian's, with
# its JDK) is installed when missing, and Java 17+ to run the broker. Idempotent and quiet once installed.
.PHONY: kafka kafka-deps test-differential
KAFKA_LIB := build/kafka/lib
KAFKA_STAMP := build/kafka/.resolved
KAFKA_PORT ?= 0
KAFKA_CONTROLLER_PORT ?= 0

$(KAFKA_STAMP): tests/kafka/pom.xml
	@command -v mvn >/dev/null || ($(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq maven >/dev/null)
	@rm -rf $(KAFKA_LIB) && mkdir -p $(dir $(KAFKA_STAMP))
	@echo "resolving Apache Kafka from Maven Central into $(KAFKA_LIB)"
	@mvn -B -q -f tests/kafka/pom.xml dependency:copy-dependencies -DoutputDirectory=$(CURDIR)/$(KAFKA_LIB) \
		>$(dir $(KAFKA_STAMP))mvn.log 2>&1 || (cat $(dir $(KAFKA_STAMP))mvn.log; exit 1)
	@touch $@

# javac too: the differential suite compiles its small Java driver of Kafka's groups tool and Admin
# (tests/kafka/java_tools.py), and the interop suite the Java client's driver (tests/interop/java_build.py).
kafka-deps: $(KAFKA_STAMP)
	@command -v java >/dev/null && java -version 2>&1 | grep -q 'version "\(1[7-9]\|2[0-9]\)' || ($(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq default-jre-headless >/dev/null)
	@command -v javac >/dev/null || ($(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq default-jdk-headless >/dev/null)

# One KRaft broker (its own controller) in the foreground on KAFKA_PORT (default: a free one), a fresh log
# dir each run; it prints its address once FindCoordinator answers, and Ctrl-C stops it.
kafka: $(STAMP) kafka-deps
	$(PY) -m tests.kafka.broker --port $(KAFKA_PORT) --controller-port $(KAFKA_CONTROLLER_PORT)

# The same raw-wire scenarios against Kafka and against the server, answers compared (tests/differential).
test-differential: $(TEST_STAMP) kafka-deps $(BUILD_STAMP)
	$(PY) -m pytest tests/differential -p no:xdist $(PYTEST_ARGS)
