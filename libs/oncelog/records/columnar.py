"""Records of Arrow columns encoded into batches, and batches decoded into Arrow columns, with no Python per record
beyond finding where each one starts.

The producer's bulk path (:meth:`oncelog.records.builder.RecordsBuilder.append_run`) still runs a few Python
statements per record, which bounds it at a few hundred thousand small records a second on one core. Here the
key and value columns stay in Arrow: every record's varints (length, offset delta, key length, value length) are
computed for a whole call in numpy (:func:`plan_batches` first lays the records out in batches), laid out as one
small binary column, and Arrow's C++ kernel ``binary_join_element_wise`` interleaves them with the keys and values.
The result is byte for byte what ``append_run`` writes (tests/unit/records/test_columnar.py checks it against that
path).

The consumer's way back (:func:`decode_columns`) walks a batch's records once in Python to find where each
starts (a record's place depends on the lengths before it), then decodes every field of every record at once with
numpy and hands the keys and values to Arrow as views into the decompressed section (``binary_view``), cast to
``binary`` in Arrow's C++ code. A batch whose records carry headers, or that is not well formed, is left to the
row decoder (:func:`oncelog.records.batch.decode_record_fields`), which reads headers and names what is wrong.

A column is a ``pyarrow`` array of ``binary``, ``large_binary``, ``string`` or ``large_string`` (strings are
written as their UTF-8 bytes); a null is a null key or value. pyarrow and numpy are imported with this module:
``pip install oncelog[arrow]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from oncelog.records.batch import BatchHeader, TimestampType
from oncelog.records.varint import decode_varint

try:
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
except ImportError as missing:  # pragma: no cover - depends on the environment
    raise ImportError(
        f"the columnar record path needs pyarrow and numpy ({missing}); install them with pip install 'oncelog[arrow]'"
    ) from None

__all__ = [
    "RECORDS_SCHEMA",
    "records_table",
    "HEADERS_TYPE",
    "BinaryColumn",
    "DecodedColumns",
    "as_binary_column",
    "concat_columns",
    "decode_batches",
    "decode_columns",
    "encode_run",
    "fitting_records",
    "plan_batches",
]

_VARINT_BYTES = 5  # an int32 varint's longest form; every length and delta here is an int32

_TEXT_TO_BINARY = {pa.string(): pa.binary(), pa.large_string(): pa.large_binary()}


@dataclass(frozen=True, slots=True)
class BinaryColumn:
    """A key or value column as the encoder reads it.

    Attributes:
        array: the column, viewed as ``binary`` or ``large_binary``.
        lengths: each entry's length in bytes, -1 for null (int64).
    """

    array: Any
    lengths: Any

    def __len__(self) -> int:
        return len(self.array)

    def slice(self, start: int, stop: int) -> BinaryColumn:
        return BinaryColumn(self.array.slice(start, stop - start), self.lengths[start:stop])

    def payload_bytes(self) -> int:
        """The bytes of every non-null entry."""
        return int(self.lengths[self.lengths > 0].sum())

    def take(self, positions: Any) -> BinaryColumn:
        """The entries at ``positions`` (an integer array), in that order."""
        return BinaryColumn(self.array.take(pa.array(positions, type=pa.int64())), self.lengths[positions])

    def item(self, index: int) -> bytes | None:
        value = self.array[index].as_py()
        return None if value is None else bytes(value)


def as_binary_column(column: Any, what: str) -> BinaryColumn:
    """``column`` (a pyarrow Array or ChunkedArray of binary or string type) ready for :func:`encode_run`.

    Raises:
        TypeError: not an Arrow array, or of another type; the message names ``what`` (key or value).
    """
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if not isinstance(column, pa.Array):
        raise TypeError(
            f"{what}s must be a pyarrow Array or ChunkedArray of binary or string, not {type(column).__name__}"
        )
    data_type = column.type
    if data_type in _TEXT_TO_BINARY:
        column = column.view(_TEXT_TO_BINARY[data_type])  # the same layout: no copy, no validation
    elif not (pa.types.is_binary(data_type) or pa.types.is_large_binary(data_type)):
        raise TypeError(f"{what}s must be binary or string, not the Arrow type {data_type}")
    offsets = np.frombuffer(column.buffers()[1], dtype=np.int64 if pa.types.is_large_binary(column.type) else np.int32)[
        column.offset : column.offset + len(column) + 1
    ]
    lengths = np.diff(offsets).astype(np.int64)
    if column.null_count:
        lengths[column.is_null().to_numpy(zero_copy_only=False)] = -1
    return BinaryColumn(column, lengths)


def _zigzag(values: Any) -> Any:
    return (values << 1) ^ (values >> 63)


def _varint_sizes(unsigned: Any) -> Any:
    sizes = np.ones(len(unsigned), dtype=np.int64)
    for shift in (7, 14, 21, 28):
        sizes += unsigned >= (1 << shift)
    return sizes


def _body_parts(
    keys: BinaryColumn | None, values: BinaryColumn, first_delta: Any, timestamp_delta: bytes
) -> tuple[Any, Any, Any, Any, Any, Any]:
    count = len(values)
    if isinstance(first_delta, int):
        deltas = _zigzag(np.arange(first_delta, first_delta + count, dtype=np.int64))
    else:  # each record's own offset delta
        deltas = _zigzag(np.asarray(first_delta, dtype=np.int64))
    delta_sizes = _varint_sizes(deltas)
    key_lengths = np.full(count, -1, dtype=np.int64) if keys is None else keys.lengths
    key_varints = _zigzag(key_lengths)
    key_sizes = _varint_sizes(key_varints)
    value_varints = _zigzag(values.lengths)
    value_sizes = _varint_sizes(value_varints)
    # attributes, timestamp delta, offset delta, key length, key, value length, value, header count
    bodies = (
        1
        + len(timestamp_delta)
        + delta_sizes
        + key_sizes
        + np.maximum(key_lengths, 0)
        + value_sizes
        + np.maximum(values.lengths, 0)
        + 1
    )
    return deltas, delta_sizes, key_varints, key_sizes, value_varints, bodies


def fitting_records(
    keys: BinaryColumn | None, values: BinaryColumn, first_delta: int, timestamp_delta: bytes, room: int
) -> int:
    """How many records from the start of ``values`` take at most ``room`` bytes once encoded."""
    *_, bodies = _body_parts(keys, values, first_delta, timestamp_delta)
    totals = np.cumsum(_varint_sizes(_zigzag(bodies)) + bodies)
    return int(np.searchsorted(totals, room, side="right"))


def plan_batches(keys: BinaryColumn | None, values: BinaryColumn, max_section_bytes: int) -> list[tuple[int, int]]:
    """How fresh batches take the records: ``(records, section bytes)`` per batch, in order.

    Each batch is filled greedily, as one :meth:`~oncelog.records.builder.RecordsBuilder.append_run` per batch
    would: offset deltas from 0, timestamp delta 0, as many records as fit in ``max_section_bytes``, and at least
    one. A record's size depends on its offset delta only through the delta's varint (1 byte below 64, 2 below
    8,192, ...), so the sizes of each delta width are summed once and every batch is found by bisection.
    """
    count = len(values)
    widths = [(0, 1 << 6), (1 << 6, 1 << 13), (1 << 13, 1 << 20), (1 << 20, 1 << 27), (1 << 27, 1 << 31)]
    most = min(count, max_section_bytes // 7 + 1)  # records one batch can hold: 7 bytes is the smallest record
    classes = [(low, high) for low, high in widths if low < most]
    *_, bodies = _body_parts(keys, values, np.zeros(count, dtype=np.int64), b"\x00")
    fixed = bodies - 1  # without the one-byte delta of 0
    prefix_sums = []
    for width in range(1, len(classes) + 1):
        sized = fixed + width
        sums = np.zeros(count + 1, dtype=np.int64)
        np.cumsum(_varint_sizes(_zigzag(sized)) + sized, out=sums[1:])
        prefix_sums.append(sums.tolist())

    def section_size(start: int, taken: int) -> int:
        total = 0
        for (low, high), sums in zip(classes, prefix_sums, strict=True):
            if taken <= low:
                break
            total += sums[start + min(taken, high)] - sums[start + low]
        return total

    plan: list[tuple[int, int]] = []
    start = 0
    while start < count:
        low, high = 1, count - start  # the batch takes at least one record
        while low < high:
            middle = (low + high + 1) // 2
            if section_size(start, middle) <= max_section_bytes:
                low = middle
            else:
                high = middle - 1
        plan.append((low, section_size(start, low)))
        start += low
    return plan


def encode_run(keys: BinaryColumn | None, values: BinaryColumn, first_delta: Any, timestamp_delta: bytes) -> Any:
    """The records section of ``values`` (and ``keys``), the first at offset delta ``first_delta`` (or each at its
    own, given an integer array).

    Every record gets the same encoded timestamp delta (``encode_varlong(timestamp - base_timestamp)``) and no
    headers, as :meth:`~oncelog.records.builder.RecordsBuilder.append_run` writes them.

    Returns:
        A buffer (``pyarrow.Buffer``, supports the buffer protocol) of the encoded records, back to back.
    """
    count = len(values)
    deltas, delta_sizes, key_varints, key_sizes, value_varints, bodies = _body_parts(
        keys, values, first_delta, timestamp_delta
    )
    body_varints = _zigzag(bodies)
    fixed = b"\x00" + timestamp_delta  # attributes and timestamp delta
    # the head of every record: its length, attributes, timestamp delta, offset delta, key length (and, keyless,
    # the value length: the null key is its length alone)
    head = _Varints(count)
    head.add(body_varints, _varint_sizes(body_varints))
    head.add_constant(fixed)
    head.add(deltas, delta_sizes)
    head.add(key_varints, key_sizes)
    value_sizes = _varint_sizes(value_varints)
    if keys is None:
        head.add(value_varints, value_sizes)
        parts = [head.column(), values.array]
    else:
        value_head = _Varints(count)
        value_head.add(value_varints, value_sizes)
        parts = [head.column(), keys.array, value_head.column(), values.array]
    large = any(pa.types.is_large_binary(part.type) for part in parts)
    kind = pa.large_binary() if large else pa.binary()
    if large:
        parts = [part.cast(kind) for part in parts]
    no_headers, separator = pa.scalar(b"\x00", type=kind), pa.scalar(b"", type=kind)
    joined = pc.binary_join_element_wise(*parts, no_headers, separator, null_handling="replace", null_replacement="")
    offsets = np.frombuffer(joined.buffers()[1], dtype=np.int64 if pa.types.is_large_binary(joined.type) else np.int32)[
        joined.offset : joined.offset + count + 1
    ]
    return joined.buffers()[2][int(offsets[0]) : int(offsets[-1])]


class _Varints:
    """A binary column of ``count`` short entries, each the concatenation of one varint (or constant) per piece.

    Pieces are added in order; :meth:`column` lays them out. Each byte position of a varint is written with one
    scatter over the rows whose varint is that long, so a run of one-byte varints costs a single pass.
    """

    def __init__(self, count: int) -> None:
        self._count = count
        self._pieces: list[tuple[Any, Any] | bytes] = []
        self._widths = np.zeros(count, dtype=np.int64)

    def add(self, unsigned: Any, sizes: Any) -> None:
        self._pieces.append((unsigned, sizes))
        self._widths += sizes

    def add_constant(self, data: bytes) -> None:
        self._pieces.append(data)
        self._widths += len(data)

    def column(self) -> Any:
        count = self._count
        offsets = np.zeros(count + 1, dtype=np.int64)
        np.cumsum(self._widths, out=offsets[1:])
        out = np.empty(int(offsets[-1]), dtype=np.uint8)
        at = offsets[:-1].copy()  # where the next piece of each row starts
        for piece in self._pieces:
            if isinstance(piece, bytes):
                for index, byte in enumerate(piece):
                    out[at + index] = byte
                at += len(piece)
                continue
            unsigned, sizes = piece
            longest = int(sizes.max()) if count else 0
            for position in range(longest):
                rows = slice(None) if position == 0 else np.nonzero(sizes > position)[0]
                group = (unsigned[rows] >> (7 * position)) & 0x7F
                group |= (sizes[rows] > position + 1).astype(np.int64) << 7
                out[at[rows] + position] = group
            at += sizes
        return pa.Array.from_buffers(
            pa.binary(), count, [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(out)]
        )


# -------------------------------------------------------------------------------------------- decoding


@dataclass(frozen=True, slots=True)
class DecodedColumns:
    """The records of one batch, column by column.

    Attributes:
        offsets: each record's offset (int64 numpy array).
        timestamps: each record's timestamp (int64 numpy array; the batch's max timestamp under LogAppendTime).
        keys: each record's key (``pyarrow`` ``binary``; null for a null key).
        values: each record's value, likewise.
        headers: each record's headers (``list<struct<key: string, value: binary>>``), or None when no record
            has any.
        timestamp_types: each record's timestamp type (int64 numpy array of ``TimestampType`` values: 0
            CreateTime, 1 LogAppendTime) on the columns a ``CompletedFetch`` hands out; None where not known.
    """

    offsets: Any
    timestamps: Any
    keys: Any
    values: Any
    headers: Any = None
    timestamp_types: Any = None

    def __len__(self) -> int:
        return len(self.offsets)

    def slice(self, start: int, stop: int | None = None) -> DecodedColumns:
        stop = len(self) if stop is None else min(stop, len(self))
        start = min(start, stop)
        return DecodedColumns(
            self.offsets[start:stop],
            self.timestamps[start:stop],
            self.keys.slice(start, stop - start),
            self.values.slice(start, stop - start),
            None if self.headers is None else self.headers.slice(start, stop - start),
            None if self.timestamp_types is None else self.timestamp_types[start:stop],
        )

    def headers_column(self) -> Any:
        """:attr:`headers`, with an empty list for every record when no record has any."""
        if self.headers is not None:
            return self.headers
        return pa.ListArray.from_arrays(pa.array(np.zeros(len(self) + 1, dtype=np.int32)), _NO_HEADERS)

    @classmethod
    def from_fields(
        cls, fields: list[tuple[int, int, Any, Any, tuple[tuple[str, bytes | None], ...]]]
    ) -> DecodedColumns:
        """Columns of ``(offset, timestamp, key, value, headers)`` records decoded in Python."""
        headers = None
        if any(row[4] for row in fields):
            headers = pa.array(
                [[{"key": name, "value": data} for name, data in row[4]] for row in fields], HEADERS_TYPE
            )
        return cls(
            np.array([row[0] for row in fields], dtype=np.int64),
            np.array([row[1] for row in fields], dtype=np.int64),
            pa.array([None if row[2] is None else bytes(row[2]) for row in fields], pa.binary()),
            pa.array([None if row[3] is None else bytes(row[3]) for row in fields], pa.binary()),
            headers,
        )

    def to_fields(self) -> list[tuple[int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]]:
        """The records as ``(offset, timestamp, key, value, headers)`` tuples."""
        headers = (
            [tuple((h["key"], h["value"]) for h in row) for row in self.headers.to_pylist()]
            if self.headers is not None
            else [()] * len(self)
        )
        return list(
            zip(
                self.offsets.tolist(),
                self.timestamps.tolist(),
                self.keys.to_pylist(),
                self.values.to_pylist(),
                headers,
                strict=True,
            )
        )


HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
"""The Arrow type of a record's headers: a list of ``{key, value}`` in their order."""
_NO_HEADERS = pa.array([], HEADERS_TYPE.value_type)


