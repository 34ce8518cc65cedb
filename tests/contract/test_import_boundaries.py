"""The import boundaries of pyproject.toml's ``[tool.importlinter]`` hold, and would catch a breach.

``make lint`` runs ``lint-imports`` too; CI runs only ``make test``, so the contracts are enforced here as well:
services never import one another, the client and the shared libraries never import a service, domain modules
never import grpc or the generated API, and no package or module takes part in an import cycle.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ("pid_allocator", "txn_coordinator", "partition_storage", "group_offsets", "kafka_gateway")

ADAPTERS = frozenset(
    {
        "__init__", "__main__", "app", "servicer", "marker_transport", "replica_transport", "check_back_client",
        # the kafka-gateway's servicers (Kafka requests <-> typed-client calls) and its catalog lookups
        "data_servicer", "txn_servicer", "group_servicer", "admin_servicer", "routing",
    }
)  # fmt: skip
"""Service modules allowed to use gRPC: package markers, composition roots, servicers and transports."""

pytestmark = pytest.mark.timeout(300)


def _config() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["tool"]["importlinter"]


def _contract(contract_id: str) -> dict:
    (contract,) = [c for c in _config()["contracts"] if c["id"] == contract_id]
    return contract


# Runs lint-imports with ``root``'s libs/ and services/ as the only homes of the ``oncelog`` namespace: the editable
# install puts this checkout's on sys.path too, and a namespace spanning two copies would mix their modules.
_RUNNER = """
import os, sys
from importlinter.cli import lint_imports_command
root = sys.argv.pop(1)
others = [p for p in sys.path if not os.path.isdir(os.path.join(p or ".", "oncelog"))]
sys.path[:] = [os.path.join(root, "libs"), os.path.join(root, "services"), *others]
sys.exit(lint_imports_command())
"""


def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` on the tree under ``root`` (its libs/ and services/, its pyproject.toml)."""
    return subprocess.run(
        [sys.executable, "-c", _RUNNER, str(root), str(root / "pyproject.toml"), "--no-cache"],
        cwd=root,
        env={**os.environ, "COLUMNS": "500"},
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_the_import_contracts_are_kept() -> None:
    result = _lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(_config()['contracts'])} kept, 0 broken" in result.stdout


def test_every_service_module_is_either_domain_or_adapter() -> None:
    """A new module must be classified: listed in the domain contract, or named an adapter above."""
    domain = set(_contract("domain-without-grpc")["source_modules"])
    unclassified, both = [], []
    for service in SERVICES:
        for path in sorted((ROOT / "services" / "oncelog" / service).glob("*.py")):
            module = f"oncelog.{service}.{path.stem}"
            if path.stem in ADAPTERS and module in domain:
                both.append(module)
            elif path.stem not in ADAPTERS and module not in domain:
                unclassified.append(module)
    assert not unclassified, f"add to the domain-without-grpc contract in pyproject.toml or to ADAPTERS: {unclassified}"
    assert not both, f"adapters listed as domain modules: {both}"


def test_a_breach_of_each_kind_is_reported(tmp_path: Path) -> None:
    """In a copy of the tree: a domain module importing grpc, one service importing another, a cycle."""
    for part in ("libs", "services"):
        shutil.copytree(ROOT / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    coordinator = tmp_path / "services" / "oncelog" / "txn_coordinator" / "coordinator.py"
    coordinator.write_text(coordinator.read_text() + "\nimport grpc  # noqa\n")
    allocator = tmp_path / "services" / "oncelog" / "pid_allocator" / "allocator.py"
    allocator.write_text(allocator.read_text() + "\nimport oncelog.group_offsets.offset_store  # noqa\n")
    settings = tmp_path / "libs" / "oncelog" / "config" / "settings.py"
    settings.write_text(settings.read_text() + "\nimport oncelog.rpc.tls  # noqa\n")

    result = _lint_imports(tmp_path)

    assert result.returncode != 0
    assert "oncelog.txn_coordinator.coordinator is not allowed to import grpc" in result.stdout
    assert "oncelog.pid_allocator is not allowed to import oncelog.group_offsets" in result.stdout
    assert "- .config -> .rpc" in result.stdout
