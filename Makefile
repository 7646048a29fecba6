# Tributary: the two commands a fresh machine needs are `make run` (a local 3-node cluster)
# and `make test`. Both create .venv first; `run` installs only what a cluster needs, `test` adds
# the test and Spark extras and the Debian packages the tests use.
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
RUN_STAMP := $(VENV)/.installed-run
TEST_STAMP := $(VENV)/.installed-test
# Debian packages the tests use: faketime (the Jepsen-style test steps node clocks with it) and
# kcat (the Kafka conformance tests run it against a cluster)
TEST_DEBIAN_PACKAGES := faketime kcat

.PHONY: run test lint bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(RUN_STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e .
	touch $@

$(TEST_STAMP): pyproject.toml | $(PY)
	@missing=$$(for package in $(TEST_DEBIAN_PACKAGES); do dpkg-query -W -f='$${Status}' $$package 2>/dev/null \
		| grep -q 'ok installed' || echo $$package; done); \
	if [ -n "$$missing" ] && command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
		apt-get install -y -q $$missing >/dev/null \
		|| (apt-get update -q >/dev/null && apt-get install -y -q $$missing >/dev/null); fi
	$(PY) -m pip install --quiet -e '.[test,spark]'
	touch $@

## run: a local 3-node cluster: Kafka on 127.0.0.1:9092-9094, HTTP on 9192-9194 (RUN_ARGS="--data-dir DIR --base-port N")
run: $(RUN_STAMP)
	$(VENV)/bin/tributary-node dev $(RUN_ARGS)

## test: lint, then the whole test suite (add PYTEST_ARGS="-k name" to narrow it)
test: $(TEST_STAMP)
	$(VENV)/bin/ruff check .
	$(PY) -m pytest $(PYTEST_ARGS)

lint: $(TEST_STAMP)
	$(VENV)/bin/ruff check .

## bench: storage benchmarks; prints tables (BENCH_ARGS="--log-mib 256" for a smaller run)
bench: $(RUN_STAMP)
	$(PY) -m bench.storage_bench $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis .ruff_cache
