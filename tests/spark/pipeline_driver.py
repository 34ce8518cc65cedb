"""A Spark driver process for the crash test: oncelog topic → upper-cased values → oncelog topic.

``python pipeline_driver.py BOOTSTRAP SOURCE SINK CHECKPOINT [MASTER SHUFFLE_PARTITIONS ONCE]`` streams until it
is killed. The test kills the whole process group (driver JVM and Python workers) with SIGKILL, then restarts the
same pipeline (``test_sink.pipeline``) from the checkpoint. With ``SHUFFLE_PARTITIONS`` the rows are also
shuffled by key (``repartition``) into that many Spark partitions, on the cores ``MASTER`` gives; with ``ONCE``
the query runs to the data available now and the process exits.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from oncelog.testing.spark import local_spark_session


def main(
    bootstrap: str,
    source: str,
    sink: str,
    checkpoint: str,
    master: str = "local[2,2]",
    shuffle: str = "",
    once: str = "",
) -> None:
    """Run the pipeline until killed."""
    tmp = Path(tempfile.mkdtemp(prefix="spark-driver-"))
    with local_spark_session(tmp, master=master, app_name="oncelog-crash-test") as spark:
        frame = (
            spark.readStream.format("oncelog")
            .option("bootstrap", bootstrap)
            .option("topic", source)
            .option("startingOffsets", "earliest")
            .option("maxRecordsPerTrigger", "30")
            .load()
            .selectExpr("CAST(offset AS STRING) AS key", "upper(CAST(value AS STRING)) AS value")
        )
        if shuffle:
            spark.conf.set("spark.sql.shuffle.partitions", shuffle)
            frame = frame.repartition("key")
        writer = (
            frame.writeStream.format("oncelog")
            .option("bootstrap", bootstrap)
            .option("topic", sink)
            .option("checkpointLocation", checkpoint)
        )
        query = (writer.trigger(availableNow=True) if once else writer).start()
        query.awaitTermination()


if __name__ == "__main__":
    main(*sys.argv[1:8])
