#!/usr/bin/env python3
"""Write the shared RecordBatch v2 test vectors into testdata/record-batches/ with the Python encoder.

Each vector is an input (batch fields and records, in vectors.json) and the bytes the encoder makes of it
(``<name>.bin``). Every client encoder -- libs/oncelog/records, clients/node, clients/go, clients/java -- must
build the same bytes from the same input, and every decoder must read the bytes back as the same records.
The ``gzip`` vector is the exception for building: deflate output is not specified byte for byte (Go's
compress/flate, zlib and Java's GZIPOutputStream all differ, and gzip headers differ in their OS byte), so for
it ``byte_exact`` is false and the clients check only that they decode it and that their own gzip batch
decodes to the same records.

Usage:
    python scripts/gen_record_batch_vectors.py           # rewrite the vectors
    python scripts/gen_record_batch_vectors.py --check   # exit 1 if the Python encoder no longer makes them
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from oncelog.records import Compression, ControlType, Record, build_batch, build_control_batch

ROOT = Path(__file__).resolve().parent.parent
VECTOR_DIR = ROOT / "testdata" / "record-batches"
MANIFEST = VECTOR_DIR / "vectors.json"

T0 = 1_700_000_000_123  # a fixed base timestamp (ms)


def _hex(data: bytes | None) -> str | None:
    return None if data is None else data.hex()


def _records(spec: list[dict[str, Any]]) -> list[Record]:
    return [
        Record(
            key=None if r["key"] is None else bytes.fromhex(r["key"]),
            value=None if r["value"] is None else bytes.fromhex(r["value"]),
            headers=tuple((k, None if v is None else bytes.fromhex(v)) for k, v in r["headers"]),
            timestamp=r["timestamp"],
        )
        for r in spec
    ]


def _record(key: bytes | None, value: bytes | None, timestamp: int, headers=()) -> dict[str, Any]:
    return {
        "key": _hex(key),
        "value": _hex(value),
        "timestamp": timestamp,
        "headers": [[k, _hex(v)] for k, v in headers],
    }


def vectors() -> list[dict[str, Any]]:
    """The inputs; a data vector's fields are build_batch's keyword arguments."""
    plain = {"producer_id": -1, "producer_epoch": -1, "base_sequence": -1, "transactional": False}
    return [
        {
            "name": "plain",
            "description": "no producer id; null key, empty value, headers (one null), timestamps out of order",
            "kind": "data",
            "byte_exact": True,
            "batch": {
                **plain,
                "base_offset": 0,
                "partition_leader_epoch": -1,
                "compression": "none",
                "base_timestamp": T0,
            },
            "records": [
                _record(b"k0", b"first value", T0),
                _record(None, b"", T0 + 5, [("trace", b"\x00\x01"), ("empty", None)]),
                _record(b"k2", None, T0 - 3),
                _record("ключ".encode(), "värde ✓".encode(), T0 + 1_000_000),
            ],
        },
        {
            "name": "idempotent",
            "description": "an idempotent producer's batch: producer id, epoch and base sequence, no transaction",
            "kind": "data",
            "byte_exact": True,
            "batch": {
                "producer_id": 4242,
                "producer_epoch": 3,
                "base_sequence": 17,
                "transactional": False,
                "base_offset": 0,
                "partition_leader_epoch": -1,
                "compression": "none",
                "base_timestamp": T0,
            },
            "records": [_record(b"p0", f"idempotent-{i}".encode(), T0) for i in range(3)],
        },
        {
            "name": "transactional",
            "description": "a transactional batch as stored: offset and leader epoch stamped by the leader",
            "kind": "data",
            "byte_exact": True,
            "batch": {
                "producer_id": 1_234_567_890_123,
                "producer_epoch": 7,
                "base_sequence": 2_147_483_600,
                "transactional": True,
                "base_offset": 1_000_000_007,
                "partition_leader_epoch": 5,
                "compression": "none",
                "base_timestamp": T0,
            },
            "records": [_record(b"k", bytes(range(256)) * 2, T0 + i) for i in range(2)],
        },
        {
            "name": "control-commit",
            "description": "a COMMIT transaction marker (control batch) of coordinator epoch 9",
            "kind": "control",
            "byte_exact": True,
            "control": {
                "type": "COMMIT",
                "producer_id": 1_234_567_890_123,
                "producer_epoch": 7,
                "coordinator_epoch": 9,
                "base_offset": 1_000_000_009,
                "partition_leader_epoch": 5,
                "timestamp": T0 + 10,
            },
        },
        {
            "name": "control-abort",
            "description": "an ABORT transaction marker (control batch) of coordinator epoch 0",
            "kind": "control",
            "byte_exact": True,
            "control": {
                "type": "ABORT",
                "producer_id": 4242,
                "producer_epoch": 0,
                "coordinator_epoch": 0,
                "base_offset": 0,
                "partition_leader_epoch": -1,
                "timestamp": T0,
            },
        },
        {
            "name": "gzip",
            "description": "gzip-compressed records: decode exactly; an encoder's own gzip batch must decode alike",
            "kind": "data",
            "byte_exact": False,
            "batch": {
                **plain,
                "base_offset": 0,
                "partition_leader_epoch": -1,
                "compression": "gzip",
                "base_timestamp": T0,
            },
            "records": [_record(f"key-{i}".encode(), b"compressible " * 20, T0 + i) for i in range(5)]
            + [_record(None, None, T0)],
        },
    ]


def encode(vector: dict[str, Any]) -> bytes:
    if vector["kind"] == "control":
        c = vector["control"]
        return build_control_batch(
            ControlType[c["type"]],
            producer_id=c["producer_id"],
            producer_epoch=c["producer_epoch"],
            coordinator_epoch=c["coordinator_epoch"],
            base_offset=c["base_offset"],
            timestamp=c["timestamp"],
            partition_leader_epoch=c["partition_leader_epoch"],
        )
    b = vector["batch"]
    return build_batch(
        _records(vector["records"]),
        base_offset=b["base_offset"],
        producer_id=b["producer_id"],
        producer_epoch=b["producer_epoch"],
        base_sequence=b["base_sequence"],
        transactional=b["transactional"],
        compression=Compression[b["compression"].upper()],
        partition_leader_epoch=b["partition_leader_epoch"],
        base_timestamp=b["base_timestamp"],
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="fail if the Python encoder no longer makes the vectors")
    args = parser.parse_args(argv)
    manifest = json.dumps({"vectors": vectors()}, indent=2, ensure_ascii=False) + "\n"
    problems = []
    if args.check:
        if not MANIFEST.exists() or MANIFEST.read_text(encoding="utf-8") != manifest:
            problems.append(f"{MANIFEST.name} differs")
        for vector in vectors():
            path = VECTOR_DIR / f"{vector['name']}.bin"
            if not vector["byte_exact"]:
                continue  # its bytes are the reference to decode, not something every encoder remakes
            if not path.exists() or path.read_bytes() != encode(vector):
                problems.append(f"{path.name} differs from the Python encoder's bytes")
        if problems:
            print("record-batch vectors are stale:", *problems, sep="\n  ")
            return 1
        print("record-batch vectors are up to date")
        return 0
    VECTOR_DIR.mkdir(parents=True, exist_ok=True)
    MANIFEST.write_text(manifest, encoding="utf-8")
    for vector in vectors():
        (VECTOR_DIR / f"{vector['name']}.bin").write_bytes(encode(vector))
    print(f"wrote {len(vectors())} vectors into {VECTOR_DIR.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