def decode_columns(header: BatchHeader, section: bytes) -> DecodedColumns | None:
    """The records of a batch (its header and decompressed records section) as columns; see
    :func:`decode_batches`."""
    return decode_batches([(header, section)])


def decode_batches(batches: Sequence[tuple[BatchHeader, bytes]]) -> DecodedColumns | None:
    """The records of consecutive batches (each header with its decompressed records section) as one set of
    columns, in order.

    Decoding a fetch's batches together costs the numpy calls once rather than per batch, which matters for the
    small batches most producers send (16 KiB by default).

    Returns None when a record carries headers or anything is out of place (a length that runs past its record,
    bytes after the declared records, a varint too long): the row decoder then decodes each batch, or raises the
    precise error.
    """
    if any(header.record_count < 0 for header, _ in batches):
        return None
    data_bytes = batches[0][1] if len(batches) == 1 else b"".join(section for _, section in batches)
    size = len(data_bytes)
    count = sum(header.record_count for header, _ in batches)
    if count == 0:
        return None if size else _empty()
    ends: list[int] = []  # where each record ends; its body begins after its length varint
    append = ends.append
    pos = 0
    try:
        for header, section in batches:
            section_end = pos + len(section)
            for _ in range(header.record_count):
                byte = data_bytes[pos]
                if byte < 0x80:
                    length, pos = (byte >> 1) ^ -(byte & 1), pos + 1
                elif data_bytes[pos + 1] < 0x80:  # 64 to 8191 bytes
                    unsigned = (byte & 0x7F) | (data_bytes[pos + 1] << 7)
                    length, pos = (unsigned >> 1) ^ -(unsigned & 1), pos + 2
                else:
                    length, pos = decode_varint(data_bytes, pos)
                if length < 0:
                    return None
                pos += length
                append(pos)
            if pos != section_end:  # records running past their batch, or bytes after the declared ones
                return None
    except (IndexError, ValueError):
        return None
    data = np.frombuffer(data_bytes, dtype=np.uint8)
    try:
        offset_deltas, timestamp_deltas, keys, values = _fields(data, np.array(ends, dtype=np.int64))
    except _Malformed:
        return None
    counts = [header.record_count for header, _ in batches]
    offsets = np.repeat(np.array([header.base_offset for header, _ in batches], dtype=np.int64), counts)
    offsets += offset_deltas
    append_time = [header.timestamp_type is TimestampType.LOG_APPEND_TIME for header, _ in batches]
    base_timestamps = np.repeat(np.array([header.base_timestamp for header, _ in batches], dtype=np.int64), counts)
    timestamps = base_timestamps + timestamp_deltas
    if any(append_time):
        max_timestamps = np.repeat(np.array([header.max_timestamp for header, _ in batches], dtype=np.int64), counts)
        timestamps = np.where(np.repeat(np.array(append_time), counts), max_timestamps, timestamps)
    buffer = pa.py_buffer(data_bytes)
    return DecodedColumns(offsets, timestamps, _binary_views(data, buffer, *keys), _binary_views(data, buffer, *values))


