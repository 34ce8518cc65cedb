"""The grpcurl recipes of docs/api.md work as written against a LocalCluster (server reflection, no .proto files).

The recipes are read from the rendered docs/api.md (scripts/gen_api_docs.py copies them from
docs/grpcurl-recipes.md), so a recipe that regeneration dropped or a call that no longer parses fails here.
grpcurl is built from the Go module proxy at a pinned version.
"""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from oncelog.api.cluster import v1 as cluster_pb
from oncelog.api.common import v1 as common_pb
from oncelog.api.storage import v1 as storage_pb
from oncelog.records import Record, build_batch
from oncelog.rpc import sync_channel
from oncelog.testing import LocalCluster

pytestmark = pytest.mark.timeout(1500)

ROOT = Path(__file__).resolve().parents[3]
GRPCURL = "github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.4"


def recipes() -> dict[str, str]:
    """``name`` -> shell text of each ```sh block that starts with ``# recipe: name`` in docs/api.md."""
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    return {
        m.group(1): m.group(0)
        for m in re.finditer(r"^# recipe: ([\w-]+)\n.*?(?=^```)", text, flags=re.MULTILINE | re.DOTALL)
    }


@pytest.fixture(scope="module")
def grpcurl(go_tool_bin: Callable[[str], str]) -> str:
    return go_tool_bin(GRPCURL)


def _run_recipe(name: str, grpcurl: str, env: dict[str, str], topic: str = "orders") -> list[dict]:
    """Run one recipe with bash, grpcurl first on PATH; the JSON documents it printed."""
    script = recipes()[name].replace('"orders"', json.dumps(topic))
    path = f"{Path(grpcurl).parent}:/usr/bin:/bin"
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        env={"PATH": path, "HOME": str(Path.home()), **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"recipe {name} failed:\n{script}\n{done.stdout}\n{done.stderr}"
    decoder, out, pos = json.JSONDecoder(), [], 0
    text = done.stdout.strip()
    while pos < len(text):
        document, end = decoder.raw_decode(text, pos)
        out.append(document)
        pos = end
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return out


def test_every_service_has_a_recipe() -> None:
    text = "\n".join(recipes().values())
    for service in (
        "ClusterService",
        "TransactionCoordinatorService",
        "PartitionStorageService",
        "GroupOffsetsService",
        "PidAllocatorService",
        "grpc.health.v1.Health",
    ):
        assert service in text, f"no grpcurl recipe calls {service}"


def test_describe_cluster_recipe(grpcurl: str, cluster: LocalCluster) -> None:
    [described] = _run_recipe("describe-cluster", grpcurl, {"ONCELOG": cluster.bootstrap})
    roles = {node["role"] for node in described["nodes"]}
    assert {
        "SERVICE_ROLE_PID_ALLOCATOR",
        "SERVICE_ROLE_TXN_COORDINATOR",
        "SERVICE_ROLE_PARTITION_STORAGE",
        "SERVICE_ROLE_GROUP_OFFSETS",
    } <= roles, described
    assert all(node["address"].startswith("127.0.0.1:") for node in described["nodes"])


def test_list_offsets_recipe(grpcurl: str, cluster: LocalCluster) -> None:
    """Three records written to partition 0 put its last stable offset at 3, as the recipe shows."""
    topic = f"grpcurl-{uuid.uuid4().hex[:8]}"
    cluster_stub = cluster_pb.ClusterServiceStub(sync_channel(cluster.bootstrap))
    cluster_stub.CreateTopics(
        cluster_pb.CreateTopicsRequest(topics=[cluster_pb.TopicSpec(name=topic, partitions=1)]), timeout=30
    )
    partition = cluster_stub.Metadata(cluster_pb.MetadataRequest(topics=[topic]), timeout=30).topics[0].partitions[0]
    batch = build_batch([Record(key=None, value=f"v{i}".encode()) for i in range(3)], base_timestamp=1)
    produced = storage_pb.PartitionStorageServiceStub(sync_channel(partition.leader_address)).Produce(
        storage_pb.ProduceRequest(
            acks=storage_pb.ACKS_ALL,
            partitions=[
                storage_pb.PartitionBatches(
                    topic_partition=common_pb.TopicPartition(topic=topic, partition=0),
                    leader_epoch=partition.leader_epoch,
                    records=batch,
                )
            ],
        ),
        timeout=30,
    )
    assert not produced.results[0].HasField("error"), produced

    [listed] = _run_recipe("list-offsets", grpcurl, {"LEADER": partition.leader_address}, topic=topic)
    [result] = listed["results"]
    assert result["topic_partition"] == {"topic": topic}  # grpcurl prints proto names and leaves out partition 0
    assert result["offset"] == "3", listed
