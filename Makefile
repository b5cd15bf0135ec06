PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The JVM reader of commitlog.spark, compiled against the installed PySpark's jars (needs a JDK).
JAR := commitlog/spark/jars/commitlog-spark.jar
# The test run's class-data archive of Spark's classes (tests/jvm_helpers.py): its JVMs start faster.
SPARK_CDS := $(VENV)/spark-test-classes.jsa
JAVA_SOURCES := $(wildcard jvm/src/commitlog/spark/jvm/*.java)

.PHONY: help prereqs run test test-only bench docs docs-serve clean jar
.DEFAULT_GOAL := help

help:
	@echo 'make run         the sidecar and its demo log on http://127.0.0.1:9464/ (installs .venv first)'
	@echo 'make test        checks the host (make prereqs), installs, builds the JVM reader, runs every test'
	@echo 'make prereqs     names what make test needs and this host lacks, in one line'
	@echo 'make docs        the documentation site, build/site/index.html (opens from the file system)'
	@echo 'make docs-serve  the documentation site on http://127.0.0.1:8000/'
	@echo 'make jar         the JVM reader of commitlog.spark (needs a JDK)'
	@echo 'make bench       the benchmarks of docs/performance.md'
	@echo 'make clean       removes .venv, data, build, dist and the jar'

prereqs:
	@PYTHON=$(PYTHON) sh scripts/check_prereqs

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip install --quiet -e '.[spark,archive,test,bench,docs]'
	touch $(STAMP)

$(JAR): $(STAMP) $(JAVA_SOURCES)
	$(PY) -m commitlog.spark.jvm build

jar: $(JAR)

run: $(STAMP)
	$(VENV)/bin/retention serve --demo

# Test processes of `make test` (pytest-xdist; tests of one xdist group share one process, see
# docs/development.md, "Running the tests"). 4 by default: on a 2-core host much of the suite waits
# on other processes (sidecars, Spark JVMs, killed writers); 0 runs every test in this process.
PYTEST_WORKERS ?= 4

# The host is checked before anything is installed: a missing JDK is one line, not a traceback later.
test: prereqs
	@$(MAKE) --no-print-directory test-only

test-only: $(STAMP) $(JAR) $(SPARK_CDS)
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

docs-serve: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve --dev-addr 127.0.0.1:8000

$(SPARK_CDS): $(STAMP) $(wildcard $(VENV)/lib/python3*/site-packages/pyspark/jars)
	$(PY) tests/jvm_helpers.py $@

bench: $(STAMP) $(JAR)
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) data build dist *.egg-info $(JAR)
