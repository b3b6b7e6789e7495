# The two commands of the README. Both create or reuse .venv and install the project from its
# own files (pyproject.toml); nothing needs to be installed by hand.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# npm's test tools (Azurite, the Azure Storage emulator of tests/support/azure_store.py), pinned by
# .ci/node/package-lock.json and kept beside it, out of the Python venv
NODE_TOOLS := .ci/node
AZURITE := $(NODE_TOOLS)/node_modules/.bin/azurite-blob

.PHONY: demo demo-kafka test setup nightly lint docs bench bench-spark clean jars checks-jar class-data bytecode dist

# installed by uv (Astral's installer: parallel downloads and installs; a clean machine's
# set-up in 123 s instead of pip's 266, the same packages), pinned here; pip when uv cannot run.
# pyspark comes only as a source archive, so every clean machine builds its wheel: built
# "stored" (no zip compression: its 400 MB are JARs, already compressed) the whole install
# takes 19 s instead of 41 (uv --no-cache, this machine), the same files installed
UV := uv==0.13.8
WHEEL_BUILD := -C--build-option=--compression=stored
# from uv's cache first (--offline), each requirement of pyproject.toml pinned to the newest
# version the index offers (NEWEST: uv reads the index's pages alone, no archive); online when
# the cache lacks one.  An index or mirror that sends no caching headers (no ETag, no
# Cache-Control: this machine's) makes every online install download pyspark's 450 MB source
# archive and build it again (a clean clone's install 51 s -> 7 s at a load of 11)
UV_INSTALL = $(VENV)/bin/uv pip install --quiet --python $(PY) $(WHEEL_BUILD) -e '.[dev,demo]'
NEWEST = $(VENV)/bin/uv pip compile --quiet --no-deps --no-header --no-annotate --extra dev --extra demo \
  --python $(PY) pyproject.toml

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	{ $(PY) -m pip install --quiet $(UV) && { $(UV_INSTALL) --offline $$($(NEWEST)) 2>/dev/null || $(UV_INSTALL); }; } \
	  || { echo "uv failed: installing with pip"; $(PY) -m pip install --quiet -e '.[dev,demo]'; }
	touch $(STAMP)

$(AZURITE): $(NODE_TOOLS)/package-lock.json
	@command -v npm >/dev/null || { echo "make test needs node >= 20 and npm (Azurite, for the ADLS tests)"; exit 1; }
	npm ci --prefix $(NODE_TOOLS) --no-audit --no-fund --loglevel=error
	touch $(AZURITE)

# the JVM extras (Delta's Spark connector, hadoop-aws + the AWS SDK, Spark's Kafka source, a Kafka
# broker), pinned in jvm/<set>/pom.xml, copied by mvn into .jars/<set>/ and reused while the pom
# is unchanged; without mvn (or offline) one line says they are skipped and the make goes on.
# One target a set (jars-delta, jars-s3a, jars-kafka, jars-kafka-broker): each target below
# fetches only the sets it runs; `make jars` makes them all, and the project's own JARs
JAR_SETS := delta s3a kafka kafka-broker
# mvn's own JVM lives seconds here (a set's copy, the project's build): C1 alone and the serial
# collector, unless MAVEN_OPTS says otherwise (a set's copy 3.5-3.9 CPU-s -> 1.9-2.1)
export MAVEN_OPTS ?= -XX:TieredStopAtLevel=1 -XX:+UseSerialGC
JAR_TARGETS := $(addprefix jars-,$(JAR_SETS))
.PHONY: $(JAR_TARGETS)
$(JAR_TARGETS): jars-%:
	@jvm/fetch.sh $*

jars: $(JAR_TARGETS) checks-jar

# the project's own JVM code (jvm/spark-purgatory, a Maven build: a typed operation's checks and
# routes as Spark SQL functions, for a smaller plan per micro-batch, spark_purgatory/spark/checks.py;
# the checkpoint file manager of local sessions; the sink's small rows), built and unit-tested by
# `mvn package` against the pinned Spark (the dev extra's pyspark, which the venv runs) into
# spark_purgatory/jars/, where the wheel carries them too (make dist); without mvn or javac the
# checks stay SQL.  It needs no venv, so it builds while uv installs one
checks-jar:
	@PYTHON=$(PYTHON) jvm/package.sh

