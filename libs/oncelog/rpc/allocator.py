"""How the C allocator treats the large buffers of a service process (glibc's ``mallopt``).

glibc's malloc serves an allocation of 128 KiB or more with a fresh ``mmap`` of its own, and unmaps it on free;
the threshold rises by itself only up to the largest block freed so far, and memory freed at the top of the heap
goes back to the kernel as soon as 128 KiB or more is free there. A storage node answering a Fetch of 1 MiB
allocates several such buffers (the bytes read from the segment, the protobuf message that carries them, its
serialized copy), and each one then costs a page fault and the zeroing of every 4 KiB page it touches: perf saw
a quarter of a storage node's CPU in ``exc_page_fault`` and ``clear_page`` while a consumer read, and the node used
0.22 CPU s to serve 51 MB where the same node with the buffers kept used 0.08-0.11 (docs/performance.md).

:func:`keep_large_buffers` raises both thresholds, so buffers up to ``mmap_threshold`` come from the heap and up
to ``trim_threshold`` of free heap stays mapped for the next request. The cost is memory a process keeps after a
burst: at most ``trim_threshold`` more than it holds. Services call it at start (:mod:`oncelog.rpc.runner`); an
operator's own ``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_`` or ``GLIBC_TUNABLES`` wins, and an allocator
other than glibc's is left alone.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys

log = logging.getLogger("oncelog.rpc.allocator")

__all__ = ["DEFAULT_MMAP_THRESHOLD", "DEFAULT_TRIM_THRESHOLD", "keep_large_buffers"]

DEFAULT_MMAP_THRESHOLD = 32 * 1024 * 1024
"""Blocks below this come from the heap (glibc's ceiling for the threshold on 64-bit systems)."""
DEFAULT_TRIM_THRESHOLD = 64 * 1024 * 1024
"""Free heap kept mapped before it is returned to the kernel."""

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_OPERATOR_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")


def keep_large_buffers(
    mmap_threshold: int = DEFAULT_MMAP_THRESHOLD, trim_threshold: int = DEFAULT_TRIM_THRESHOLD
) -> bool:
    """Have glibc's malloc keep large buffers in the heap and reuse them; True when it now does.

    False, changing nothing, when the process does not run on glibc or the operator set the allocator through
    its environment variables.
    """
    if not sys.platform.startswith("linux"):
        return False
    chosen = [name for name in _OPERATOR_SETTINGS if name in os.environ]
    if chosen:
        log.info("allocator thresholds left to the environment (%s)", ", ".join(chosen))
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt of these)
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, mmap_threshold)) and bool(mallopt(_M_TRIM_THRESHOLD, trim_threshold))
