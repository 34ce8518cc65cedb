"""How the sink hands records to the producer: bulk sends in each partition's order, and failures surfacing.

A recording stand-in for the producer shows the calls :class:`BatchedSender` makes; the encoder tests check
that the column-wise Arrow path gives exactly the records, and the digest, of the row-by-row path, since a
replay compares digests committed by either.
"""

from __future__ import annotations

import itertools
from concurrent.futures import Future
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed (pip install -e '.[spark]')")

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from oncelog.errors import MessageTooLarge
from oncelog.spark.output import BatchedSender, RecordColumns
from oncelog.spark.writer import BatchDigest, RowEncoder, arrow_rows


def _done(result: object = None, error: BaseException | None = None) -> Future[Any]:
    future: Future[Any] = Future()
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)
    return future


class RecordingProducer:
    """Records every record handed over, in order, and the size of each ``send_batch`` call."""

    def __init__(self, fail_batch: int | None = None) -> None:
        self.sent: list[tuple[str, int | None, bytes | None, bytes | None, tuple[Any, ...]]] = []
        self.batch_sizes: list[int] = []
        self.batch_keys: list[list[bytes | None] | None] = []
        self.flushed = 0
        self.unsettled: list[Future[Any]] = []
        self._fail_batch = fail_batch

    def send(self, topic: str, value: Any, key: Any = None, headers: Any = None, partition: Any = None) -> Future[Any]:
        self.sent.append((topic, partition, key, value, tuple(headers or ())))
        return _done()

    def send_batch(
        self, topic: str, values: list[Any], keys: list[Any] | None = None, partition: int | None = None
    ) -> Future[Any]:
        self.sent += [(topic, partition, k, v, ()) for k, v in zip(keys or [None] * len(values), values, strict=True)]
        self.batch_sizes.append(len(values))
        self.batch_keys.append(keys)
        if self._fail_batch == len(self.batch_sizes):
            future: Future[Any] = Future()  # fails only once the producer flushes, as a refused batch does
            self.unsettled.append(future)
            return future
        return _done([None] * len(values))

    def flush(self, timeout: float | None = None) -> None:
        self.flushed += 1
        for future in self.unsettled:
            future.set_exception(MessageTooLarge("the batch exceeds the topic's max_message_bytes"))


def columns(*records: tuple[str, int | None, str, tuple[tuple[str, bytes], ...]]) -> RecordColumns:
    """``(topic, partition, value, headers)`` records, keyed by their value."""
    return RecordColumns(
        topics=[r[0] for r in records],
        partitions=[r[1] for r in records],
        keys=[r[2].encode() for r in records],
        values=[r[2].encode() for r in records],
        headers=[r[3] for r in records],
    )


def test_sender_keeps_the_order_of_records_that_may_share_a_partition() -> None:
    """Explicit partitions, the partitioner's choice and records with headers, interleaved on two topics."""
    h = (("h", b"1"),)
    records = [
        ("a", None, "a0", ()),
        ("a", 1, "a1", ()),
        ("b", None, "b0", ()),
        ("a", 2, "a2", ()),
        ("a", 1, "a3", h),
        ("a", 1, "a4", ()),
        ("b", None, "b1", h),
        ("a", None, "a5", ()),
        ("b", None, "b2", ()),
        ("a", 2, "a6", ()),
    ]
    producer = RecordingProducer()
    sender = BatchedSender(producer, chunk_rows=100)
    sender.add(columns(*records))
    sender.finish()
    position = {value.decode(): index for index, (_, _, _, value, _) in enumerate(producer.sent)}
    assert sorted(position) == sorted(r[2] for r in records), "every record exactly once"
    for first, second in itertools.combinations(records, 2):
        (topic1, partition1, value1, _), (topic2, partition2, value2, _) = first, second
        may_share = topic1 == topic2 and (partition1 == partition2 or None in (partition1, partition2))
        if may_share:
            assert position[value1] < position[value2], f"{value2} overtook {value1}"
    assert next(s for s in producer.sent if s[3] == b"a3")[4] == h, "headers travel with send()"


