"""Batch markers: the last micro-batch each task's transactional id committed, kept as that id's own
transactional offset commit on the marker topic (design/spark-connector.md §4 (a)), and the errors a replay that
does not match its marker raises.

Both atomicity modes keep a Spark partition's marker in the group ``<prefix>-<query id>-<partition id>``, so either
finds what the other committed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from oncelog.client.records import TopicPartition
from oncelog.spark.channels import LogClient
from oncelog.spark.options import SinkOptions

_MARKER_VERSION = 1


class NonDeterministicBatchError(RuntimeError):
    """A replayed micro-batch gave a task other rows than the run that committed it.

    The committed output stays as it is; rewriting it would duplicate or lose records. Make the pipeline
    deterministic per Spark partition, or start over with a new checkpoint and output topic.
    """


class RewoundCheckpointError(RuntimeError):
    """The sink already committed a later micro-batch than the one Spark asks it to write.

    Spark only ever replays its last batch, so this means the query's checkpoint lost batches it had
    completed (entries of ``offsets/`` and ``commits/`` deleted, or an older copy restored). Skipping would
    lose the rows of the re-planned batches, writing them could duplicate the ones already committed.
    """


def check_not_rewound(marker: Marker, batch_id: int, group: str) -> None:
    """Raise :class:`RewoundCheckpointError` when ``marker`` is at a batch after ``batch_id``."""
    if marker.batch_id <= batch_id:
        return
    raise RewoundCheckpointError(
        f"{group}: the sink already committed batch {marker.batch_id}, but Spark is writing batch {batch_id}: "
        f"the query's checkpoint was rewound (its offsets/ and commits/ entries from batch {batch_id} on were "
        "deleted, or an older copy of it restored). Spark re-plans those batches, possibly with other offsets "
        "(maxRecordsPerTrigger), so skipping them could lose rows and writing them could duplicate rows. Nothing "
        "was written. Restore the checkpoint that wrote batch "
        f"{marker.batch_id}, or start over with a new checkpointLocation and a new output topic."
    )


def task_transactional_id(options: SinkOptions, query_id: str, partition_id: int) -> str:
    """``<prefix>-<query id>-<partition id>``: a task's transactional id, and the group of its partition's marker.

    Both modes keep a Spark partition's marker in this group; under ``atomicity=batch`` the driver commits it.
    """
    return f"{options.transactional_id_prefix}-{query_id}-{partition_id}"


def batch_transactional_id(options: SinkOptions, query_id: str) -> str:
    """``<prefix>-<query id>-batch``: the transactional id of a query's driver under ``atomicity=batch``.

    The suffix is not a number, so it never equals a task's id of the same query.
    """
    return f"{options.transactional_id_prefix}-{query_id}-batch"


@dataclass(frozen=True, slots=True)
class Marker:
    """The last batch a transactional id committed, read from its transactional offset commit.

    Attributes:
        batch_id: that batch, or -1 when the id never committed one.
        rows: the batch's row count, as committed (None if the metadata is unreadable).
        digest: the batch's :class:`BatchDigest`, as committed.
    """

    batch_id: int
    rows: int | None = None
    digest: str | None = None

    def matches(self, rows: int, digest: str) -> bool:
        """The replay gave the same records as the run that committed this marker."""
        return (self.rows, self.digest) == (rows, digest)


def marker_metadata(batch_id: int, rows: int, digest: str) -> str:
    """The offset metadata committed with a batch: compact JSON, far below the 4 KiB metadata limit."""
    return json.dumps({"v": _MARKER_VERSION, "batch": batch_id, "rows": rows, "digest": digest}, separators=(",", ":"))


def marker_partition(options: SinkOptions) -> TopicPartition:
    """The partition whose committed offset, in each transactional id's own group, is the batch marker."""
    return TopicPartition(options.marker_topic, 0)


def read_marker(options: SinkOptions, group_id: str) -> Marker:
    """The marker of ``group_id``, read with ``require_stable`` (a pending commit is waited for, not read).

    Call it only after ``init_transactions()`` of the same id, so that no zombie's commit can land after it.
    """
    client = LogClient(options.bootstrap, request_timeout_s=options.request_timeout_s)
    offset, metadata = client.committed_offset(group_id, marker_partition(options))
    try:
        parsed = json.loads(metadata) if metadata else {}
    except ValueError:
        parsed = {}
    if not isinstance(parsed, dict):
        parsed = {}
    return Marker(offset, parsed.get("rows"), parsed.get("digest"))


__all__ = [
    "Marker",
    "NonDeterministicBatchError",
    "RewoundCheckpointError",
    "batch_transactional_id",
    "check_not_rewound",
    "marker_metadata",
    "marker_partition",
    "read_marker",
    "task_transactional_id",
]
