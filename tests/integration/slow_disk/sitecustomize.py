"""A slow disk for a real oncelog process, loaded at interpreter start when its folder is on ``PYTHONPATH``.

With ``ONCELOG_TEST_SLOW_DISK=<dir>`` in the process's environment, every ``os.fsync`` waits while ``<dir>/hold``
exists, after creating ``<dir>/held`` (the proof that a write is waiting for the disk). Writes themselves go on,
so the process has written data that is not durable yet, exactly like a disk whose flushes are slow. Without the
variable nothing changes.
"""

from __future__ import annotations

import os
import time

_control = os.environ.get("ONCELOG_TEST_SLOW_DISK")

if _control:
    _hold = os.path.join(_control, "hold")
    _held = os.path.join(_control, "held")
    _real_fsync = os.fsync

    def _slow_fsync(fd: int) -> None:
        if os.path.exists(_hold):
            with open(_held, "w"):
                pass
            while os.path.exists(_hold):
                time.sleep(0.005)
        _real_fsync(fd)

    os.fsync = _slow_fsync
