"""tests/unit/conftest.py fails a unit test that starts a process, and only such a test.

A copy of the conftest runs, in a pytest of its own, over a throwaway tests/unit holding one test per case: a child
Python, a fork, a module fixture that starts a process, an allowed database server, and a test that starts nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(120)

CASES = """
import multiprocessing
import os
import subprocess
import sys

import pytest


def test_starts_nothing():
    assert sum(range(4)) == 6


def test_starts_a_child_python():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


def test_forks():
    child = multiprocessing.get_context("fork").Process(target=int)
    child.start()
    child.join()


@pytest.fixture(scope="module")
def service():
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"]) as proc:
        yield proc
        proc.kill()


def test_uses_a_module_fixture_that_starts_a_process(service):
    assert service.poll() is None


def test_starts_the_allowed_database_server():
    subprocess.run([os.environ["FAKE_POSTGRES"]], check=True)
"""


def test_the_unit_tier_fails_exactly_the_tests_that_start_a_process(tmp_path: Path) -> None:
    unit = tmp_path / "tests" / "unit"
    unit.mkdir(parents=True)
    shutil.copy(ROOT / "tests" / "unit" / "conftest.py", unit / "conftest.py")
    (unit / "test_cases.py").write_text(CASES)
    fake_postgres = tmp_path / "bin" / "postgres"
    fake_postgres.parent.mkdir()
    fake_postgres.symlink_to(shutil.which("true") or "/bin/true")

    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "--rootdir", str(tmp_path), str(unit)],
        cwd=tmp_path,
        env={**os.environ, "FAKE_POSTGRES": str(fake_postgres)},
        capture_output=True,
        text=True,
        timeout=100,
    )

    out = result.stdout
    assert result.returncode == 1, out + result.stderr
    assert "PASSED tests/unit/test_cases.py::test_starts_nothing" in out, out
    assert "PASSED tests/unit/test_cases.py::test_starts_the_allowed_database_server" in out, out
    assert "FAILED tests/unit/test_cases.py::test_starts_a_child_python" in out, out
    assert "FAILED tests/unit/test_cases.py::test_forks" in out, out
    assert "ERROR tests/unit/test_cases.py::test_uses_a_module_fixture_that_starts_a_process" in out, out
    assert "test_starts_a_child_python started a process during call, and tests/unit starts none" in out
    assert "os.fork" in out
