#!/usr/bin/env bash
# Build the project's own JVM code (jvm/spark-purgatory, a Maven reactor) with `mvn package`,
# which runs its unit tests, into the package's own folder spark_purgatory/jars/, the one place
# the project's JARs live (spark_purgatory/runtime/jars.py), with manifest.json beside them:
# the JARs' names, the Spark they were compiled against and the hash of the sources they were
# built from (written last: a folder without it holds no usable JAR).
#
#   jvm/package.sh                   `make checks-jar`: against the pinned Spark, the dev
#                                    extra's pyspark, which the venv runs (build_backend/spark_pin.py,
#                                    read with python3: no need to wait for the venv;
#                                    -Dspark.version: Maven Central holds the same JARs as the
#                                    wheel).  Without mvn or javac, or when Maven cannot download
#                                    (offline, a Spark version Central does not have), one line
#                                    says the checks stay SQL and the make goes on; a compile
#                                    error or a failing test stops it.
#   jvm/package.sh --spark VERSION   the wheel's build (build_backend/): against that Spark;
#                                    anything that leaves no JARs fails (a wheel without them is
#                                    the slower product the wheel exists to avoid).
#
# Rebuilt only when a file of the module or the Spark version changes (the manifest's hash).
set -uo pipefail
cd "$(dirname "$0")/.."
module=jvm/spark-purgatory
out=spark_purgatory/jars
if [ "${1:-}" = "--spark" ]; then
  spark=${2:?jvm/package.sh --spark VERSION}
  strict=1
  name="the wheel's JARs"
else
  spark=$("${PYTHON:-python3}" build_backend/spark_pin.py) || exit 0
  strict=0
  name="make checks-jar"
fi
# the sources' hash, as the manifest records it (the same in a checkout and an unpacked sdist)
want=$( { find "$module" -name target -prune -o -type f -print | LC_ALL=C sort | xargs sha256sum; echo "$spark"; } \
  | sha256sum | cut -d' ' -f1)
have=$(sed -n 's/.*"sources": *"\([0-9a-f]*\)".*/\1/p' "$out/manifest.json" 2>/dev/null)
[ "$have" = "$want" ] && exit 0
sql="the operations' checks stay SQL (slower planning per micro-batch, same rows)"
give_up() {  # $1: why
  if [ "$strict" = 1 ]; then
    echo "$name: $1: cannot build the wheel without the project's JARs (jvm/spark-purgatory, Spark $spark)" >&2
    exit 1
  fi
  echo "$name: $1, $sql"
  exit 0
}
for tool in mvn javac; do
  command -v "$tool" >/dev/null 2>&1 || give_up "$tool not found"
done
mkdir -p .jars
log=.jars/.checks.log
started=$SECONDS
if ! mvn -q -B -Dstyle.color=never -f "$module/pom.xml" package -Dspark.version="$spark" >"$log" 2>&1; then
  if grep -q -e "COMPILATION ERROR" -e "There are test failures" "$log"; then
    grep -e "COMPILATION ERROR" -e "\.java:\[" -e "<<< FAIL" -e "expected:" -e "Tests run:.*Fail" "$log" \
      | sed 's/\x1b\[[0-9;]*m//g' | head -20
    echo "$name: the build of $module failed (above; all of it in $log)"
    exit 1
  fi
  rm -f "$out"/*.jar "$out/manifest.json"  # JARs built for other sources or another Spark are not these
  give_up "mvn package failed (mvn output in $log)"
fi
mkdir -p "$out"
rm -f "$out/manifest.json" "$out"/*.jar
jars=()
for jar in "$module"/*/target/spark-purgatory-*.jar; do
  cp "$jar" "$out/"
  jars+=("\"$(basename "$jar")\"")
done
printf '{"jars": [%s], "spark": "%s", "sources": "%s"}\n' "$(IFS=,; echo "${jars[*]}" | sed 's/,/, /g')" \
  "$spark" "$want" >"$out/manifest.json.partial"
mv "$out/manifest.json.partial" "$out/manifest.json"
rm -f "$log"
echo "$name: $module built and tested against Spark $spark into $out/ ($((SECONDS - started)) s)"
exit 0
