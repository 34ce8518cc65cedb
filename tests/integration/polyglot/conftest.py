"""Fixtures for the Go and Java clients and the Go-built tools (buf, grpcurl) driven against a LocalCluster.

The toolchains are preinstalled where CI runs (Go, Java 17 and Maven); the builds fetch their modules and
artefacts themselves (the Go module cache and ~/.m2 keep them between runs). A missing toolchain skips these
tests on a workstation, and fails them where ``ONCELOG_REQUIRE_GO=1`` / ``ONCELOG_REQUIRE_JAVA=1`` say it must
be there (.ci/run sets both), like ONCELOG_REQUIRE_POSTGRES does for PostgreSQL.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from oncelog.testing.reading import read_partition_values

ROOT = Path(__file__).resolve().parents[3]
GO_CLIENT = ROOT / "clients" / "go"
JAVA_CLIENT = ROOT / "clients" / "java"


def require_tool(name: str, switch: str) -> str:
    """The path of ``name`` on PATH; skip without it, or fail when the environment ``switch`` is 1."""
    found = shutil.which(name)
    if found is None:
        message = f"{name} is not on PATH"
        if os.environ.get(switch) == "1":
            pytest.fail(f"{message}, and {switch}=1 says it is required here")
        pytest.skip(f"{message} (set {switch}=1 to make this a failure)")
    return found


def run(
    *command: str, cwd: Path, timeout: float, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a command to completion and fail the test with its output when it exits non-zero."""
    done = subprocess.run(
        command,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, **(env or {})},
    )
    assert done.returncode == 0, f"{' '.join(command)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done


# one compile at a time unless GOFLAGS says otherwise (.ci/run, alone on its machine, allows two)
GO_PARALLELISM = os.environ.get("GOFLAGS", "-p=1")
GO_ENV = {"GOFLAGS": f"{GO_PARALLELISM} -mod=readonly", "GOTOOLCHAIN": "local"}


@pytest.fixture(scope="session")
def go() -> str:
    """The go command, with clients/go's modules downloaded and every package built once for the session."""
    go = require_tool("go", "ONCELOG_REQUIRE_GO")
    run(go, "build", "./...", cwd=GO_CLIENT, timeout=900, env=GO_ENV)
    run(go, "vet", "./...", cwd=GO_CLIENT, timeout=600, env=GO_ENV)
    return go


@pytest.fixture(scope="session")
def go_tool_bin(go: str) -> Callable[[str], str]:
    """``go install`` a pinned tool module (buf, grpcurl) into a versioned directory once; returns its path."""
    tools = Path(os.environ.get("ONCELOG_GO_TOOLS", Path.home() / ".cache" / "oncelog" / "go-tools"))

    def install(spec: str) -> str:
        package, version = spec.split("@")
        name = package.rsplit("/", 1)[1]
        bin_dir = tools / f"{name}-{version}"
        if not (bin_dir / name).exists():
            run(go, "install", spec, cwd=ROOT, timeout=1500, env={"GOBIN": str(bin_dir), "GOFLAGS": GO_PARALLELISM})
        return str(bin_dir / name)

    return install


@pytest.fixture(scope="session")
def mvn() -> str:
    """The mvn command, with clients/java compiled (sources generated from proto/) once for the session."""
    require_tool("java", "ONCELOG_REQUIRE_JAVA")
    mvn = require_tool("mvn", "ONCELOG_REQUIRE_JAVA")
    run(mvn, "-B", "-q", "-T1", "test-compile", cwd=JAVA_CLIENT, timeout=1200)
    return mvn


@pytest.fixture(scope="session")
def run_command() -> Callable[..., subprocess.CompletedProcess[str]]:
    """:func:`run`, for test modules (conftest is not importable under --import-mode=importlib)."""
    return run


@pytest.fixture(scope="session")
def partition_reader() -> Callable[..., list[tuple[int, str]]]:
    """:func:`oncelog.testing.reading.read_partition_values`, for test modules."""
    return read_partition_values


@pytest.fixture(scope="session")
def go_env() -> dict[str, str]:
    return dict(GO_ENV)
