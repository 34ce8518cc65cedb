"""A Spark driver process for the crash test: oncelog topic → upper-cased values → oncelog topic.

``python pipeline_driver.py BOOTSTRAP SOURCE SINK CHECKPOINT`` streams until it is killed. The test kills
the whole process group (driver JVM and Python workers) with SIGKILL, then restarts the same pipeline
(``test_sink.pipeline``) from the checkpoint.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from oncelog.testing.spark import local_spark_session


def main(bootstrap: str, source: str, sink: str, checkpoint: str) -> None:
    """Run the pipeline until killed."""
    with local_spark_session(Path(tempfile.mkdtemp(prefix="spark-driver-")), app_name="oncelog-crash-test") as spark:
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
