"""The ``oncelog`` Spark data source: ``format("oncelog")`` for reads and writes (Python Data Source API).

Register it once per session, then use it like Spark's Kafka source::

    from oncelog.spark import OncelogDataSource
    spark.dataSource.register(OncelogDataSource)
    orders = (spark.readStream.format("oncelog")
              .option("bootstrap", "127.0.0.1:7101").option("topic", "orders")
              .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", 10000)
              .load())
    (orders.selectExpr("key", "upper(CAST(value AS STRING)) AS value")
           .writeStream.format("oncelog").option("bootstrap", "127.0.0.1:7101").option("topic", "shipped")
           .option("checkpointLocation", "/data/checkpoints/shipping").start())

Source options are parsed when the DataFrame is defined (``load()`` asks for the schema), so a missing
topic option or malformed offsets JSON fails at once with a message naming the option; whether the topics
exist is checked when the query plans its first batch. Sink options and the written columns are checked
when the query starts. See :mod:`oncelog.spark.options` for every option.
"""

from __future__ import annotations

import os

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from oncelog.errors import OncelogError, UnknownTopicOrPartition
from oncelog.spark.atomic import OncelogAtomicBatchWriter, OncelogAtomicStreamWriter
from oncelog.spark.channels import LogClient
from oncelog.spark.checkpoint import check_sink_names
from oncelog.spark.options import (
    ATOMICITY_BATCH,
    OptionError,
    SinkOptions,
    SourceOptions,
    parse_sink_options,
    parse_source_options,
)
from oncelog.spark.reader import OncelogBatchReader, OncelogStreamReader, schema_of
from oncelog.spark.writer import OncelogBatchWriter, OncelogStreamWriter, RowEncoder

__all__ = ["OncelogDataSource"]


class OncelogDataSource(DataSource):
    """Format ``oncelog``: topic partitions as rows of ``key, value, topic, partition, offset, timestamp,
    timestampType`` (and ``headers`` with ``includeHeaders``), as Spark's Kafka source.

    Spark builds this object from the ``.option(...)`` values (``self.options``, case-insensitive) in
    several driver processes; construction does no I/O. Readers get a parsed, picklable copy of the
    options and never hold a connection (design/spark-connector.md §3.1).
    """

    @classmethod
    def name(cls) -> str:
        """The format name: ``spark.read.format("oncelog")``."""
        return "oncelog"

    def schema(self) -> StructType:
        """The row schema (with ``headers`` under ``includeHeaders``); validates the options so that bad ones
        fail at ``load()``."""
        return schema_of(self._check_source_options())

    def reader(self, schema: StructType) -> DataSourceReader:
        """The batch reader (``spark.read``)."""
        return OncelogBatchReader(parse_source_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """The micro-batch reader (``spark.readStream``)."""
        return OncelogStreamReader(parse_source_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """The batch writer (``df.write``): each task's rows in one transaction, or (``atomicity=batch``) all."""
        options, encoder = self._sink(schema, overwrite)
        if options.atomicity == ATOMICITY_BATCH:
            return OncelogAtomicBatchWriter(options, encoder)
        return OncelogBatchWriter(options, encoder)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """The exactly-once micro-batch writer (``df.writeStream``): per task, or per batch with ``atomicity=batch``."""
        options, encoder = self._sink(schema, overwrite)
        check_sink_names(options)
        if options.atomicity == ATOMICITY_BATCH:
            return OncelogAtomicStreamWriter(options, encoder)
        return OncelogStreamWriter(options, encoder)

    def _sink(self, schema: StructType, overwrite: bool) -> tuple[SinkOptions, RowEncoder]:
        options = parse_sink_options(self.options)
        if overwrite:
            raise OptionError(["mode: a topic is append-only; use outputMode('append') or mode('append')"])
        encoder = RowEncoder(schema, options.topic)
        # The marker topic must exist before any task commits a marker under it; ask on the driver. Spark
        # builds a writer for every micro-batch and again for its commit, in reused Python processes: a topic
        # found once is not asked for again by the same process (tasks still fail on a topic deleted since).
        client = LogClient(options.bootstrap, request_timeout_s=options.request_timeout_s)
        for name, topic in (("topic", options.topic), ("markerTopic", options.marker_topic)):
            if topic is None:
                continue
            key = (os.getpid(), options.bootstrap, topic)
            if key in _FOUND_TOPICS:
                continue
            try:
                client.partitions(topic, refresh=True)
                _FOUND_TOPICS.add(key)
            except UnknownTopicOrPartition as err:
                raise OptionError([f"{name}: {err.message} (bootstrap {','.join(options.bootstrap)})"]) from None
            except OncelogError as err:
                raise OptionError(
                    [f"bootstrap: the cluster at {','.join(options.bootstrap)} did not answer: {err.message}"]
                ) from None
        return options, encoder

    def _check_source_options(self) -> SourceOptions:
        # load() cannot tell batch from streaming, so each mode's own options are checked under that mode (their
        # values: a negative maxOffsetsPerTrigger fails here); whether the option fits the mode is decided by the
        # reader() and streamReader() calls at query start
        options = dict(self.options.items())
        parse_source_options({k: v for k, v in options.items() if k.lower() not in _BATCH_ONLY}, streaming=True)
        return parse_source_options(
            {k: v for k, v in options.items() if k.lower() not in _STREAM_ONLY}, streaming=False
        )


_FOUND_TOPICS: set[tuple[int, tuple[str, ...], str]] = set()
"""(process id, bootstrap, topic) of the sink topics this process found in the cluster."""

_BATCH_ONLY = {"endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp"}
_STREAM_ONLY = {"maxrecordspertrigger", "maxoffsetspertrigger", "maxbytespertrigger"}
