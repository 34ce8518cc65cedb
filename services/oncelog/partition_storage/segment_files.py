"""File helpers of a partition's directory: segment file names, atomic replacement, fsync and whole writes/reads.

Shared by the segment (:mod:`oncelog.partition_storage.segment`), its indexes and the partition's checkpoint files.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

__all__ = [
    "INDEX_SUFFIX",
    "LOG_SUFFIX",
    "OFFSET_DIGITS",
    "OPEN_APPEND",
    "OPEN_LOG",
    "TIME_INDEX_SUFFIX",
    "TXN_INDEX_SUFFIX",
    "file_name",
    "fsync_directory",
    "fsync_path",
    "parse_file_name",
    "pread",
    "write_all",
    "write_file_atomically",
]

OFFSET_DIGITS = 20
"""Digits of the zero-padded offset in segment and snapshot file names (Kafka's ``LogFileUtils``)."""

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
try:
    _IOV_MAX = os.sysconf("SC_IOV_MAX")
except (AttributeError, OSError, ValueError):
    _IOV_MAX = 1024

OPEN_APPEND = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
OPEN_LOG = os.O_RDWR | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)


def file_name(base_offset: int, suffix: str) -> str:
    """File name of a segment or snapshot file: the offset zero-padded to 20 digits, then ``suffix``."""
    return f"{base_offset:0{OFFSET_DIGITS}d}{suffix}"


def parse_file_name(name: str, suffix: str) -> int | None:
    """Offset encoded in ``name`` if it is ``<20 digits><suffix>``, else ``None``."""
    if not name.endswith(suffix):
        return None
    stem = name[: -len(suffix)]
    if len(stem) != OFFSET_DIGITS or not (stem.isascii() and stem.isdigit()):
        return None
    return int(stem)


def fsync_directory(path: Path) -> None:
    """Make file creations, renames and deletions in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves either the old or the new content.

    Writes ``<name>.tmp``, fsyncs it, renames it over ``path`` and fsyncs the directory.
    """
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        write_all(fd, (data,), len(data))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_directory(path.parent)


def fsync_path(path: Path) -> None:
    # A descriptor of its own: fsync flushes the inode whichever descriptor wrote the pages, and the
    # writer's descriptor may be closed by the owning thread meanwhile.
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, parts: Sequence[bytes | memoryview], total: int) -> None:
    """Write ``parts`` with one ``writev`` in the normal case; finish a short write with plain writes."""
    written = os.writev(fd, parts) if 0 < len(parts) <= _IOV_MAX else 0
    if written == total:
        return
    rest = memoryview(b"".join(parts))[written:]
    while rest:
        rest = rest[os.write(fd, rest) :]


def pread(fd: int, length: int, position: int) -> bytes:
    data = os.pread(fd, length, position)
    if len(data) == length or not data:
        return data
    chunks = [data]
    got = len(data)
    while got < length:
        more = os.pread(fd, length - got, position + got)
        if not more:
            break
        chunks.append(more)
        got += len(more)
    return b"".join(chunks)
