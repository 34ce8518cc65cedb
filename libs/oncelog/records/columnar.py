"""Records of Arrow columns encoded a batch at a time, with no Python per record.

The producer's bulk path (:meth:`oncelog.records.builder.RecordsBuilder.append_run`) still runs a few Python
statements per record, which bounds it at a few hundred thousand small records a second on one core. Here the
key and value columns stay in Arrow: every record's varints (length, offset delta, key length, value length) are
computed for the whole run in numpy, laid out as one small binary column, and Arrow's C++ kernel
``binary_join_element_wise`` interleaves them with the keys and values. The result is byte for byte what
``append_run`` writes (tests/unit/records/test_columnar.py checks it against that path).

A column is a ``pyarrow`` array of ``binary``, ``large_binary``, ``string`` or ``large_string`` (strings are
written as their UTF-8 bytes); a null is a null key or value. pyarrow and numpy are imported with this module:
``pip install oncelog[arrow]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

try:
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
except ImportError as missing:  # pragma: no cover - depends on the environment
    raise ImportError(
        f"the columnar record path needs pyarrow and numpy ({missing}); install them with pip install 'oncelog[arrow]'"
    ) from None

__all__ = ["BinaryColumn", "as_binary_column", "encode_run", "fitting_records"]

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

    def largest(self) -> int:
        return int(self.lengths.max()) if len(self.lengths) else 0

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
    keys: BinaryColumn | None, values: BinaryColumn, first_delta: int, timestamp_delta: bytes
) -> tuple[Any, Any, Any, Any, Any, Any]:
    count = len(values)
    deltas = _zigzag(np.arange(first_delta, first_delta + count, dtype=np.int64))
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


def encode_run(keys: BinaryColumn | None, values: BinaryColumn, first_delta: int, timestamp_delta: bytes) -> Any:
    """The records section of ``values`` (and ``keys``), the first at offset delta ``first_delta``.

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
