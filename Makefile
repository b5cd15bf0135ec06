PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The JVM reader of commitlog.spark, compiled against the installed PySpark's jars (needs a JDK).
JAR := commitlog/spark/jars/commitlog-spark.jar
JAVA_SOURCES := $(wildcard jvm/src/commitlog/spark/jvm/*.java)

.PHONY: run test bench docs clean jar

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

test: $(STAMP) $(JAR)
	$(PY) -m pytest -q $(PYTEST_ARGS)

docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

bench: $(STAMP) $(JAR)
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) data build *.egg-info $(JAR)
