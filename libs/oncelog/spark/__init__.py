"""PySpark connector (extra ``spark``): the ``oncelog`` data source, read_committed source and exactly-once sink.

``spark.dataSource.register(OncelogDataSource)`` makes ``format("oncelog")`` available in a session, for
``spark.read``/``readStream`` (offsets bounded by the last stable offset) and ``df.write``/``writeStream``
(one transaction per Spark task, replay-safe, see :mod:`oncelog.spark.writer`; or, with option
``atomicity=batch``, one transaction per micro-batch committed by the driver, see :mod:`oncelog.spark.atomic`).
"""

from oncelog.spark.atomic import BatchTooLargeError
from oncelog.spark.options import OptionError, SinkOptions, SourceOptions
from oncelog.spark.source import OncelogDataSource
from oncelog.spark.writer import (
    NonDeterministicBatchError,
    RewoundCheckpointError,
    SinkSchemaError,
    UnstablePartitioningError,
)

__all__ = [
    "BatchTooLargeError",
    "NonDeterministicBatchError",
    "OncelogDataSource",
    "OptionError",
    "RewoundCheckpointError",
    "SinkOptions",
    "SinkSchemaError",
    "SourceOptions",
    "UnstablePartitioningError",
]
