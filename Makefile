# slicemeter: `make demo` runs the local demo, `make test` the test suite. Both set up first.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
DEBS    := prometheus chromium postgresql

.PHONY: setup lake-setup system-deps focus-validator test test-suite test-lake demo bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# the editable install maps the slicemeter.* namespace onto the top folders through an import
	# hook, and setuptools warns on every install that local folders could shadow it: they are it
	PYTHONWARNINGS='ignore:Editable installation' $(BIN)/python -m pip install -q -e '.[dev]'
	# the deprecated `pynvml` wrapper (an older install's) hooks every import of NVIDIA's
	# `pynvml` module to print a FutureWarning; nvidia-ml-py alone provides the module
	$(BIN)/python -m pip uninstall -q -y pynvml 2>/dev/null || true
	touch $@

# The DuckLake environment (.venv-lake: the `lake` extra pins DuckDB 1.5.5, the one version
# its extension wheels are built for); tests/lake/ runs in it.
LAKE_VENV  ?= .venv-lake
LAKE_STAMP := $(LAKE_VENV)/.installed
lake-setup: $(LAKE_STAMP)

$(LAKE_STAMP): pyproject.toml
	test -x $(LAKE_VENV)/bin/python || $(PY) -m venv $(LAKE_VENV)
	$(LAKE_VENV)/bin/python -m pip install -q --upgrade pip
	PYTHONWARNINGS='ignore:Editable installation' $(LAKE_VENV)/bin/python -m pip install -q -e '.[all,lake,test]'
	$(LAKE_VENV)/bin/python -m pip uninstall -q -y pynvml 2>/dev/null || true
	touch $@

# Debian packages the tests drive for real: Prometheus (server and promtool), Chromium, and
# PostgreSQL (the DuckLake tests' catalog: its binaries only, testkit/postgres.py starts a
# cluster of its own in a temporary folder).
system-deps:
	@missing=""; for b in prometheus promtool chromium; do command -v $$b >/dev/null || missing=1; done; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing=1; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then SUDO=""; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $(DEBS) >/dev/null; \
	fi

# The FOCUS validator's own environment (.venv-focus: it needs Python >= 3.12 and pins that
# the project's environment does not share); tests/test_export_files.py runs it.
FOCUS_VENV ?= .venv-focus
focus-validator: setup
	FOCUS_VALIDATOR_VENV=$(FOCUS_VENV) $(BIN)/python tools/focus_validate.py --install >/dev/null

# The suite runs on every core (pytest-xdist; `pytest -p no:xdist` runs it in one process, to
# debug one test). --dist loadfile gives each worker whole files, so that a module's expensive
# fixture (a Prometheus server, a generated fleet) is built once, not once per worker.
# `make test PYTEST_ARGS="-p randomly"` runs it in a random order (pytest-randomly prints
# the seed; PYTEST_ARGS="-p randomly --randomly-seed=N" repeats that order).
PYTEST_ARGS ?=
XDIST       ?= -n auto --dist loadfile
# The lake suite runs beside the suite, its output kept in LAKE_LOG and shown after the suite's:
# the suite's workers spend about a fifth of their time waiting (on brokers, group sessions,
# browsers), which the lake suite's one process takes up.
LAKE_LOG    ?= test-artifacts/lake-suite.log
test: setup lake-setup system-deps focus-validator
	@mkdir -p $(dir $(LAKE_LOG))
	@$(MAKE) --no-print-directory test-lake >$(LAKE_LOG) 2>&1 & lake=$$!; \
	$(MAKE) --no-print-directory test-suite; suite=$$?; \
	wait $$lake; lake=$$?; \
	echo "=== the lake suite, run beside the suite ($(LAKE_LOG))"; cat $(LAKE_LOG); \
	[ $$suite = 0 ] || echo "make test: the suite failed" >&2; \
	[ $$lake = 0 ] || echo "make test: the lake suite failed" >&2; \
	[ $$suite = 0 ] && [ $$lake = 0 ]

test-suite: setup system-deps focus-validator
	$(BIN)/pytest -q $(XDIST) $(PYTEST_ARGS)

# the lake suite in one process: its worker-kill tests wait on deadlines that a second
# worker's lake tests beside them overran
test-lake: lake-setup system-deps
	$(LAKE_VENV)/bin/pytest -q $(PYTEST_ARGS) tests/lake
	$(LAKE_VENV)/bin/pytest -q $(PYTEST_ARGS) tests/test_store_parity.py -k lake   # the lake side of the any_store tests

# e.g. make demo DEMO_ARGS="--now 2026-12-01T09:00 --port 8600" (slicemeter demo --help)
DEMO_ARGS ?=
demo: setup
	$(BIN)/slicemeter demo $(DEMO_ARGS)

# bench_ingest_lake needs the lake's DuckDB (1.5.5), the others the project's
bench: setup lake-setup
	@for b in bench/bench_*.py; do echo "== $$b"; \
	  case $$b in *_lake.py) py=$(LAKE_VENV)/bin/python;; *) py=$(BIN)/python;; esac; \
	  $$py $$b || exit 1; done

clean:
	rm -rf $(VENV) $(LAKE_VENV) $(FOCUS_VENV) var out test-artifacts .pytest_cache
