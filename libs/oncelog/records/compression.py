"""The record codecs of attribute bits 0-2 (Kafka's ``CompressionType``): gzip, lz4 and zstd as Java writes them.

The records section of a batch is compressed as a whole; the header stays plain. Output is deterministic (gzip
with mtime 0), and every codec reads what Kafka's Java clients write. Snappy is refused with an error that says
which codecs to use instead.
"""

from __future__ import annotations

import enum
import gzip
import zlib

import lz4.frame
import zstandard

from oncelog.errors import InvalidRecord

SNAPPY_UNSUPPORTED = "snappy compression is not supported by oncelog; use gzip, lz4 or zstd (or no compression)"


class Compression(enum.IntEnum):
    """Codec in attribute bits 0-2 (Kafka's ``CompressionType`` ids)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


def compress(compression: Compression, data: bytes | bytearray) -> bytes:
    """The records section ``data`` compressed with ``compression`` (NONE returns it as bytes).

    Raises:
        InvalidRecord: ``compression`` is SNAPPY.
    """
    if compression is Compression.NONE:
        return bytes(data)
    if compression is Compression.GZIP:
        # level 6 is Java's GZIPOutputStream default; mtime 0 keeps the output deterministic
        return gzip.compress(data, compresslevel=6, mtime=0)
    if compression is Compression.LZ4:
        # Kafka's KafkaLZ4BlockInputStream reads only independent blocks with no block checksum,
        # and its own writer uses 64 KiB blocks without content size or content checksum
        return lz4.frame.compress(
            data,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
    if compression is Compression.ZSTD:
        return zstandard.ZstdCompressor(level=3).compress(data)
    raise InvalidRecord(SNAPPY_UNSUPPORTED)


def _zstd_decompress(data: memoryview) -> bytes:
    # Java writers stream frames without a content size, so one-shot decompress() is unusable;
    # decompressobj also reports a truncated frame (eof stays False) instead of a short result.
    out = []
    decompressor = zstandard.ZstdDecompressor()
    remaining: bytes | memoryview = data
    while remaining:
        frame = decompressor.decompressobj()
        out.append(frame.decompress(remaining))
        if not frame.eof:
            raise InvalidRecord("cannot decompress zstd records: the frame is truncated")
        remaining = frame.unused_data
    return b"".join(out)


def decompress(compression: Compression, data: memoryview) -> bytes:
    """The records section of a batch compressed with ``compression`` (not NONE), decompressed.

    Raises:
        InvalidRecord: the data does not decompress, or ``compression`` is SNAPPY.
    """
    try:
        if compression is Compression.GZIP:
            return gzip.decompress(data)
        if compression is Compression.LZ4:
            return lz4.frame.decompress(data)
        if compression is Compression.ZSTD:
            return _zstd_decompress(data)
    except (OSError, EOFError, zlib.error, RuntimeError, zstandard.ZstdError) as err:
        raise InvalidRecord(f"cannot decompress {compression.name.lower()} records: {err}") from None
    raise InvalidRecord(SNAPPY_UNSUPPORTED)


__all__ = ["SNAPPY_UNSUPPORTED", "Compression", "compress", "decompress"]