class _Malformed(Exception):
    """A record the numpy decoder does not vouch for; the row decoder takes the batch."""


def _fields(data: Any, record_ends: Any) -> tuple[Any, Any, tuple[Any, Any], tuple[Any, Any]]:
    """Offset deltas, timestamp deltas, and (starts, lengths) of keys and of values of the records ending at
    ``record_ends`` in ``data``; raises :class:`_Malformed` for a record with headers or out of place."""
    record_starts = np.empty(len(record_ends), dtype=np.int64)
    record_starts[0] = 0
    record_starts[1:] = record_ends[:-1]
    lengths, bodies = _varints_at(data, record_starts, 5)
    at = bodies + 1  # the attributes byte (unused in magic 2)
    timestamp_deltas, at = _varints_at(data, at, 10)
    offset_deltas, at = _varints_at(data, at, 5)
    key_lengths, key_starts = _varints_at(data, at, 5)
    at = key_starts + np.maximum(key_lengths, 0)
    if (bodies + lengths != record_ends).any() or (at > record_ends).any():
        raise _Malformed
    value_lengths, value_starts = _varints_at(data, at, 5)
    at = value_starts + np.maximum(value_lengths, 0)
    # a record without headers ends with a header count of 0, one byte, where its length says it ends
    if (at + 1 != record_ends).any() or data[np.minimum(at, len(data) - 1)].any():
        raise _Malformed
    if (key_lengths < -1).any() or (value_lengths < -1).any():
        raise _Malformed
    return offset_deltas, timestamp_deltas, (key_starts, key_lengths), (value_starts, value_lengths)


