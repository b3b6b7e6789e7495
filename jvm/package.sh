#!/usr/bin/env bash
# `make checks-jar`: build the project's own JVM code (jvm/spark-purgatory, a Maven reactor) with
# `mvn package`, which runs its unit tests, and copy its JARs into .jars/checks/
# (spark_purgatory/spark/jars.py).  Compiled against the Spark of the venv's pyspark
# (-Dspark.version; Maven Central holds the same JARs as the wheel).  Rebuilt when a file of
# the module or pyspark's version changes (the .stamp holds their hash).  Without mvn or javac,
# or when Maven cannot download (offline, a Spark version Central does not have), one line says
# the checks stay SQL and the make goes on; a compile error or a failing test stops it.
set -uo pipefail
cd "$(dirname "$0")/.."
python=${1:-.venv/bin/python}
module=jvm/spark-purgatory
out=.jars/checks
spark=$("$python" -c "import pyspark; print(pyspark.__version__)") || exit 0
want=$( { find "$module" -name target -prune -o -type f -print | LC_ALL=C sort | xargs sha256sum; echo "$spark"; } \
  | sha256sum | cut -d' ' -f1)
[ "$(cat "$out/.stamp" 2>/dev/null)" = "$want" ] && exit 0
sql="the operations' checks stay SQL (slower planning per micro-batch, same rows)"
for tool in mvn javac; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "make checks-jar: $tool not found, $sql"
    exit 0
  fi
done
mkdir -p .jars
log=.jars/.checks.log
started=$SECONDS
if ! mvn -q -B -Dstyle.color=never -f "$module/pom.xml" package -Dspark.version="$spark" >"$log" 2>&1; then
  if grep -q -e "COMPILATION ERROR" -e "There are test failures" "$log"; then
    grep -e "COMPILATION ERROR" -e "\.java:\[" -e "<<< FAIL" -e "expected:" -e "Tests run:.*Fail" "$log" \
      | sed 's/\x1b\[[0-9;]*m//g' | head -20
    echo "make checks-jar: the build of $module failed (above; all of it in $log)"
    exit 1
  fi
  rm -rf "$out"  # a JAR built for other sources or another Spark is not what this venv runs
  echo "make checks-jar: mvn package failed, $sql (mvn output in $log)"
  exit 0
fi
scratch=".jars/.checks.partial"
rm -rf "$scratch" && mkdir -p "$scratch"
cp "$module"/*/target/spark-purgatory-*.jar "$scratch/"
rm -rf "$out" && mv "$scratch" "$out"
echo "$want" >"$out/.stamp"
rm -f "$log"
echo "make checks-jar: $module built and tested ($((SECONDS - started)) s)"
exit 0