def test_sender_sends_chunks_of_at_most_chunk_rows_without_keys_when_there_are_none() -> None:
    producer = RecordingProducer()
    sender = BatchedSender(producer, chunk_rows=4)
    for start in (0, 3, 10):
        values = [f"v{i}".encode() for i in range(start, start + (3 if start < 10 else 5))]
        sender.add(
            RecordColumns(["t"] * len(values), [None] * len(values), [None] * len(values), values, None, ("t", None))
        )
    sender.finish()
    assert [value for _, _, _, value, _ in producer.sent] == [
        f"v{i}".encode() for i in [0, 1, 2, 3, 4, 5, *range(10, 15)]
    ]
    assert producer.batch_sizes == [4, 4, 3] and sender.records == 11
    assert producer.batch_keys == [None, None, None], "keyless records let the sticky partitioner choose"


def test_sink_send_failure_fails_the_commit_not_silently() -> None:
    """A batch refused after send_batch returned: finish(), which runs before the commit, raises its error."""
    producer = RecordingProducer(fail_batch=1)
    sender = BatchedSender(producer, chunk_rows=2)
    sender.add(columns(("t", None, "a", ()), ("t", None, "b", ()), ("t", None, "c", ())))
    with pytest.raises(MessageTooLarge, match="max_message_bytes"):
        sender.finish()
    assert producer.flushed == 1, "the failure is found after waiting for every acknowledgement"


def test_sender_reports_a_batch_that_failed_long_before_the_commit() -> None:
    """The first chunk failed at once; thousands of records later, finish() still raises its error."""

    class FailsFirstChunk(RecordingProducer):
        def send_batch(self, topic: str, values: list[Any], keys: Any = None, partition: Any = None) -> Future[Any]:
            super().send_batch(topic, values, keys, partition)
            if len(self.batch_sizes) == 1:
                return _done(error=MessageTooLarge("refused"))
            return _done([None] * len(values))

    producer = FailsFirstChunk()
    sender = BatchedSender(producer, chunk_rows=3)
    for i in range(40):
        sender.add(columns(("t", None, f"v{i}", ()), ("t", 1, f"w{i}", (("h", b"x"),))))
    with pytest.raises(MessageTooLarge, match="refused"):
        sender.finish()
    assert len(producer.sent) == 80


# ------------------------------------------------------------------------------------------------ encoding


_HEADER = StructType([StructField("key", StringType()), StructField("value", BinaryType())])


@pytest.mark.parametrize("string_type", [pa.string(), pa.large_string()])
def test_arrow_columns_give_the_records_and_digest_of_rows(string_type: pa.DataType) -> None:
    """Every column kind, nulls included: the Arrow path must match the row path, or replays would mismatch."""
    schema = StructType(
        [
            StructField("topic", StringType()),
            StructField("partition", IntegerType()),
            StructField("key", BinaryType()),
            StructField("value", StringType()),
            StructField("headers", MapType(StringType(), BinaryType())),
        ]
    )
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array(["t1", "t2", "t1"], type=string_type),
            pa.array([0, None, 2], type=pa.int32()),
            pa.array([b"k", None, b""]),
            pa.array(["v", "", None], type=string_type),
            pa.array([[("h", b"1")], [], None], type=pa.map_(pa.string(), pa.binary())),
        ],
        names=["topic", "partition", "key", "value", "headers"],
    )
    encoder = RowEncoder(schema, None)
    by_rows = [encoder.encode(row) for row in arrow_rows(iter([batch]))]
    [chunk] = encoder.encode_arrow([batch])
    assert list(chunk.rows()) == [(r.topic, r.partition, r.key, r.value, r.headers) for r in by_rows]
    assert chunk.target is None
    row_digest, column_digest = BatchDigest(), BatchDigest()
    for record in by_rows:
        row_digest.add(record)
    column_digest.add_columns(chunk)
    assert (column_digest.rows, column_digest.hexdigest) == (row_digest.rows, row_digest.hexdigest)


