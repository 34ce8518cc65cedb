"""Zigzag variable-length integers as Kafka frames records (``ByteUtils.writeVarint``/``writeVarlong``).

A *varint* carries a signed int32 in at most 5 bytes, a *varlong* a signed int64 in at most 10;
both are zigzag-encoded (so -1 takes one byte) and then written 7 bits at a time, least
significant group first, with the high bit set on every byte but the last. Decoders reject
encodings longer than those limits or wider than the type, as Kafka's ``readVarint`` does, so a
corrupt length can never turn into a multi-gigabyte slice.
"""

from __future__ import annotations

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1

_VARINT_MAX_BYTES = 5
_VARLONG_MAX_BYTES = 10

# Most values on the record path (deltas, lengths of small keys, header counts) fit in one byte.
_ONE_BYTE = tuple(bytes((unsigned,)) for unsigned in range(0x80))


def _encode_unsigned(unsigned: int) -> bytes:
    if unsigned < 0x80:
        return _ONE_BYTE[unsigned]
    out = bytearray()
    while unsigned >= 0x80:
        out.append((unsigned & 0x7F) | 0x80)
        unsigned >>= 7
    out.append(unsigned)
    return bytes(out)


def encode_varint(value: int) -> bytes:
    """Encode a signed int32 as a zigzag varint; ``ValueError`` if it does not fit in 32 bits."""
    if not INT32_MIN <= value <= INT32_MAX:
        raise ValueError(f"{value} does not fit in a varint (int32)")
    return _encode_unsigned((value << 1) ^ (value >> 31))


def encode_varlong(value: int) -> bytes:
    """Encode a signed int64 as a zigzag varlong; ``ValueError`` if it does not fit in 64 bits."""
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"{value} does not fit in a varlong (int64)")
    return _encode_unsigned((value << 1) ^ (value >> 63))


def size_of_varint(value: int) -> int:
    """Number of bytes :func:`encode_varint` (or :func:`encode_varlong`) writes for ``value``."""
    unsigned = (value << 1) ^ (value >> 63)
    size = 1
    while unsigned >= 0x80:
        unsigned >>= 7
        size += 1
    return size


def _decode(buf: bytes | bytearray | memoryview, pos: int, max_bytes: int, bits: int, kind: str) -> tuple[int, int]:
    unsigned = 0
    shift = 0
    end = min(len(buf), pos + max_bytes)
    for index in range(pos, end):
        byte = buf[index]
        unsigned |= (byte & 0x7F) << shift
        if byte < 0x80:
            if unsigned >> bits:
                raise ValueError(f"{kind} at byte {pos} overflows {bits} bits")
            return (unsigned >> 1) ^ -(unsigned & 1), index + 1
        shift += 7
    if end - pos == max_bytes:
        raise ValueError(f"{kind} at byte {pos} is longer than {max_bytes} bytes")
    raise ValueError(f"{kind} at byte {pos} is cut off by the end of the data")


def decode_varint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Decode the zigzag varint (int32) starting at ``pos``; return ``(value, next_pos)``.

    Raises:
        ValueError: the encoding is cut off, longer than 5 bytes, or wider than 32 bits.
    """
    try:
        # fast paths: one byte covers deltas and small lengths, two bytes lengths below 8 KiB
        byte = buf[pos]
        if byte < 0x80:
            return (byte >> 1) ^ -(byte & 1), pos + 1
        second = buf[pos + 1]
        if second < 0x80:
            unsigned = (byte & 0x7F) | (second << 7)
            return (unsigned >> 1) ^ -(unsigned & 1), pos + 2
    except IndexError:
        pass
    return _decode(buf, pos, _VARINT_MAX_BYTES, 32, "varint")


def decode_varlong(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Decode the zigzag varlong (int64) starting at ``pos``; return ``(value, next_pos)``.

    Raises:
        ValueError: the encoding is cut off, longer than 10 bytes, or wider than 64 bits.
    """
    try:
        byte = buf[pos]
        if byte < 0x80:
            return (byte >> 1) ^ -(byte & 1), pos + 1
    except IndexError:
        pass
    return _decode(buf, pos, _VARLONG_MAX_BYTES, 64, "varlong")
