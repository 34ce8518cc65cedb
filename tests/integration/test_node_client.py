"""The Node.js client in clients/node against a real cluster: a read_committed reader sees exactly what it committed.

The example loads proto/ with @grpc/proto-loader and speaks the wire protocol itself (RecordBatch v2 and CRC32C
in JavaScript): an idempotent produce, a committed and an aborted transaction, and a read_committed fetch. This
module reads the partitions back with the Python codec and the client library's fetch filter, so both languages
must agree byte for byte on what was committed (design/architecture.md §1.2, §1.4).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from oncelog.api.cluster import v1 as cluster_pb
from oncelog.rpc import sync_channel
from oncelog.testing import LocalCluster
from oncelog.testing.reading import read_partition_values
from oncelog.vocabulary import IsolationLevel

pytestmark = pytest.mark.timeout(300)

CLIENT_DIR = Path(__file__).resolve().parents[2] / "clients" / "node"
NODE, NPM = shutil.which("node"), shutil.which("npm")


def _run(*command: str, timeout: float) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(command, cwd=CLIENT_DIR, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, f"{' '.join(command)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def node_client() -> Iterator[Path]:
    """clients/node with its dependencies installed by ``npm ci`` (kept in node_modules while the lock holds)."""
    if NODE is None or NPM is None:
        pytest.skip(f"the Node.js client needs node and npm on PATH (node: {NODE}, npm: {NPM})")
    installed = CLIENT_DIR / "node_modules" / ".package-lock.json"  # npm's record of what node_modules holds
    lock = CLIENT_DIR / "package-lock.json"
    if not installed.exists() or installed.stat().st_mtime < lock.stat().st_mtime:
        # scripts are not needed (protobufjs' postinstall only checks its CLI's versions)
        _run(NPM, "ci", "--ignore-scripts", "--no-audit", "--no-fund", timeout=240)
    yield CLIENT_DIR


def test_record_batch_codec_of_the_node_client(node_client: Path) -> None:
    """CRC32C check value, varints and the read_committed filter of clients/node/record-batch.js."""
    done = _run(NODE or "node", "--test", "test/", timeout=60)
    assert "# fail 0" in done.stdout and "# pass 0" not in done.stdout, done.stdout


def test_node_client_commits_exactly_what_a_read_committed_reader_sees(
    node_client: Path, cluster: LocalCluster
) -> None:
    topic = f"node-{uuid.uuid4().hex[:8]}"
    done = _run(
        NODE or "node",
        "example.js",
        "--bootstrap",
        cluster.bootstrap,
        "--topic",
        topic,
        "--transactional-id",
        f"{topic}-txn",
        "--json",
        timeout=120,
    )
    report = json.loads(done.stdout)
    produced = report["produced"]
    assert report["topic"] == topic
    assert len(produced["idempotent"]) == 3 and len(produced["committed"]) == 4 and len(produced["aborted"]) == 4

    metadata = cluster_pb.ClusterServiceStub(sync_channel(cluster.bootstrap)).Metadata(
        cluster_pb.MetadataRequest(topics=[topic])
    )
    committed: dict[int, list[tuple[int, str]]] = {}
    everything: list[str] = []
    for p in metadata.topics[0].partitions:
        args = (p.leader_address, topic, p.partition, p.leader_epoch)
        committed[p.partition] = read_partition_values(*args, IsolationLevel.READ_COMMITTED)
        everything.extend(value for _, value in read_partition_values(*args, IsolationLevel.READ_UNCOMMITTED))

    seen = [value for records in committed.values() for _, value in records]
    assert sorted(seen) == sorted(produced["idempotent"] + produced["committed"]), "exactly the committed records"
    assert not set(seen) & set(produced["aborted"]), "no record of the aborted transaction"
    assert sorted(everything) == sorted(produced["idempotent"] + produced["committed"] + produced["aborted"]), (
        "the aborted records were written, so read_committed really filtered them"
    )
    # the JavaScript read_committed filter keeps the same records at the same offsets as the Python one
    by_node = {(r["partition"], r["offset"], r["value"]) for r in report["kept"]}
    assert by_node == {(p, offset, value) for p, records in committed.items() for offset, value in records}