def test_arrow_batches_are_cut_into_chunks_with_one_target_under_the_topic_option() -> None:
    schema = StructType([StructField("key", StringType()), StructField("value", StringType())])
    batch = pa.RecordBatch.from_arrays([pa.array([str(i) for i in range(5)]), pa.array(["x"] * 5)], ["key", "value"])
    chunks = list(RowEncoder(schema, "out").encode_arrow([batch, batch], chunk_rows=2))
    assert [len(c) for c in chunks] == [2, 2, 1, 2, 2, 1]
    assert {c.target for c in chunks} == {("out", None)}
    assert [k for c in chunks for k in c.keys] == [str(i).encode() for i in range(5)] * 2
    row_digest, column_digest = BatchDigest(), BatchDigest()
    for chunk in chunks:
        column_digest.add_columns(chunk)
    for record in RowEncoder(schema, "out").encode_rows([(str(i), "x") for i in range(5)] * 2):
        row_digest.add_columns(record)
    assert column_digest.hexdigest == row_digest.hexdigest


class ArrowRecordingProducer(RecordingProducer):
    """A producer with ``send_arrow``: records what reaches it as Arrow columns, in the same list, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.arrow_calls: list[tuple[str, int | None, int, bool]] = []

    def send_arrow(self, topic: str, values: Any, keys: Any = None, partition: int | None = None) -> Future[Any]:
        key_list = [None] * len(values) if keys is None else keys.to_pylist()
        as_bytes = [v.encode() if isinstance(v, str) else v for v in values.to_pylist()]
        key_bytes = [k.encode() if isinstance(k, str) else k for k in key_list]
        self.sent += [(topic, partition, k, v, ()) for k, v in zip(key_bytes, as_bytes, strict=True)]
        self.arrow_calls.append((topic, partition, len(values), keys is not None))
        return _done([None] * len(values))


def test_arrow_chunks_of_one_topic_go_to_send_arrow_after_what_was_buffered_before_them() -> None:
    schema = StructType([StructField("key", StringType()), StructField("value", StringType())])
    batch = pa.RecordBatch.from_arrays([pa.array(["a", None, "c"]), pa.array(["1", "2", None])], ["key", "value"])
    keyless = pa.RecordBatch.from_arrays([pa.array([None, None], pa.string()), pa.array(["4", "5"])], ["key", "value"])
    producer = ArrowRecordingProducer()
    sender = BatchedSender(producer, chunk_rows=100)
    encoder = RowEncoder(schema, "out")
    [rows] = encoder.encode_rows([("r", "0")])  # rows, no Arrow columns: buffered for send_batch
    sender.add(rows)
    for chunk in encoder.encode_arrow([batch, keyless]):
        sender.add(chunk)
    sender.finish()
    assert [(k, v) for _, _, k, v, _ in producer.sent] == [
        (b"r", b"0"),
        (b"a", b"1"),
        (None, b"2"),
        (b"c", None),
        (None, b"4"),
        (None, b"5"),
    ]
    assert producer.batch_sizes == [1]
    assert producer.arrow_calls == [("out", None, 3, True), ("out", None, 2, False)]  # all-null keys: keyless
    assert sender.records == 6


def test_arrow_rows_without_a_topic_are_refused() -> None:
    schema = StructType([StructField("topic", StringType()), StructField("value", StringType())])
    batch = pa.RecordBatch.from_arrays([pa.array(["t", None]), pa.array(["a", "b"])], ["topic", "value"])
    with pytest.raises(ValueError, match="a row has no topic"):
        list(RowEncoder(schema, None).encode_arrow([batch]))


def test_kafka_style_header_arrays_convert_column_wise() -> None:
    schema = StructType([StructField("value", StringType()), StructField("headers", ArrayType(_HEADER))])
    header = pa.struct([("key", pa.string()), ("value", pa.binary())])
    batch = pa.RecordBatch.from_arrays(
        [pa.array(["v1", "v2"]), pa.array([[{"key": "h", "value": b"1"}], []], type=pa.list_(header))],
        names=["value", "headers"],
    )
    [chunk] = RowEncoder(schema, "out").encode_arrow([batch])
    assert chunk.headers == [(("h", b"1"),), ()]
