# queue-lab: `make compare` runs the main job, `make test` the tests.
# Both create .venv (and reinstall it when pyproject.toml changes) before they run.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: compare test test-slow regress lab java browser clean

compare: $(STAMP) java
	$(BIN)/lab compare

test: $(STAMP) java browser
	$(BIN)/python -m pytest -m "not slow"

test-slow: $(STAMP) java
	$(BIN)/python -m pytest -m slow

# The regression gate: the short standard set in both worlds against results/baselines/standard.json.
regress: $(STAMP) java
	$(BIN)/lab regress --no-progress

lab: $(STAMP) java
	$(BIN)/jupyter lab --notebook-dir=notebooks

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

# PySpark (the aggregation pipeline) needs Java 17 or newer.
java:
	@v=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n 1); \
	if [ -z "$$v" ] || [ "$$v" -lt 17 ]; then \
	  echo "queue-lab needs Java 17+ for PySpark (found: $${v:-none}): install it with 'sudo apt-get install -y openjdk-17-jre-headless', or use 'conda env create -f environment.yml'"; \
	  exit 1; \
	fi

# The web UI test (`lab load --web`) drives Debian's headless Chromium through its ChromeDriver.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
browser:
	@if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then \
	  echo "installing Chromium and ChromeDriver for the web UI test (apt-get) ..."; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium chromium-driver >/dev/null; \
	fi

clean:
	rm -rf $(VENV) results/runs .pytest_cache
