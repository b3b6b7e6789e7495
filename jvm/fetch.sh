#!/usr/bin/env bash
# `make jars-<set>` (`make jars`: every set): copy each JVM set of jvm/<set>/pom.xml (its JARs and their runtime dependencies)
# into .jars/<set>/ with Maven.  A set is reused while its .stamp holds its pom's sha256; a new
# or changed pom fetches again, into a scratch folder first so a failed fetch leaves no half
# set behind (spark_purgatory/runtime/jars.py reads only sets with a stamp).  Without mvn, or
# when a fetch fails (offline), one line says what is skipped and the make goes on: the
# delta-rs default needs no JVM JARs.
set -uo pipefail
cd "$(dirname "$0")/.."
sets=("$@")
[ ${#sets[@]} -gt 0 ] || sets=(delta s3a kafka kafka-broker)

stale=()
for set in "${sets[@]}"; do
  want=$(sha256sum "jvm/$set/pom.xml" | cut -d' ' -f1)
  [ "$(cat ".jars/$set/.stamp" 2>/dev/null)" = "$want" ] || stale+=("$set")
done
[ ${#stale[@]} -eq 0 ] && exit 0

if ! command -v mvn >/dev/null 2>&1; then
  echo "make jars: mvn not found, JVM extras skipped (${stale[*]}): Spark's Delta writer, s3a and Kafka tests need them; the delta-rs default runs without"
  exit 0
fi

# one fetch at a time: make -j runs a target per set side by side, and mvn runs downloading into
# one ~/.m2 at once can clash on a clean machine (the lock is let go when this script exits)
mkdir -p .jars
if command -v flock >/dev/null 2>&1; then exec 9>.jars/.fetch.lock && flock 9; fi

failed=()
for set in "${stale[@]}"; do
  scratch=".jars/.$set.partial"
  rm -rf "$scratch" && mkdir -p "$scratch"
  started=$SECONDS
  if mvn -q -B -f "jvm/$set/pom.xml" dependency:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$PWD/$scratch" >"$scratch.log" 2>&1; then
    rm -rf ".jars/$set" && mv "$scratch" ".jars/$set"
    sha256sum "jvm/$set/pom.xml" | cut -d' ' -f1 >".jars/$set/.stamp"
    rm -f "$scratch.log"
    echo "make jars: $set fetched ($(du -sh ".jars/$set" | cut -f1), $((SECONDS - started)) s)"
  else
    failed+=("$set")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "make jars: fetch failed, JVM extras skipped (${failed[*]}; mvn output in .jars/.<set>.partial.log): Spark's Delta writer, s3a and Kafka tests need them; the delta-rs default runs without"
fi
exit 0
