#!/usr/bin/env bash
# Fetch Apache Kafka (broker + tools jars and their dependencies) from Maven Central into a cache outside git.
# Usage: scripts/kafka/fetch.sh            -> prints the directory holding the jars
# ONCELOG_KAFKA_CACHE overrides the cache root (default ~/.cache/oncelog/kafka). Maven keeps its own ~/.m2 cache,
# so a second run resolves nothing over the network.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
version="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$here/pom.xml")"
root="${ONCELOG_KAFKA_CACHE:-$HOME/.cache/oncelog/kafka}"
libs="$root/$version/libs"
if [ ! -f "$libs/.complete" ]; then
  rm -rf "$libs"
  mkdir -p "$libs"
  mvn -q -B -f "$here/pom.xml" dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$libs" >&2
  touch "$libs/.complete"
fi
echo "$libs"
