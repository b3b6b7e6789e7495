#!/usr/bin/env bash
# `make jars` (the checks set): compile jvm/checks/src against the pyspark wheel's own JARs into
# .jars/checks/spark-purgatory-checks.jar (spark_purgatory/spark/checks.py says what it is for).
# No download: javac and the JARs of the Spark the project runs.  Rebuilt when the sources or
# pyspark change (the .stamp holds their hash); without javac (a JRE only) one line says the
# checks stay SQL, and the make goes on.
set -uo pipefail
cd "$(dirname "$0")/../.."
python=${1:-.venv/bin/python}
out=.jars/checks
pyspark=$("$python" -c "import os, pyspark; print(os.path.dirname(pyspark.__file__))") || exit 0
want=$( { cat jvm/checks/src/sparkpurgatory/*.java; echo "$pyspark"; cat "$pyspark/version.py"; } | sha256sum | cut -d' ' -f1)
[ "$(cat "$out/.stamp" 2>/dev/null)" = "$want" ] && exit 0
if ! command -v javac >/dev/null 2>&1; then
  echo "make jars: javac not found, the operations' checks stay SQL (slower planning per micro-batch, same rows)"
  exit 0
fi
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
started=$SECONDS
if javac --release 17 -nowarn -cp "$pyspark/jars/*" -d "$scratch/classes" jvm/checks/src/sparkpurgatory/*.java \
    && jar cf "$scratch/spark-purgatory-checks.jar" -C "$scratch/classes" .; then
  rm -rf "$out" && mkdir -p "$out"
  mv "$scratch/spark-purgatory-checks.jar" "$out/"
  echo "$want" >"$out/.stamp"
  echo "make jars: checks compiled ($((SECONDS - started)) s)"
else
  echo "make jars: javac failed, the operations' checks stay SQL (slower planning per micro-batch, same rows)"
fi
exit 0
