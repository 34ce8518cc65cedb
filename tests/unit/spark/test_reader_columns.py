"""The source's rows built from fetched columns (``columns_to_arrow``): the schema of Spark's Kafka source, the
same values a row-by-row conversion gives, timestamp types and headers included."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed (pip install -e '.[spark]')")

from oncelog.client.fetch_filter import CompletedFetch
from oncelog.client.records import TopicPartition
from oncelog.records import Record, build_batch
from oncelog.spark.reader import arrow_schema, columns_to_arrow
from oncelog.vocabulary import IsolationLevel

TP = TopicPartition("events", 4)
TS = 1_700_000_000_000


def fetched(*, log_append_time: bool, headers: bool) -> CompletedFetch:
    pairs = (("h", b"1"), ("h", b"2"), ("n", None)) if headers else ()
    first = build_batch(
        [Record(key=b"k%d" % i, value=b"v%d" % i, headers=pairs, timestamp=TS + i) for i in range(3)],
        base_offset=10,
        base_timestamp=TS,
    )
    second = bytearray(
        build_batch([Record(key=None, value=None, headers=pairs)], base_offset=13, base_timestamp=TS + 50)
    )
    if log_append_time:
        second[22] |= 0x08  # attributes (int16 at byte 21) bit 3: LogAppendTime
    return CompletedFetch(
        TP, first + bytes(second), fetch_offset=11, isolation_level=IsolationLevel.READ_COMMITTED, check_crcs=False
    )


@pytest.mark.parametrize("headers", [False, True])
@pytest.mark.parametrize("log_append_time", [False, True])
def test_rows_from_columns_are_the_rows_of_each_record(log_append_time: bool, headers: bool) -> None:
    records = fetched(log_append_time=log_append_time, headers=headers).fetch_records(100)
    chunks = fetched(log_append_time=log_append_time, headers=headers).fetch_columns(100)
    batch = columns_to_arrow(TP, chunks, include_headers=headers)
    assert batch.schema == arrow_schema(headers)
    expected = [
        {
            "key": r.key,
            "value": r.value,
            "topic": "events",
            "partition": 4,
            "offset": r.offset,
            "timestamp": datetime.fromtimestamp(r.timestamp / 1000, tz=UTC),
            "timestampType": int(r.timestamp_type),
            **({"headers": [{"key": k, "value": v} for k, v in r.headers]} if headers else {}),
        }
        for r in records
    ]
    assert [row["offset"] for row in expected] == [11, 12, 13], "from the fetch offset on"
    assert batch.to_pylist() == expected
    assert [row["timestampType"] for row in expected] == [0, 0, 1 if log_append_time else 0]
