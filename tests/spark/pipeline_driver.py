"""A Spark driver process for the crash test: oncelog topic → upper-cased values → oncelog topic.

``python pipeline_driver.py BOOTSTRAP SOURCE SINK CHECKPOINT`` streams until it is killed. The test kills
the whole process group (driver JVM and Python workers) with SIGKILL, then restarts the same pipeline
(``test_sink.pipeline``) from the checkpoint.
"""

from __future__ import annotations

import os
import sys
import tempfile


def main(bootstrap: str, source: str, sink: str, checkpoint: str) -> None:
    """Run the pipeline until killed."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from oncelog.spark import OncelogDataSource

    local = tempfile.mkdtemp(prefix="spark-driver-")
    spark = (
        SparkSession.builder.master("local[2,2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.local.dir", local)
        .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(OncelogDataSource)
    frame = (
        spark.readStream.format("oncelog")
        .option("bootstrap", bootstrap)
        .option("topic", source)
        .option("startingOffsets", "earliest")
        .option("maxRecordsPerTrigger", "30")
        .load()
        .selectExpr("CAST(offset AS STRING) AS key", "upper(CAST(value AS STRING)) AS value")
    )
    query = (
        frame.writeStream.format("oncelog")
        .option("bootstrap", bootstrap)
        .option("topic", sink)
        .option("checkpointLocation", checkpoint)
        .start()
    )
    query.awaitTermination()


if __name__ == "__main__":
    main(*sys.argv[1:5])