# the sdist and the wheel into dist/ (PEP 517, uv build: the sdist, then the wheel from it). The
# in-tree backend (build_backend/) has Maven build the project's JARs against the pinned Spark
# (pyproject's pyspark==, the tests' one) into spark_purgatory/jars/ first, so both carry them
# as package data; the JARs checks-jar made for that Spark are reused. `pip wheel --no-deps .`
# builds the same wheel
dist: $(STAMP)
	rm -rf dist
	$(VENV)/bin/uv build --quiet --python $(PY) --out-dir dist
	@ls dist/*.whl dist/*.tar.gz

# a class-data archive of the local driver's JVM (spark_purgatory/runtime/class_data.py; made by
# spark_purgatory/class_data_dump.py): a small stream run once in a JVM that dumps the classes it
# loaded; later local sessions map them at start; remade when the JARs, pyspark or java change.
# An archive serves only the class path it was dumped with: made here for the tests' sessions,
# with every set a session puts on Spark's class path (not the broker's, which runs apart), into
# the user's cache ($XDG_CACHE_HOME/spark-purgatory/class-data), where a wheel's first local
# session makes its own at exit
class-data: checks-jar $(STAMP) jars-delta jars-s3a jars-kafka
	@$(PY) -m spark_purgatory.class_data_dump

# Python's bytecode for what every job, Spark Python worker and test process imports.  uv
# installs no .pyc files, and where PYTHONDONTWRITEBYTECODE is set (as on these machines)
# Python never writes them: every process compiled pandas, pyarrow, pyspark and the project
# again (pandas + pyarrow imported in 1.6 s instead of 0.5; a small job run 27-29 CPU-s
# instead of 23-24).  Compiled once here (14 CPU-s), 1.5 s when up to date.  Spark's Python
# workers read pyspark itself from its pyspark.zip, which holds no bytecode: testbed.zip_bytecode
# stores it there (3 s once; each worker daemon's imports 0.2 s of CPU instead of 1.0)
HOT_PACKAGES := numpy pandas pyarrow pyspark py4j deltalake dateutil pytz hypothesis
SITE_PACKAGES = $(shell $(PY) -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
bytecode: $(STAMP)
	@$(PY) -m compileall -qq -j 0 spark_purgatory $(addprefix $(SITE_PACKAGES)/,$(HOT_PACKAGES)) \
	  || echo "make bytecode: some files did not compile (they are compiled when imported)"
	@$(PY) -m testbed.zip_bytecode

# the demo writes through delta-rs and reads files: no fetched JAR set
demo: $(STAMP) checks-jar bytecode
	$(PY) -m spark_purgatory.demo $(ARGS)

# the demo through Kafka: a broker on loopback (the kafka-broker JARs), the workload produced to
# two topics, the job on them through Spark's Kafka source (spark_purgatory/demo_kafka.py)
demo-kafka: $(STAMP) jars-kafka jars-kafka-broker checks-jar bytecode
	$(PY) -m spark_purgatory.demo_kafka $(ARGS)

# test files run in parallel (pytest-xdist): each worker is a process with its own Spark session;
# the Spark tests mostly wait on JVMs, so more workers than cores pays.  tests/conftest.py
# schedules `--dist loadgroup` its own way (slowest first, none queued behind another, the
# shared-server files on one worker) and starts the tests' JVMs C1-only.
# TEST_WORKERS=0 runs everything in this one process.
TEST_WORKERS ?= 3

# the set-up steps side by side: the venv's install (uv), npm's Azurite and mvn's JARs wait on
# downloads (a clean clone's set-up left a third of its two cores idle one after the other).
# The class-data dump is the longest step (about 45 s): the project's JARs (listed first, so
# they build from the start, no venv needed), the venv and each JAR set all start at once, and
# the dump starts as soon as the venv and the JARs are there, beside the bytecode's compiling
# and npm's download
setup:
	@$(MAKE) --no-print-directory -j6 --output-sync=target $(AZURITE) class-data bytecode jars-kafka-broker

# every run prints its 15 slowest tests (a --durations in ARGS replaces it: the last one counts)
test: setup
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup --durations=15 $(ARGS)

# the deep property search (Hypothesis's nightly profile: 5,000 draws a property; tests/conftest.py),
# then longer kill -9 plans than CI's (tests/delta/test_crash.py): ten kills drawn from the fault
# points and random moments on files, six on Kafka topics, the outcomes on an output topic too
nightly: $(STAMP) jars-kafka jars-kafka-broker checks-jar bytecode
	$(PY) -m pytest tests/engine/test_split_invariance.py tests/engine/test_wheel.py --hypothesis-profile=nightly -n $(TEST_WORKERS) $(ARGS)
	$(PY) tests/support/crash_harness.py --kills 10 --topic --root /tmp/purgatory-crash-files
	$(PY) tests/support/crash_harness.py --kills 6 --kafka --topic --root /tmp/purgatory-crash-kafka

# the documentation site on http://127.0.0.1:8000 (mkdocs.yml); CI builds it strictly in tests/docs/test_docs_site.py
docs: $(STAMP)
	$(VENV)/bin/mkdocs serve $(ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check spark_purgatory tests benchmarks testbed jobs notebooks build_backend

# the benchmarks run as `python -m benchmarks NAME` from here (`python -m benchmarks` lists them):
# the timing wheel against Kafka's, no Spark
bench: $(STAMP)
	$(PY) -m benchmarks wheel $(ARGS)

# the operator side by side with Spark's alternatives + the scaling series (~15 min at 1M)
bench-spark: $(STAMP)
	$(PY) -m benchmarks operator $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis $(NODE_TOOLS)/node_modules .jars jvm/spark-purgatory/*/target \
	  spark_purgatory/jars dist build
