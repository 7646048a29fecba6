# Tributary: the two commands a fresh machine needs are `make run` (a local 3-node cluster)
# and `make test`. Both create .venv and install the project into it first.
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test lint bench clean

$(STAMP): pyproject.toml
	@# Debian packages the tests use: faketime (the Jepsen-style test steps node clocks with it)
	@if ! [ -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 ] && command -v apt-get >/dev/null \
		&& [ "$$(id -u)" = 0 ]; then apt-get install -y -q faketime >/dev/null \
		|| (apt-get update -q >/dev/null && apt-get install -y -q faketime >/dev/null); fi
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,spark]'
	touch $(STAMP)

## run: a local 3-node cluster on 127.0.0.1:9092-9094 (RUN_ARGS="--data-dir DIR --base-port N")
run: $(STAMP)
	$(VENV)/bin/tributary-node dev $(RUN_ARGS)

## test: lint, then the whole test suite (add PYTEST_ARGS="-k name" to narrow it)
test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(PY) -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .

## bench: storage benchmarks; prints tables (BENCH_ARGS="--log-mib 256" for a smaller run)
bench: $(STAMP)
	$(PY) -m bench.storage_bench $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis .ruff_cache
