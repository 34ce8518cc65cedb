"""pid-allocator against real processes and real SQLite/PostgreSQL: ids are never handed out twice."""

from __future__ import annotations

import asyncio
import itertools
import threading
from pathlib import Path

import grpc
import pytest

from oncelog.api.pid import v1 as pb
from oncelog.client.pid_allocator import ProducerIdSource, grpc_block_fetcher
from oncelog.errors import InvalidRequest, Reason, StaleRequesterEpoch
from oncelog.rpc import aio_channel, from_rpc_error, sync_channel
from oncelog.testing import LocalCluster

BLOCK = 10


def _allocate(address: str, requester: str, epoch: int, count: int, out: list[tuple[int, int]]) -> None:
    channel = sync_channel(address)
    stub = pb.PidAllocatorServiceStub(channel)
    for _ in range(count):
        r = stub.AllocateProducerIdBlock(
            pb.AllocateProducerIdBlockRequest(requester_id=requester, requester_epoch=epoch, block_size=BLOCK)
        )
        out.append((r.first_id, r.last_id))
    channel.close()


def _assert_disjoint(blocks: list[tuple[int, int]]) -> None:
    ordered = sorted(blocks)
    for (_, last), (first, _) in itertools.pairwise(ordered):
        assert first > last, f"blocks overlap: ...{last} then {first}..."


def test_blocks_are_monotonic_and_disjoint_across_two_racing_processes(database_url: str, tmp_path: Path) -> None:
    with LocalCluster(
        tmp_path, services=("pid-allocator",), replicas={"pid-allocator": 2}, database_url=database_url
    ) as cluster:
        a, b = cluster.addresses("pid-allocator")
        results: dict[str, list[tuple[int, int]]] = {"a": [], "b": []}
        threads = [
            threading.Thread(target=_allocate, args=(a, "req-a", 1, 1000, results["a"])),
            threading.Thread(target=_allocate, args=(b, "req-b", 1, 1000, results["b"])),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    for blocks in results.values():
        assert len(blocks) == 1000
        assert all(last - first + 1 == BLOCK for first, last in blocks)
        assert blocks == sorted(blocks), "one requester's blocks must only go up"
    _assert_disjoint(results["a"] + results["b"])


def test_no_id_is_reused_after_kill_9_mid_run(database_url: str, tmp_path: Path) -> None:
    with LocalCluster(tmp_path, services=("pid-allocator",), database_url=database_url) as cluster:
        before: list[tuple[int, int]] = []
        stop = threading.Event()
        errors: list[BaseException] = []

        def hammer() -> None:
            channel = sync_channel(cluster.addresses("pid-allocator")[0])
            stub = pb.PidAllocatorServiceStub(channel)
            while not stop.is_set():
                try:
                    r = stub.AllocateProducerIdBlock(
                        pb.AllocateProducerIdBlockRequest(requester_id="r", requester_epoch=1, block_size=BLOCK),
                        timeout=5,
                    )
                    before.append((r.first_id, r.last_id))
                except grpc.RpcError as exc:
                    if exc.code() != grpc.StatusCode.UNAVAILABLE:
                        errors.append(exc)
                    return

        worker = threading.Thread(target=hammer)
        worker.start()
        while len(before) < 50:
            assert worker.is_alive() and not errors, errors
            worker.join(0.01)
        cluster.kill("pid-allocator-0")  # SIGKILL with allocations in flight
        stop.set()
        worker.join()
        assert not errors, errors
        cluster.restart("pid-allocator-0")
        after: list[tuple[int, int]] = []
        _allocate(cluster.addresses("pid-allocator")[0], "r", 1, 50, after)
    _assert_disjoint(before + after)
    assert min(after)[0] > max(before)[1], "a restarted allocator must continue above every id handed out"


def test_stale_requester_epoch_is_rejected(cluster: LocalCluster) -> None:
    stub = pb.PidAllocatorServiceStub(sync_channel(cluster.addresses("pid-allocator")[0]))
    stub.AllocateProducerIdBlock(pb.AllocateProducerIdBlockRequest(requester_id="coord-7", requester_epoch=3))
    with pytest.raises(grpc.RpcError) as info:
        stub.AllocateProducerIdBlock(pb.AllocateProducerIdBlockRequest(requester_id="coord-7", requester_epoch=2))
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    err = from_rpc_error(info.value)
    assert isinstance(err, StaleRequesterEpoch) and err.reason == Reason.STALE_REQUESTER_EPOCH
    assert err.definite and not err.retriable
    # the newer epoch still works, and the server kept serving
    stub.AllocateProducerIdBlock(pb.AllocateProducerIdBlockRequest(requester_id="coord-7", requester_epoch=3))


@pytest.mark.parametrize(
    ("request_kwargs", "fragment"),
    [
        ({"requester_epoch": 1}, "requester_id is required"),
        ({"requester_id": "x", "requester_epoch": 1, "block_size": 2_000_000}, "block_size=2000000"),
        ({"requester_id": "x", "requester_epoch": -1}, "requester_epoch=-1"),
    ],
)
def test_bad_requests_get_invalid_argument_and_a_fix(cluster: LocalCluster, request_kwargs, fragment) -> None:
    stub = pb.PidAllocatorServiceStub(sync_channel(cluster.addresses("pid-allocator")[0]))
    with pytest.raises(grpc.RpcError) as info:
        stub.AllocateProducerIdBlock(pb.AllocateProducerIdBlockRequest(**request_kwargs))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    err = from_rpc_error(info.value)
    assert isinstance(err, InvalidRequest) and fragment in err.message
    ok = stub.AllocateProducerIdBlock(pb.AllocateProducerIdBlockRequest(requester_id="x", requester_epoch=1))
    assert ok.last_id - ok.first_id + 1 == 1000


async def test_producer_id_source_hands_out_unique_ids_from_a_real_allocator(cluster: LocalCluster) -> None:
    channel = aio_channel(cluster.addresses("pid-allocator")[0])
    sources = [ProducerIdSource(grpc_block_fetcher(channel, f"src-{i}", 1, block_size=100)) for i in range(3)]

    async def drain(source: ProducerIdSource) -> list[int]:
        return [await source.next_id() for _ in range(1000)]

    results = await asyncio.gather(*(drain(s) for s in sources))
    ids = [pid for r in results for pid in r]
    assert len(set(ids)) == len(ids) == 3000
    for r in results:
        assert r == sorted(r)
    for s in sources:
        await s.close()
    await channel.close()
