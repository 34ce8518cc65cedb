#!/usr/bin/env bash
# Fetch Spark's own Kafka connector (spark-sql-kafka-0-10_2.13 and the jars it adds to pyspark's: Spark's Kafka
# token provider, kafka-clients, commons-pool2) from Maven Central into a cache outside git.
# Usage: scripts/spark/fetch-kafka-connector.sh   -> prints the directory holding the jars
# The connector's version is the installed pyspark's when Maven Central serves it, else pom.xml's spark.version
# (the newest served); the directory's CONNECTOR_VERSION file says which. ONCELOG_SPARK_KAFKA_CACHE overrides the
# cache root (default ~/.cache/oncelog/spark-kafka). Maven keeps its own ~/.m2 cache.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
python="${PYTHON:-$here/../../.venv/bin/python}"
pyspark_version="$("$python" -c 'import pyspark; print(pyspark.__version__)')"
fallback="$(sed -n 's:.*<spark.version>\(.*\)</spark.version>.*:\1:p' "$here/pom.xml")"
root="${ONCELOG_SPARK_KAFKA_CACHE:-$HOME/.cache/oncelog/spark-kafka}"
libs="$root/pyspark-$pyspark_version/libs"
# pyspark ships Spark, Scala, Hadoop's client and the compression codecs: copy only what the connector adds
only="spark-sql-kafka-0-10_2.13,spark-token-provider-kafka-0-10_2.13,kafka-clients,commons-pool2"
if [ ! -f "$libs/.complete" ]; then
  rm -rf "$libs"
  mkdir -p "$libs"
  for version in "$pyspark_version" "$fallback"; do
    if mvn -q -B -f "$here/pom.xml" dependency:copy-dependencies -Dspark.version="$version" -DincludeScope=runtime \
        -DincludeArtifactIds="$only" -DoutputDirectory="$libs" >"$libs/.mvn.log" 2>&1; then
      echo "$version" >"$libs/CONNECTOR_VERSION"
      break
    fi
    echo "spark-sql-kafka-0-10_2.13:$version did not resolve from Maven Central" >&2
  done
  [ -f "$libs/CONNECTOR_VERSION" ] || { cat "$libs/.mvn.log" >&2; exit 1; }
  rm -f "$libs/.mvn.log"
  touch "$libs/.complete"
fi
echo "$libs"
