"""The committed gencode under libs/oncelog/api is exactly what scripts/gen_protos.py produces."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _gen_module():
    spec = importlib.util.spec_from_file_location("gen_protos", ROOT / "scripts" / "gen_protos.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_protos"] = module
    spec.loader.exec_module(module)
    return module


def test_regenerating_gives_no_diff(tmp_path: Path) -> None:
    gen = _gen_module()
    gen.generate(tmp_path)
    problems = gen.diff_trees(tmp_path / "oncelog" / "api", ROOT / "libs" / "oncelog" / "api")
    assert problems == [], "libs/oncelog/api is stale; run `make gen-protos`:\n" + "\n".join(problems)


def test_diff_detects_a_changed_file(tmp_path: Path) -> None:
    """The check itself can fail: an edited generated file is reported."""
    gen = _gen_module()
    gen.generate(tmp_path / "a")
    gen.generate(tmp_path / "b")
    target = next((tmp_path / "b" / "oncelog" / "api").rglob("*_pb2.py"))
    target.write_text(target.read_text() + "\n# edited\n")
    problems = gen.diff_trees(tmp_path / "a" / "oncelog" / "api", tmp_path / "b" / "oncelog" / "api")
    assert problems == [f"differs: {target.relative_to(tmp_path / 'b' / 'oncelog' / 'api')}"]
