"""The shared RecordBatch v2 vectors (testdata/record-batches) are what the Python encoder makes, and decode back.

The same files are checked by clients/node (test/vectors.test.js), clients/go (recordbatch/vectors_test.go)
and clients/java (RecordBatchVectorsTest), so all four encoders agree byte for byte.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from oncelog.errors import CorruptMessage
from oncelog.records import ControlType, decode_records, read_control_record, validate_batch

ROOT = Path(__file__).resolve().parents[3]
VECTORS = ROOT / "testdata" / "record-batches"
MANIFEST = json.loads((VECTORS / "vectors.json").read_text(encoding="utf-8"))["vectors"]


def _gen_module():
    spec = importlib.util.spec_from_file_location(
        "gen_record_batch_vectors", ROOT / "scripts" / "gen_record_batch_vectors.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_record_batch_vectors"] = module
    spec.loader.exec_module(module)
    return module


def test_the_vectors_are_current() -> None:
    assert _gen_module().main(["--check"]) == 0, "run `python scripts/gen_record_batch_vectors.py`"


def test_every_kind_is_covered() -> None:
    kinds = {
        (v["kind"], v.get("batch", {}).get("compression"), v.get("batch", {}).get("transactional")) for v in MANIFEST
    }
    assert ("data", "none", False) in kinds and ("data", "none", True) in kinds and ("data", "gzip", False) in kinds
    assert {v["control"]["type"] for v in MANIFEST if v["kind"] == "control"} == {"COMMIT", "ABORT"}


@pytest.mark.parametrize("vector", MANIFEST, ids=lambda v: v["name"])
def test_each_vector_decodes_to_its_input(vector: dict[str, Any]) -> None:
    data = (VECTORS / f"{vector['name']}.bin").read_bytes()
    header = validate_batch(data)
    if vector["kind"] == "control":
        c = vector["control"]
        assert read_control_record(data) == (ControlType[c["type"]], c["coordinator_epoch"])
        assert (header.producer_id, header.base_offset) == (c["producer_id"], c["base_offset"])
        return
    gen = _gen_module()
    want = gen._records(vector["records"])
    got = decode_records(data)
    assert [(r.key, r.value, r.headers, r.timestamp) for r in got] == [
        (r.key, r.value, r.headers, r.timestamp) for r in want
    ]
    b = vector["batch"]
    assert (header.producer_id, header.base_sequence, header.base_offset, header.is_transactional) == (
        b["producer_id"],
        b["base_sequence"],
        b["base_offset"],
        b["transactional"],
    )


def test_a_changed_vector_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check can fail: one flipped byte in a vector file is noticed (and breaks its CRC)."""
    gen = _gen_module()
    for path in VECTORS.iterdir():
        (tmp_path / path.name).write_bytes(path.read_bytes())
    damaged = bytearray((tmp_path / "plain.bin").read_bytes())
    damaged[-1] ^= 1
    (tmp_path / "plain.bin").write_bytes(bytes(damaged))
    monkeypatch.setattr(gen, "VECTOR_DIR", tmp_path)
    monkeypatch.setattr(gen, "MANIFEST", tmp_path / "vectors.json")
    assert gen.main(["--check"]) == 1
    with pytest.raises(CorruptMessage):
        validate_batch(bytes(damaged))
