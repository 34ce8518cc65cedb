"""The partition log survives kill -9 of the process appending to it: every acknowledged batch is there exactly
once, offsets stay contiguous (moved from tests/unit/partition_storage/test_partition_log.py, which starts no process).
"""

from __future__ import annotations

import collections
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from oncelog.partition_storage.partition_log import (
    PartitionLog,
)
from oncelog.records import (
    decode_records,
)

INTERVAL = 512


class Clock:
    """Injected wall clock, in milliseconds."""

    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def open_log(directory: Path, clock: Clock | None = None, **config: int) -> PartitionLog:
    config.setdefault("index_interval_bytes", INTERVAL)
    return PartitionLog(directory, clock=clock or Clock(), **config)


def assert_contiguous(batches: list[tuple[int, int]], start: int, end: int) -> None:
    expected = start
    for base, last in batches:
        assert base == expected
        assert last >= base
        expected = last + 1
    assert expected == end


CRASHING_APPENDER = """
import asyncio, random, sys
from oncelog.partition_storage.partition_log import FlushCoordinator, PartitionLog
from oncelog.records import Record, build_batch

async def main(directory, seed, first_key):
    rng = random.Random(seed)
    log = PartitionLog(directory, segment_bytes=16 * 1024, index_interval_bytes=512)
    flusher = FlushCoordinator(log.flush)
    next_key = first_key

    async def appender():
        nonlocal next_key
        while True:
            keys = list(range(next_key, next_key + rng.randint(1, 3)))
            next_key += len(keys)
            batches = [
                build_batch([Record(key=b"%d" % k, value=rng.randbytes(rng.randint(0, 1500)), timestamp=k)])
                for k in keys
            ]
            ranges = log.append(batches)
            await flusher.sync()
            sys.stdout.write("".join(f"{k} {base} {last}\\n" for k, (base, last) in zip(keys, ranges)))
            sys.stdout.flush()

    print(f"ready {log.log_end_offset}", flush=True)
    await asyncio.gather(*(appender() for _ in range(4)))

asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
"""


def run_until_killed(script: Path, directory: Path, seed: int, first_key: int, acks_before_kill: int) -> list[str]:
    """Run the appender, SIGKILL it after ``acks_before_kill`` acknowledged batches, return every ack line."""
    proc = subprocess.Popen(
        [sys.executable, str(script), str(directory), str(seed), str(first_key)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        ready = proc.stdout.readline()
        assert ready.startswith("ready"), ready + (proc.stderr.read() if proc.stderr else "")
        lines = []
        while len(lines) < acks_before_kill:
            line = proc.stdout.readline()
            assert line, "appender exited early: " + (proc.stderr.read() if proc.stderr else "")
            lines.append(line)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        lines.extend(proc.stdout.read().splitlines(keepends=True))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    # a line cut by the kill was never fully acknowledged
    return [line for line in lines if line.endswith("\n")]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_acknowledged_batch_survives_kill_9_exactly_once(tmp_path: Path, seed: int) -> None:
    script = tmp_path / "appender.py"
    script.write_text(CRASHING_APPENDER)
    directory = tmp_path / "p"
    rng = random.Random(seed)
    acked: dict[int, tuple[int, int]] = {}
    for round_number in range(2):
        # keys of a new round never collide with unacknowledged survivors of the previous one
        kill_after = rng.randint(30, 300)
        lines = run_until_killed(script, directory, seed * 10 + round_number, round_number * 10**6, kill_after)
        for line in lines:
            key, base, last = map(int, line.split())
            acked[key] = (base, last)
    with open_log(directory) as log:
        stored = list(log.batches_from(0, verify_crc=True))
        assert_contiguous([(h.base_offset, h.last_offset) for h, _ in stored], 0, log.log_end_offset)
        keys_by_base = {h.base_offset: decode_records(data)[0].key for h, data in stored}
        occurrences = collections.Counter(keys_by_base.values())
        for key, (base, _) in acked.items():
            assert keys_by_base.get(base) == b"%d" % key, f"acknowledged key {key} lost or moved"
            assert occurrences[b"%d" % key] == 1
        assert len(log.segment_bases) > 1
