# Two commands: `make run` (Clarify locally) and `make test` (the whole suite). Both install what they need.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test lint bench load package clean

$(STAMP): requirements.txt requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip<26.3"
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $(STAMP)

# Logs are readable lines; `make run LOG_FORMAT=json` prints one JSON object per line, as in Lambda.
run: $(STAMP)
	$(PY) -m scripts.local.run $(if $(filter json,$(LOG_FORMAT)),--json-logs)

# Bytecode is cached even where the environment says not to: every pytest worker would otherwise compile the
# code and rewrite the tests again (about 4 CPU-seconds each), and every process the suite starts recompile.
test: $(STAMP)
	$(PY) -m ruff check app.py chalicelib infra scripts tests
	$(PY) -m mypy
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -n 4 --maxschedchunk 1

bench: $(STAMP)
	$(PY) scripts/bench
	$(PY) -m scripts.bench_scale

# The load and soak run under kill -9 faults; `make load DURATION=600 USERS=20` for a long soak.
DURATION ?= 180
USERS ?= 10
load: $(STAMP)
	$(PY) scripts/load --duration $(DURATION) --users $(USERS)

package: $(STAMP)
	$(PY) scripts/package

clean:
	rm -rf $(VENV) build .pytest_cache .mypy_cache