def concat_columns(parts: Sequence[DecodedColumns]) -> DecodedColumns:
    """The records of ``parts`` as one set of columns, in order."""
    if len(parts) == 1:
        return parts[0]
    if not parts:
        return _empty()
    with_headers = any(part.headers is not None for part in parts)
    return DecodedColumns(
        np.concatenate([part.offsets for part in parts]),
        np.concatenate([part.timestamps for part in parts]),
        pa.concat_arrays([part.keys for part in parts]),
        pa.concat_arrays([part.values for part in parts]),
        pa.concat_arrays([part.headers_column() for part in parts]) if with_headers else None,
    )


def _empty() -> DecodedColumns:
    nothing = np.zeros(0, dtype=np.int64)
    return DecodedColumns(nothing, nothing, pa.array([], pa.binary()), pa.array([], pa.binary()))


def _varints_at(data: Any, positions: Any, longest: int) -> tuple[Any, Any]:
    """The zigzag varints starting at ``positions`` and the positions after them; :class:`_Malformed` if one is
    longer than ``longest`` bytes."""
    unsigned = np.zeros(len(positions), dtype=np.uint64)
    sizes = np.zeros(len(positions), dtype=np.int64)
    open_ = np.ones(len(positions), dtype=bool)
    for index in range(longest):
        byte = data[np.minimum(positions + index, len(data) - 1)].astype(np.uint64)
        unsigned |= np.where(open_, (byte & np.uint64(0x7F)) << np.uint64(7 * index), np.uint64(0))
        sizes += open_
        open_ &= byte >= 0x80
        if not open_.any():
            signed = (unsigned >> np.uint64(1)).astype(np.int64) ^ -(unsigned & np.uint64(1)).astype(np.int64)
            return signed, positions + sizes
    raise _Malformed


