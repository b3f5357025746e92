# queue-lab: `make compare` runs the main job, `make test` the tests.
# Both create .venv (and reinstall it when pyproject.toml changes) before they run.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: compare test test-slow lint regress lab java browser brokers clean doctor docs figures reference

compare: $(STAMP) java
	$(BIN)/lab compare

# The tests run in parallel (pytest-xdist): more workers than cores, because many of them
# wait on servers, sockets and clocks rather than compute. Tests that must not overlap
# share an xdist_group (--dist loadgroup runs a group on one worker).
TEST_WORKERS ?= 4

test: $(STAMP) java browser brokers
	$(BIN)/python -m pytest -m "not slow" -n $(TEST_WORKERS) --dist loadgroup

# The linter and the type checker alone (pyproject.toml's [tool.ruff] and [tool.mypy]); make test
# runs both too, as tests (tests/test_lint.py, tests/test_types.py).
lint: $(STAMP)
	$(BIN)/ruff check lab models loadgen tests
	$(BIN)/mypy

# Tests marked quiet compare live timings taken minutes apart (the regression gate's
# acceptance): beside other workers' bursts of load they measure the neighbours, so they run
# alone, after the parallel part, as the gate itself does in CI.
test-slow: $(STAMP) java brokers
	$(BIN)/python -m pytest -m "slow and not quiet" -n $(TEST_WORKERS) --dist loadgroup
	$(BIN)/python -m pytest -m "slow and quiet"

# The regression gate: the short standard set in both worlds against results/baselines/standard.json.
regress: $(STAMP) java
	$(BIN)/lab regress --no-progress

lab: $(STAMP) java
	$(BIN)/jupyter lab --notebook-dir=notebooks

# What each part of the lab needs from this machine, one line per item; exits 1 when `make compare` cannot run.
doctor: $(STAMP)
	$(BIN)/lab doctor

# The documentation site (mkdocs.yml, docs/) on http://127.0.0.1:8000, rebuilt as pages change.
docs: $(STAMP)
	$(BIN)/mkdocs serve

# The generated reference pages' copies in docs/reference/ (the site makes them afresh at build).
reference: $(STAMP)
	$(BIN)/python -m lab.cli.reference

# The documentation's figures, made from runs and stamped in docs/figures.json (command, date):
# lab compare, lab matrix and lab brokers (live runs of the real brokers). FIGURES=compare,matrix: some.
figures: $(STAMP) java brokers
	$(BIN)/lab figures $(if $(FIGURES),--only $(FIGURES))

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

# PySpark (the aggregation pipeline) needs Java 17 or newer.
java:
	@v=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n 1); \
	if [ -z "$$v" ] || [ "$$v" -lt 17 ]; then \
	  echo "queue-lab needs Java 17+ for PySpark (found: $${v:-none}): install it with 'sudo apt-get install -y openjdk-17-jre-headless', or use 'conda env create -f environment.yml'; 'make doctor' checks all the lab needs"; \
	  exit 1; \
	fi

# The web UI test (`lab load --web`) drives Debian's headless Chromium through its ChromeDriver.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
browser:
	@if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then \
	  echo "installing Chromium and ChromeDriver for the web UI test (apt-get) ..."; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium chromium-driver >/dev/null \
	  || { echo "could not install Chromium: 'make doctor' says what is missing and the command that installs it"; exit 1; }; \
	fi

# The real brokers run beside the designs (lab/peers/): Debian's servers, and FUSE for the
# power-loss file system under their data dirs. The lab starts its own copies on private ports
# and folders; a service the package manager started is stopped again.
BROKERS := redis-server:redis-server rabbitmq-server:/usr/lib/rabbitmq/bin/rabbitmq-server \
           nats-server:/usr/sbin/nats-server beanstalkd:beanstalkd fuse3:fusermount3
brokers:
	@missing=""; for pair in $(BROKERS); do pkg=$${pair%%:*}; bin=$${pair#*:}; \
	  command -v $$bin >/dev/null 2>&1 || [ -x "$$bin" ] || missing="$$missing $$pkg"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing the real brokers and FUSE (apt-get):$$missing ..."; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing >/dev/null \
	  || { echo "could not install$$missing: 'make doctor' says what is missing and the command that installs each"; exit 1; }; \
	  for service in redis-server rabbitmq-server nats-server beanstalkd; do \
	    $(SUDO) service $$service stop >/dev/null 2>&1 || true; done; \
	fi

clean:
	rm -rf $(VENV) results/runs .pytest_cache
