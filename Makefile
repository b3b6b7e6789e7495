# The two commands of the README. Both create or reuse .venv and install the project from its
# own files (pyproject.toml); nothing needs to be installed by hand.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench bench-spark clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,demo]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m spark_purgatory.demo $(ARGS)

test: $(STAMP)
	$(PY) -m pytest $(ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check spark_purgatory tests benchmarks jobs notebooks

bench: $(STAMP)
	$(PY) benchmarks/bench_wheel.py $(ARGS)

# the operator side by side with Spark's alternatives + the scaling series (~15 min at 1M)
bench-spark: $(STAMP)
	$(PY) benchmarks/bench_operator.py $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
