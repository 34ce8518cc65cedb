#!/usr/bin/env python3
"""Generate the Go code of the oncelog wire contract from proto/ into clients/go/gen/.

Like the Python tree (scripts/gen_protos.py), the Go gencode is committed and ``--check`` regenerates it
into a temporary directory and demands an identical tree. protoc is the one inside grpcio-tools (the
pinned dev dependency); the two Go plugins are installed from the Go module proxy at the versions pinned
below into a tool directory of their own (``ONCELOG_GO_TOOLS``, default ``~/.cache/oncelog/go-tools``), so
the output depends only on these pins. The .proto files carry no ``go_package`` option (adding one would
change every language's descriptors); the import paths are given to the plugins as ``M`` mappings instead.

Usage:
    python scripts/gen_go_protos.py           # regenerate clients/go/gen
    python scripts/gen_go_protos.py --check   # exit 1 and list differences if the committed tree is stale
"""

from __future__ import annotations

import argparse
import filecmp
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
GO_MODULE_DIR = ROOT / "clients" / "go"
GO_MODULE = "oncelog/clients/go"
TARGET = GO_MODULE_DIR / "gen"

PROTOC_GEN_GO = "google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12"
PROTOC_GEN_GO_GRPC = "google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2"


def tool_dir() -> Path:
    return Path(os.environ.get("ONCELOG_GO_TOOLS", Path.home() / ".cache" / "oncelog" / "go-tools"))


def install_tool(spec: str) -> Path:
    """``go install`` one pinned tool into its own versioned directory (a no-op once it is there)."""
    name = spec.split("@")[0].rsplit("/", 1)[1]
    version = spec.split("@")[1]
    bin_dir = tool_dir() / f"{name}-{version}"
    binary = bin_dir / name
    if binary.exists():
        return binary
    go = shutil.which("go")
    if go is None:
        raise SystemExit("the go toolchain is needed to build the protoc plugins (https://go.dev/doc/install)")
    env = {**os.environ, "GOBIN": str(bin_dir), "GOFLAGS": os.environ.get("GOFLAGS", "-p=1")}
    done = subprocess.run([go, "install", spec], env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"go install {spec} failed:\n{done.stderr}")
    return binary


def _proto_files() -> list[str]:
    return sorted(str(p.relative_to(PROTO_ROOT)) for p in PROTO_ROOT.rglob("*.proto"))


def _go_import(proto_file: str) -> str:
    """``oncelog/api/cluster/v1/x.proto`` -> ``oncelog/clients/go/gen/oncelog/api/cluster/v1;clusterv1``."""
    directory = Path(proto_file).parent
    package = f"{directory.parts[-2]}{directory.parts[-1]}"
    return f"{GO_MODULE}/gen/{directory.as_posix()};{package}"


def generate(out: Path) -> None:
    """Generate the whole Go tree under ``out`` (which receives ``oncelog/api/...``)."""
    files = _proto_files()
    mappings = [f"M{f}={_go_import(f)}" for f in files]
    out.mkdir(parents=True, exist_ok=True)
    args = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"--plugin=protoc-gen-go={install_tool(PROTOC_GEN_GO)}",
        f"--plugin=protoc-gen-go-grpc={install_tool(PROTOC_GEN_GO_GRPC)}",
        f"--go_out={out}",
        f"--go-grpc_out={out}",
        f"--go_opt=module={GO_MODULE}/gen",
        f"--go-grpc_opt=module={GO_MODULE}/gen",
        *(f"--go_opt={m}" for m in mappings),
        *(f"--go-grpc_opt={m}" for m in mappings),
        *files,
    ]
    done = subprocess.run(args, cwd=PROTO_ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"protoc failed:\n{done.stderr}")


def _tree(root: Path) -> dict[str, Path]:
    return {str(p.relative_to(root)): p for p in root.rglob("*") if p.is_file()}


def diff_trees(expected: Path, actual: Path) -> list[str]:
    want, have = _tree(expected), _tree(actual)
    problems = [f"missing: {name}" for name in sorted(set(want) - set(have))]
    problems += [f"unexpected: {name}" for name in sorted(set(have) - set(want))]
    problems += [
        f"differs: {name}"
        for name in sorted(set(want) & set(have))
        if not filecmp.cmp(want[name], have[name], shallow=False)
    ]
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="fail if clients/go/gen differs from a fresh run")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="oncelog-gen-go-") as tmp:
        fresh = Path(tmp)
        generate(fresh)
        if args.check:
            problems = diff_trees(fresh, TARGET)
            if problems:
                print("clients/go/gen is stale; run `make gen-protos`:", *problems, sep="\n  ")
                return 1
            print("clients/go/gen is up to date")
            return 0
        if TARGET.exists():
            shutil.rmtree(TARGET)
        shutil.copytree(fresh, TARGET)
    print(f"generated {sum(1 for _ in TARGET.rglob('*.go'))} files into {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
