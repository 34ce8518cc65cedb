"""The columnar record encoder (oncelog.records.columnar) and the Arrow form of a producer's bulk records.

The accumulator's property test (tests/unit/client/test_accumulator.py) checks that Arrow columns make the same
batches as rows; these check what only columns have: string and chunked columns, sliced arrays, and errors.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.client.bulk_records import ColumnRecords, RowRecords
from oncelog.errors import MessageTooLarge
from oncelog.records.batch import BATCH_OVERHEAD
from oncelog.records.builder import RecordsBuilder
from oncelog.records.columnar import (
    RECORDS_SCHEMA,
    DecodedColumns,
    as_binary_column,
    encode_run,
    fitting_records,
    plan_batches,
    records_table,
)
from oncelog.records.varint import encode_varlong


def _rows(keys: list[bytes | None] | None, values: list[bytes | None], first_delta: int = 0) -> bytes:
    builder = RecordsBuilder()
    builder.count = first_delta
    builder.base_timestamp = 0
    assert builder.append_run(keys, values, 0, 0, 1 << 40) == len(values)
    return bytes(builder._section)


def _columns(keys: object | None, values: object, first_delta: int = 0) -> bytes:
    key_column = None if keys is None else as_binary_column(keys, "key")
    return bytes(encode_run(key_column, as_binary_column(values, "value"), first_delta, encode_varlong(0)))


def test_a_string_column_is_written_as_its_utf8_bytes() -> None:
    texts = ["grüße", "", None, "日本語" * 50]
    expected = _rows(None, [None if t is None else t.encode() for t in texts])
    assert _columns(None, pa.array(texts, pa.string())) == expected
    assert _columns(None, pa.array(texts, pa.large_string())) == expected


def test_a_chunked_column_and_a_sliced_array_encode_only_their_own_entries() -> None:
    values = [bytes([i]) * (i * 37 % 300) for i in range(200)]
    keys = [None if i % 3 == 0 else f"k{i}".encode() for i in range(200)]
    whole = pa.array(values, pa.binary())
    sliced = whole.slice(50, 100)  # offset 50 into the buffers: lengths and bytes must start there
    assert _columns(pa.array(keys).slice(50, 100), sliced, 7) == _rows(keys[50:150], values[50:150], 7)
    chunked = pa.chunked_array([whole.slice(0, 120), whole.slice(120)])
    assert _columns(None, chunked) == _rows(None, values)


def test_fitting_records_counts_what_fits_in_the_room_exactly() -> None:
    values = [b"v" * 100] * 50
    column = as_binary_column(pa.array(values), "value")
    one = len(_rows(None, values[:1]))
    assert fitting_records(None, column, 0, encode_varlong(0), one * 10) == 10
    assert fitting_records(None, column, 0, encode_varlong(0), one * 10 - 1) == 9
    assert fitting_records(None, column, 0, encode_varlong(0), 0) == 0


@pytest.mark.parametrize(
    ("column", "message"),
    [
        (pa.array([1, 2, 3]), "values must be binary or string, not the Arrow type int64"),
        ([b"a", b"b"], "values must be a pyarrow Array or ChunkedArray of binary or string, not list"),
    ],
)
def test_a_column_of_another_type_is_refused_with_what_to_pass(column: object, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        ColumnRecords.from_arrow(column)


def test_keys_and_values_of_different_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match="2 keys for 3 values"):
        ColumnRecords.from_arrow(pa.array([b"a", b"b", b"c"]), pa.array([b"k", b"l"]))


def test_a_record_too_large_for_a_request_is_refused_like_a_row() -> None:
    values = [b"small", b"x" * 5_000, b"small"]
    with pytest.raises(MessageTooLarge) as as_row:
        RowRecords(None, values).memory_bound(16_384, 4_096)
    with pytest.raises(MessageTooLarge) as as_column:
        ColumnRecords.from_arrow(pa.array(values)).memory_bound(16_384, 4_096)
    assert str(as_column.value) == str(as_row.value)


def test_the_memory_bound_covers_the_batches_the_records_fill_and_is_no_looser_than_the_rows_bound() -> None:
    values = [None if i % 5 == 0 else b"v" * (i * 7 % 700) for i in range(300)]
    keys = [None if i % 4 == 0 else b"key" * (i % 3) for i in range(300)]
    records = ColumnRecords.from_arrow(pa.array(values), pa.array(keys))
    for batch_size in (1_024, 16_384, 1 << 20):
        bound = records.memory_bound(batch_size, 1 << 20)
        filled, start = [], 0
        while start < len(records):
            builder = RecordsBuilder()
            start += records.append_to(builder, start, 0, batch_size)
            filled.append(builder.size_in_bytes)
        assert max(filled) <= batch_size
        assert sum(filled) <= bound <= RowRecords(keys, values).memory_bound(batch_size, 1 << 20)


def test_split_keeps_each_partitions_records_in_their_order_with_their_positions() -> None:
    values = [f"v{i}".encode() for i in range(10)]
    records = ColumnRecords.from_arrow(pa.array(values), pa.array([f"k{i}".encode() for i in range(10)]))
    targets = [2, 0, 2, 1, 0, 2, 2, 1, 0, 0]
    groups = records.split(targets)
    assert sorted(groups) == [0, 1, 2]
    for target, (positions, group) in groups.items():
        assert positions == [i for i, t in enumerate(targets) if t == target]
        assert isinstance(group, ColumnRecords)
        assert group.values.array.to_pylist() == [values[i] for i in positions]
    (only,) = records.split([3] * 10).values()
    assert only == (None, records)


def test_a_poll_with_no_records_is_an_empty_table_with_every_column() -> None:
    table = records_table([])
    assert table.num_rows == 0 and table.schema == RECORDS_SCHEMA


def test_a_polls_table_keeps_the_chunks_order_and_does_not_copy_keys_or_values() -> None:
    def chunk(first: int, count: int) -> DecodedColumns:
        values = pa.array([b"v%d" % i for i in range(first, first + count)], pa.binary())
        keys = pa.array([None] * count, pa.binary())
        return DecodedColumns(np.arange(first, first + count), np.full(count, 7), keys, values)

    chunks = [("b", 1, chunk(0, 3)), ("a", 0, chunk(10, 2)), ("b", 1, chunk(3, 1))]
    table = records_table(chunks)
    assert table.schema == RECORDS_SCHEMA
    assert table.column("topic").to_pylist() == ["b"] * 3 + ["a"] * 2 + ["b"]
    assert table.column("partition").to_pylist() == [1, 1, 1, 0, 0, 1]
    assert table.column("offset").to_pylist() == [0, 1, 2, 10, 11, 3]
    assert table.column("value").to_pylist() == [b"v0", b"v1", b"v2", b"v10", b"v11", b"v3"]
    assert table.column("headers").to_pylist() == [[]] * 6
    for column in ("key", "value"):
        data = [c.buffers()[2] for c in table.column(column).chunks]
        given_data = [getattr(columns, column + "s").buffers()[2] for _, _, columns in chunks]
        assert [b.address for b in data] == [b.address for b in given_data], f"{column}s were copied"


@settings(max_examples=200, deadline=None)
@given(
    records=st.lists(
        st.tuples(st.none() | st.binary(max_size=200), st.none() | st.binary(max_size=2_000)), min_size=1, max_size=300
    ),
    keyed=st.booleans(),
    section=st.integers(1, 20_000),
)
def test_fresh_batches_are_planned_and_encoded_as_one_append_run_per_batch_would(
    records: list[tuple[bytes | None, bytes | None]], keyed: bool, section: int
) -> None:
    keys = [key for key, _ in records] if keyed else None
    values = [value for _, value in records]
    expected, start = [], 0
    while start < len(values):
        builder = RecordsBuilder()
        taken = builder.append_run(keys, values, start, 0, section + BATCH_OVERHEAD)
        expected.append((taken, bytes(builder._section)))
        start += taken
    key_column = None if keys is None else as_binary_column(pa.array(keys, pa.binary()), "key")
    value_column = as_binary_column(pa.array(values, pa.binary()), "value")
    plan = plan_batches(key_column, value_column, section)
    assert plan == [(taken, len(encoded)) for taken, encoded in expected]
    firsts = np.repeat(np.cumsum([0, *[taken for taken, _ in plan][:-1]]), [taken for taken, _ in plan])
    encoded = bytes(encode_run(key_column, value_column, np.arange(len(values)) - firsts, encode_varlong(0)))
    assert encoded == b"".join(section_bytes for _, section_bytes in expected)


def test_a_batch_exactly_full_takes_its_last_record() -> None:
    values = [b"v" * 100] * 30
    one = len(_rows(None, values[:1]))
    plan = plan_batches(None, as_binary_column(pa.array(values), "value"), one * 10)
    assert plan == [(10, one * 10)] * 3
