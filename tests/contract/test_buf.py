"""buf guards the contract: proto/ passes ``buf lint`` (STANDARD) and ``buf breaking`` (FILE) against its base,
and a deliberately breaking change, made in a copy of proto/, fails ``buf breaking``.

buf is built from the Go module proxy (scripts/check_proto_contract.py pins it), so this needs go: it skips
without it on a workstation and fails where ONCELOG_REQUIRE_GO=1 (CI). The descriptor-based checks of
test_proto_conventions.py stay; these add buf's own rule set and the compatibility check.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(1800)


@pytest.fixture(scope="module")
def contract():
    if shutil.which("go") is None:
        if os.environ.get("ONCELOG_REQUIRE_GO") == "1":
            pytest.fail("go is not on PATH, and ONCELOG_REQUIRE_GO=1 says it is required here")
        pytest.skip("go is not on PATH (set ONCELOG_REQUIRE_GO=1 to make this a failure)")
    spec = importlib.util.spec_from_file_location("check_proto_contract", ROOT / "scripts" / "check_proto_contract.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["check_proto_contract"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def buf(contract) -> str:
    return contract.install_buf()


def test_buf_lint_passes(contract, buf: str) -> None:
    done = contract.lint(buf)
    assert done.returncode == 0, done.stdout + done.stderr


def test_buf_breaking_passes_against_the_base_revision(contract) -> None:
    assert contract.main([]) == 0


@pytest.fixture
def proto_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "proto"
    shutil.copytree(ROOT / "proto", copy)
    return copy


def test_an_unchanged_copy_is_compatible(contract, buf: str, proto_copy: Path) -> None:
    done = contract.breaking(buf, proto_copy, ROOT / "proto")
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_deleted_field_breaks_the_contract(contract, buf: str, proto_copy: Path) -> None:
    errors = proto_copy / "oncelog" / "api" / "common" / "v1" / "errors.proto"
    text = errors.read_text()
    assert "  bool retriable = 3;\n" in text
    errors.write_text(text.replace("  bool retriable = 3;\n", ""))
    done = contract.breaking(buf, proto_copy, ROOT / "proto")
    assert done.returncode != 0, "deleting ErrorInfo.retriable went unnoticed"
    assert "retriable" in done.stdout + done.stderr and "ErrorInfo" in done.stdout + done.stderr


def test_a_renumbered_enum_value_breaks_the_contract(contract, buf: str, proto_copy: Path) -> None:
    marker = proto_copy / "oncelog" / "api" / "storage" / "v1" / "partition_storage_service.proto"
    text = marker.read_text()
    assert "ISOLATION_LEVEL_READ_COMMITTED = 2;" in text
    marker.write_text(text.replace("ISOLATION_LEVEL_READ_COMMITTED = 2;", "ISOLATION_LEVEL_READ_COMMITTED = 7;"))
    done = contract.breaking(buf, proto_copy, ROOT / "proto")
    assert done.returncode != 0, "renumbering ISOLATION_LEVEL_READ_COMMITTED went unnoticed"


def test_a_lint_violation_is_reported(contract, buf: str, proto_copy: Path) -> None:
    pid = proto_copy / "oncelog" / "api" / "pid" / "v1" / "pid_allocator_service.proto"
    pid.write_text(pid.read_text() + "\nenum badEnum {\n  FIRST = 0;\n}\n")
    done = contract.lint(buf, proto_copy)
    assert done.returncode != 0 and "badEnum" in done.stdout + done.stderr, done.stdout + done.stderr