def _binary_views(data: Any, buffer: Any, starts: Any, lengths: Any) -> Any:
    """A ``binary`` column of the ``lengths`` bytes at ``starts`` of ``buffer`` (-1: null), through Arrow's
    ``binary_view`` layout: 16 bytes per entry, the bytes themselves when they fit in 12, else their first four and
    where they are."""
    count = len(starts)
    valid = lengths >= 0
    if not valid.any():
        return pa.nulls(count, pa.binary())
    sizes = np.where(valid, lengths, 0)
    views = np.zeros((count, 16), dtype=np.uint8)
    words = views.view(np.int32)
    words[:, 0] = sizes
    inline = sizes <= 12
    last = len(data) - 1
    if inline.any():
        rows = np.flatnonzero(inline)
        spans = np.minimum(starts[rows, None] + np.arange(12), last)
        views[rows, 4:] = np.where(np.arange(12) < sizes[rows, None], data[spans], 0)
    if not inline.all():
        rows = np.flatnonzero(~inline)
        views[rows, 4:8] = data[starts[rows, None] + np.arange(4)]
        words[rows, 2] = 0  # the index of the one data buffer
        words[rows, 3] = starts[rows]
    bitmap = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    array = pa.Array.from_buffers(pa.binary_view(), count, [bitmap, pa.py_buffer(views), buffer])
    return array.cast(pa.binary())


