PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test bench docs clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip install --quiet -e '.[spark,test,bench,docs]'
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/retention serve --demo

test: $(STAMP)
	$(PY) -m pytest -q $(PYTEST_ARGS)

docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

bench: $(STAMP)
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) data build *.egg-info
