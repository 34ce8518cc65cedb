"""RowEncoder: the rows of the DataFrame written to ``format("oncelog")`` as records, checked once on the driver.

The columns are those of Spark's Kafka sink (design/spark-connector.md §3): ``value`` (required), ``key``,
``topic``, ``partition`` and ``headers``. Rows come either one by one or, from Arrow batches, column by column
(:mod:`oncelog.spark.output` sends them).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
)

from oncelog.spark.options import OptionError
from oncelog.spark.output import SEND_CHUNK_ROWS, RecordColumns


class SinkSchemaError(OptionError):
    """The DataFrame given to the sink has a missing, extra or mistyped column; ``problems`` names each."""

    header = "the DataFrame written to format('oncelog') does not fit"


@dataclass(frozen=True, slots=True)
class OutputRecord:
    """One record to produce, taken from a row."""

    topic: str
    partition: int | None
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


_TEXT_OR_BYTES = (BinaryType, StringType)
_INTEGRAL = (IntegerType, LongType, ShortType)


class RowEncoder:
    """Turns rows of the written DataFrame into records; checks the columns once, on the driver.

    Columns, as in Spark's Kafka sink: ``value`` (binary or string, required), ``key`` (binary or string),
    ``topic`` (string; the ``topic`` option overrides it), ``partition`` (int), ``headers``
    (``map<string,binary>`` or ``array<struct<key:string,value:binary>>``). Any other column is refused,
    since it would otherwise be dropped silently.

    Args:
        schema: the DataFrame's schema.
        topic: the ``topic`` option, or None to read each row's ``topic`` column.

    Raises:
        SinkSchemaError: a column is missing, unknown or of the wrong type.
    """

    def __init__(self, schema: StructType, topic: str | None) -> None:
        fields = {f.name.lower(): (i, f.dataType) for i, f in enumerate(schema.fields)}
        problems = []
        for name in fields:
            if name not in ("key", "value", "topic", "partition", "headers"):
                problems.append(
                    f"{name}: not a column of the sink; select key, value and optionally topic, partition, headers "
                    "(serialize other fields into value, e.g. to_json(struct(...)))"
                )
        if "value" not in fields:
            problems.append(
                "value: the DataFrame has no value column; select one of type binary or string, e.g. "
                "to_json(struct(*)) AS value (the same columns as Spark's Kafka sink)"
            )
        for name, allowed, wanted in (
            ("value", _TEXT_OR_BYTES, "binary or string"),
            ("key", _TEXT_OR_BYTES, "binary or string"),
            ("topic", (StringType,), "string"),
            ("partition", _INTEGRAL, "int"),
        ):
            if name in fields and not isinstance(fields[name][1], allowed):
                problems.append(f"{name}: column of type {fields[name][1].simpleString()}; cast it to {wanted}")
        if "headers" in fields and not _headers_type(fields["headers"][1]):
            problems.append(
                f"headers: column of type {fields['headers'][1].simpleString()}; use map<string,binary> or "
                "array<struct<key:string,value:binary>>"
            )
        if topic is None and "topic" not in fields:
            problems.append("topic: set the topic option, or give the DataFrame a topic column")
        if problems:
            raise SinkSchemaError(problems)
        self.topic = topic
        self._value = fields["value"]
        self._key = fields.get("key")
        self._topic_index = None if topic is not None else fields["topic"][0]
        self._partition_index = fields["partition"][0] if "partition" in fields else None
        self._headers = fields.get("headers")

    def encode(self, row: Sequence[Any]) -> OutputRecord:
        """The record of one row (positional access, so Spark ``Row`` objects and tuples both work)."""
        topic = self.topic if self._topic_index is None else row[self._topic_index]
        if not topic:
            raise ValueError(f"a row has no topic (topic column is {topic!r}) and the topic option is not set")
        return OutputRecord(
            topic=topic,
            partition=None if self._partition_index is None else _int_or_none(row[self._partition_index]),
            key=None if self._key is None else _bytes(row[self._key[0]]),
            value=_bytes(row[self._value[0]]),
            headers=() if self._headers is None else _headers(row[self._headers[0]]),
        )

    def encode_rows(self, rows: Iterable[Sequence[Any]], chunk_rows: int = SEND_CHUNK_ROWS) -> Iterator[RecordColumns]:
        """The records of ``rows`` (Spark ``Row`` objects or tuples), ``chunk_rows`` at a time."""
        iterator = iter(rows)
        while chunk := list(itertools.islice(iterator, chunk_rows)):
            records = [self.encode(row) for row in chunk]
            yield RecordColumns(
                topics=[r.topic for r in records],
                partitions=[r.partition for r in records],
                keys=[r.key for r in records],
                values=[r.value for r in records],
                headers=None if self._headers is None else [r.headers for r in records],
                target=self._target,
            )

    def encode_arrow(
        self, batches: Iterable[pa.RecordBatch], chunk_rows: int = SEND_CHUNK_ROWS
    ) -> Iterator[RecordColumns]:
        """The records of Arrow batches (columns in schema order), ``chunk_rows`` at a time.

        Columns are converted whole, in Arrow's C++ code (a string column is reinterpreted as binary
        without a copy), rather than row by row, and in slices of ``chunk_rows``, so that no more rows than
        that exist as Python objects at a time.
        """
        for batch in batches:
            for start in range(0, batch.num_rows, chunk_rows):
                yield self._arrow_columns(batch.slice(start, chunk_rows))

    def _arrow_columns(self, batch: pa.RecordBatch) -> RecordColumns:
        rows = batch.num_rows
        value_column = batch.column(self._value[0])
        key_column = None if self._key is None else batch.column(self._key[0])
        values = _binary_list(value_column)
        keys: list[bytes | None] = [None] * rows if key_column is None else _binary_list(key_column)
        topics: list[str]
        if self._topic_index is None:
            topics = [self.topic] * rows  # type: ignore[list-item]  # the encoder checked that the option is set
        else:
            topics = batch.column(self._topic_index).to_pylist()
            if None in topics or "" in topics:
                raise ValueError("a row has no topic (its topic column is empty) and the topic option is not set")
        partitions: list[int | None] = (
            [None] * rows
            if self._partition_index is None
            else [_int_or_none(p) for p in batch.column(self._partition_index).to_pylist()]
        )
        headers = None if self._headers is None else [_headers(h) for h in batch.column(self._headers[0]).to_pylist()]
        arrow = None
        if _is_binary(value_column) and (key_column is None or _is_binary(key_column)):
            arrow = (key_column, value_column)
        return RecordColumns(topics, partitions, keys, values, headers, self._target, arrow)

    @property
    def _target(self) -> tuple[str, int | None] | None:
        """The ``(topic, partition)`` of every record, when no column can change it."""
        if self.topic is None or self._partition_index is not None:
            return None
        return (self.topic, None)


def _is_binary(column: pa.Array) -> bool:
    """A column ``Producer.send_arrow`` takes as it is (binary or string, either offset width)."""
    kind = column.type
    return bool(
        pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
        or pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
    )


def _binary_list(column: pa.Array) -> list[bytes | None]:
    """The column's values as bytes (None for null); strings become their UTF-8 bytes."""
    if pa.types.is_string(column.type):
        column = column.view(pa.binary())  # same layout: no copy, no validation
    elif pa.types.is_large_string(column.type):
        column = column.view(pa.large_binary())
    elif not (pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type)):
        return [_bytes(value) for value in column.to_pylist()]
    return column.to_pylist()  # type: ignore[no-any-return]


def _headers_type(data_type: DataType) -> bool:
    if isinstance(data_type, MapType):
        return isinstance(data_type.keyType, StringType) and isinstance(data_type.valueType, _TEXT_OR_BYTES)
    if isinstance(data_type, ArrayType) and isinstance(data_type.elementType, StructType):
        names = {f.name: f.dataType for f in data_type.elementType.fields}
        return isinstance(names.get("key"), StringType) and isinstance(names.get("value"), _TEXT_OR_BYTES)
    return False


def _bytes(value: object) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return bytes(value)  # type: ignore[call-overload]  # bytearray or memoryview


def _int_or_none(value: object) -> int | None:
    return None if value is None else int(value)  # type: ignore[call-overload]


def _headers(value: object) -> tuple[tuple[str, bytes | None], ...]:
    if value is None:
        return ()
    if isinstance(value, dict):
        return tuple((str(k), _bytes(v)) for k, v in value.items())
    pairs = ((item["key"], item["value"]) if isinstance(item, dict) else item for item in value)  # type: ignore[attr-defined]
    return tuple((str(name), _bytes(data)) for name, data in pairs)


__all__ = ["OutputRecord", "RowEncoder", "SinkSchemaError"]
