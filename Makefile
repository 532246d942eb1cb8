# Two commands: `make run` (Clarify locally) and `make test` (the whole suite). Both install what they need.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test lint bench package clean

$(STAMP): requirements.txt requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $(STAMP)

run: $(STAMP)
	$(PY) -m scripts.local.run

test: $(STAMP)
	$(PY) -m ruff check app.py chalicelib infra scripts tests
	$(PY) -m mypy
	$(PY) -m pytest

bench: $(STAMP)
	$(PY) scripts/bench

package: $(STAMP)
	$(PY) scripts/package

clean:
	rm -rf $(VENV) build .pytest_cache .mypy_cache
