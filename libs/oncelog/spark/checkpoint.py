"""The sink's names kept next to a streaming query's checkpoint, so that a restart cannot change them silently.

The batch markers of a query live under its ``transactionalIdPrefix`` (their groups) and ``markerTopic`` (their
partition), and its output goes to ``topic``. A restart under other names would not find what the crashed run
committed and would write its last batch again, or write it somewhere else. After the first micro-batch
commits, the driver writes these names into ``oncelog-sink.json`` in the checkpoint directory; every later
start of a streaming writer compares them and refuses a change with an error that names the option.

Only a checkpoint on the driver's file system (a path, or a ``file:`` URI) is checked; on HDFS or an object
store the names are not recorded (the option documentation says to keep them).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import urlparse

from oncelog.spark.options import OptionError, SinkOptions

__all__ = ["NAMES_FILE", "check_sink_names", "local_checkpoint", "record_sink_names"]

NAMES_FILE = "oncelog-sink.json"
"""The file in the checkpoint directory that holds the sink's names."""


def local_checkpoint(location: str | None) -> Path | None:
    """The checkpoint directory when it is on this machine's file system, else None."""
    if not location:
        return None
    parsed = urlparse(location)
    if parsed.scheme == "file":
        return Path(parsed.path)
    if parsed.scheme and len(parsed.scheme) > 1:  # hdfs://, s3a://, ... (a one-letter scheme is a drive)
        return None
    return Path(location)


def _names(options: SinkOptions) -> dict[str, str | None]:
    return {
        "topic": options.topic,
        "markerTopic": options.marker_topic,
        "transactionalIdPrefix": options.transactional_id_prefix,
    }


def check_sink_names(options: SinkOptions) -> None:
    """Refuse names other than those the checkpoint's earlier runs committed batches under.

    Raises:
        OptionError: one problem per changed name, or the names file is unreadable.
    """
    directory = local_checkpoint(options.checkpoint_location)
    if directory is None:
        return
    try:
        recorded = json.loads((directory / NAMES_FILE).read_text())
    except FileNotFoundError:
        return  # no batch committed yet: the names may still change
    except (OSError, ValueError) as exc:
        raise OptionError([f"checkpointLocation: {directory / NAMES_FILE} is unreadable ({exc}); restore it"]) from None
    if not isinstance(recorded, dict):
        raise OptionError([f"checkpointLocation: {directory / NAMES_FILE} does not hold the sink's names; restore it"])
    problems = [
        f"{name}: this checkpoint's earlier runs committed their batches with {name}={recorded[name]!r}, now it is "
        f"{value!r}. The batch markers that make a restart exactly-once are found under the old names, so the "
        f"restart could write a batch twice or elsewhere. Set {name} back, or start over with a new "
        "checkpointLocation"
        for name, value in _names(options).items()
        if name in recorded and recorded[name] != value
    ]
    if problems:
        raise OptionError(problems)


def record_sink_names(options: SinkOptions) -> None:
    """Write the names into the checkpoint directory, once, after a micro-batch committed under them."""
    directory = local_checkpoint(options.checkpoint_location)
    if directory is None or (directory / NAMES_FILE).exists():
        return
    directory.mkdir(parents=True, exist_ok=True)
    partial = directory / f".{NAMES_FILE}.{os.getpid()}.tmp"
    partial.write_text(json.dumps(_names(options), indent=1) + "\n")
    os.replace(partial, directory / NAMES_FILE)  # never a half-written file
