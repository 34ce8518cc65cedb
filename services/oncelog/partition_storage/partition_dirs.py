"""The data directory of a storage node and its partition directories (Kafka's ``meta.properties`` and KIP-516's
``partition.metadata``): binding a data directory to one cluster and node, binding a partition directory to one
topic id, and finding directories whose topic is gone.

File work only, called from worker threads by :class:`~oncelog.partition_storage.partition_manager.PartitionManager`.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from oncelog.errors import InvalidConfig, StorageUnavailable
from oncelog.partition_storage.segment import write_file_atomically

__all__ = [
    "META_PROPERTIES",
    "PARTITION_METADATA",
    "check_meta_properties",
    "write_meta_properties",
    "prepare_directory",
    "stray_directories",
]

log = logging.getLogger(__name__)

META_PROPERTIES = "meta.properties"
PARTITION_METADATA = "partition.metadata"


def _read_properties(path: Path) -> dict[str, str]:
    properties = {}
    for line in path.read_text("utf-8").splitlines():
        name, sep, value = line.partition(":")
        if sep:
            properties[name.strip()] = value.strip()
    return properties


def check_meta_properties(data_dir: Path, cluster_id: str, node_id: str) -> bool:
    """Refuse a data directory bound to another cluster or node; False when it is not bound yet (a first start,
    or a start after the disk was lost): bind it with :func:`write_meta_properties` once the node has left the
    ISRs its lost disk was part of (design/replication.md §6, "Disk loss").

    Raises:
        InvalidConfig: the directory belongs to another cluster or node.
    """
    path = data_dir / META_PROPERTIES
    if not path.exists():
        return False
    found = _read_properties(path)
    if found.get("cluster_id") != cluster_id or found.get("node_id") != node_id:
        raise InvalidConfig(
            f"{data_dir} belongs to cluster {found.get('cluster_id')!r} node {found.get('node_id')!r}, but this "
            f"process is node {node_id!r} of cluster {cluster_id!r}; point it at its own data directory"
        )
    return True


def write_meta_properties(data_dir: Path, cluster_id: str, node_id: str) -> None:
    """Bind ``data_dir`` to one cluster and node."""
    data_dir.mkdir(parents=True, exist_ok=True)
    write_file_atomically(
        data_dir / META_PROPERTIES, f"version: 0\ncluster_id: {cluster_id}\nnode_id: {node_id}\n".encode()
    )


def prepare_directory(directory: Path, topic_id: str) -> None:
    """Create the partition directory for ``topic_id``, wiping one left by an earlier topic of the same name."""
    metadata = directory / PARTITION_METADATA
    if metadata.exists():
        try:
            found = _read_properties(metadata).get("topic_id")
        except (OSError, UnicodeDecodeError):
            found = None
        if found == topic_id:
            return
        log.warning("%s holds topic id %s, not %s: removing the old topic's data", directory, found, topic_id)
        shutil.rmtree(directory)
    elif directory.exists() and any(directory.iterdir()):
        # data written before the directory was bound to a topic id is of unknown origin
        raise StorageUnavailable(f"{directory} exists without {PARTITION_METADATA}; move it away", definite=True)
    directory.mkdir(parents=True, exist_ok=True)
    write_file_atomically(metadata, f"version: 0\ntopic_id: {topic_id}\n".encode())


def stray_directories(data_dir: Path, topic_ids: dict[str, str], busy: set[Path]) -> list[Path]:
    """Partition directories whose topic is gone from the catalog, or was re-created with a new id."""
    strays: list[Path] = []
    if not data_dir.is_dir():
        return strays
    for directory in data_dir.iterdir():
        metadata = directory / PARTITION_METADATA
        if directory in busy or not metadata.is_file():
            continue
        topic, sep, partition = directory.name.rpartition("-")
        if not sep or not partition.isdigit():
            continue
        try:
            found = _read_properties(metadata).get("topic_id")
        except (OSError, UnicodeDecodeError):
            continue
        if topic_ids.get(topic) != found:
            strays.append(directory)
    return strays