RECORDS_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.int64()),
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("headers", HEADERS_TYPE),
    ]
)
"""The columns of ``Consumer.poll_arrow()``."""


def records_table(chunks: list[tuple[str, int, DecodedColumns]]) -> Any:
    """One ``pyarrow.Table`` of :data:`RECORDS_SCHEMA` from ``(topic, partition, columns)`` chunks, in order.

    Keys, values and headers stay the chunks' arrays (chunked columns): they are not copied."""
    if not chunks:
        return RECORDS_SCHEMA.empty_table()
    counts = np.array([len(columns) for _, _, columns in chunks], dtype=np.int64)
    names = sorted({topic for topic, _, _ in chunks})
    which = np.repeat(np.array([names.index(topic) for topic, _, _ in chunks], dtype=np.int32), counts)
    arrays = [
        pa.array(names, pa.string()).take(pa.array(which)),
        pa.array(np.repeat(np.array([partition for _, partition, _ in chunks], dtype=np.int32), counts)),
        pa.array(np.concatenate([columns.offsets for _, _, columns in chunks])),
        pa.array(np.concatenate([columns.timestamps for _, _, columns in chunks])),
        pa.chunked_array([columns.keys for _, _, columns in chunks], pa.binary()),
        pa.chunked_array([columns.values for _, _, columns in chunks], pa.binary()),
        pa.chunked_array([columns.headers_column() for _, _, columns in chunks], HEADERS_TYPE),
    ]
    return pa.Table.from_arrays(arrays, schema=RECORDS_SCHEMA)
