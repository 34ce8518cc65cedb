"""Slow or failing fsync for a storage process of a torture run (the nemesis kind ``fsync``, design/torture.md §3.2).

Loaded at interpreter start when this folder is on ``PYTHONPATH`` (only ``oncelog torture`` puts it there). With
``ONCELOG_TORTURE_FSYNC=<dir>`` in the environment, every ``os.fsync`` of node N first looks at ``<dir>/N/``: a file
``slow`` makes it wait the seconds written in it, a file ``fail`` makes it raise EIO (as a disk that lost the
write). Without the variable nothing changes.
"""

from __future__ import annotations

import errno
import os
import time
from typing import Any

_control = os.environ.get("ONCELOG_TORTURE_FSYNC")
_node = os.environ.get("ONCELOG_PARTITION_STORAGE_NODE_ID", "")

if _control and _node:
    _slow = os.path.join(_control, _node, "slow")
    _fail = os.path.join(_control, _node, "fail")
    _real_fsync = os.fsync

    def _faulty_fsync(fd: Any) -> None:
        if os.path.exists(_fail):
            raise OSError(errno.EIO, "fsync failed (torture fsync fault)")
        try:
            with open(_slow) as seconds:
                time.sleep(float(seconds.read() or 0))
        except (OSError, ValueError):
            pass
        _real_fsync(fd)

    os.fsync = _faulty_fsync
