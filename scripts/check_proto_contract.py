#!/usr/bin/env python3
"""Guard the wire contract with buf: ``buf lint`` (proto/buf.yaml: STANDARD) and ``buf breaking`` (FILE rules).

buf is built from the Go module proxy at the version pinned below into a tool directory of its own
(``ONCELOG_GO_TOOLS``, default ``~/.cache/oncelog/go-tools``), so every machine runs the same rules. ``buf
breaking`` compares proto/ with the contract at a base revision, taken out of git with ``git archive`` (which
works in worktrees and shallow clones alike):

* ``--against REF`` when given;
* else the newest release tag ``v*``;
* else the merge base with ``main`` -- or, on main itself, the previous commit, so a commit that breaks the
  contract fails the check run on it.

Usage:
    python scripts/check_proto_contract.py                    # lint + breaking against the base above
    python scripts/check_proto_contract.py --against v0.3.0   # breaking against a chosen revision
    python scripts/check_proto_contract.py --lint-only
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
BUF = "github.com/bufbuild/buf/cmd/buf@v1.75.0"


def install_buf() -> str:
    """``go install`` the pinned buf once into its versioned tool directory; returns the binary's path."""
    version = BUF.split("@")[1]
    tools = Path(os.environ.get("ONCELOG_GO_TOOLS", Path.home() / ".cache" / "oncelog" / "go-tools"))
    bin_dir = tools / f"buf-{version}"
    binary = bin_dir / "buf"
    if binary.exists():
        return str(binary)
    go = shutil.which("go")
    if go is None:
        raise SystemExit("the go toolchain is needed to build buf (https://go.dev/doc/install)")
    env = {**os.environ, "GOBIN": str(bin_dir), "GOFLAGS": os.environ.get("GOFLAGS", "-p=1")}
    done = subprocess.run([go, "install", BUF], env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"go install {BUF} failed:\n{done.stderr}")
    return str(binary)


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    return done.stdout.strip() if done.returncode == 0 else ""


def base_revision() -> str:
    """The revision to compare with when none is given (see the module docstring)."""
    tag = _git("describe", "--tags", "--abbrev=0", "--match", "v*", "HEAD")
    if tag:
        return tag
    head = _git("rev-parse", "HEAD")
    merge_base = _git("merge-base", "HEAD", "main") or _git("merge-base", "HEAD", "origin/main")
    if merge_base and merge_base != head:
        return merge_base
    return _git("rev-parse", "--verify", "--quiet", "HEAD^") or head


def export_proto(revision: str, into: Path) -> Path:
    """proto/ as it was at ``revision``, written under ``into``; returns that proto directory."""
    archive = subprocess.run(["git", "archive", revision, "proto"], cwd=ROOT, capture_output=True, check=False)
    if archive.returncode != 0:
        raise SystemExit(f"git archive {revision} proto failed: {archive.stderr.decode(errors='replace')}")
    with tarfile.open(fileobj=BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into / "proto"


def lint(buf: str, proto: Path = PROTO_ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([buf, "lint", str(proto)], capture_output=True, text=True, check=False)


def breaking(buf: str, proto: Path, against: Path) -> subprocess.CompletedProcess[str]:
    """``buf breaking`` of ``proto`` against the module at ``against`` (both directories holding buf.yaml)."""
    return subprocess.run(
        [buf, "breaking", str(proto), "--against", str(against)], capture_output=True, text=True, check=False
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", help="git revision to compare with (default: see above)")
    parser.add_argument("--lint-only", action="store_true", help="run buf lint only")
    args = parser.parse_args(argv)
    buf = install_buf()
    failed = False
    linted = lint(buf)
    print(f"buf lint proto: {'ok' if linted.returncode == 0 else 'FAILED'}")
    if linted.returncode != 0:
        print(linted.stdout + linted.stderr)
        failed = True
    if not args.lint_only:
        revision = args.against or base_revision()
        with tempfile.TemporaryDirectory(prefix="oncelog-buf-") as tmp:
            against = export_proto(revision, Path(tmp))
            if not (against / "buf.yaml").exists():
                shutil.copy(PROTO_ROOT / "buf.yaml", against / "buf.yaml")
            result = breaking(buf, PROTO_ROOT, against)
        print(f"buf breaking proto against {revision[:12]}: {'ok' if result.returncode == 0 else 'FAILED'}")
        if result.returncode != 0:
            print(result.stdout + result.stderr)
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
