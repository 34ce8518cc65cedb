"""Buf-style rules checked from the descriptors (works without buf): naming, versioning, comments."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2

from oncelog.errors import REASONS, Reason

ROOT = Path(__file__).resolve().parents[2]
PROTO = ROOT / "proto"


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> list[descriptor_pb2.FileDescriptorProto]:
    out = tmp_path_factory.mktemp("desc") / "all.pb"
    protos = sorted(str(p.relative_to(PROTO)) for p in PROTO.rglob("*.proto"))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{PROTO}",
            "--include_source_info",
            f"--descriptor_set_out={out}",
            *protos,
        ],
        check=True,
        cwd=PROTO,
    )
    return list(descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file)


def _comments(fd: descriptor_pb2.FileDescriptorProto) -> dict[tuple[int, ...], str]:
    return {tuple(loc.path): loc.leading_comments.strip() for loc in fd.source_code_info.location}


def test_packages_are_versioned_and_match_directories(files) -> None:
    for fd in files:
        assert re.fullmatch(r"oncelog\.api\.[a-z]+\.v[0-9]+", fd.package), fd.name
        assert Path(fd.name).parent.as_posix() == fd.package.replace(".", "/"), fd.name


def test_only_common_is_imported_across_domains(files) -> None:
    for fd in files:
        for dep in fd.dependency:
            dep_package = ".".join(Path(dep).parent.parts)
            assert dep_package in (fd.package, "oncelog.api.common.v1"), f"{fd.name} imports {dep}"


def test_one_service_per_service_file(files) -> None:
    for fd in files:
        is_service_file = fd.name.endswith("_service.proto")
        assert len(fd.service) == (1 if is_service_file else 0), fd.name
        for svc in fd.service:
            assert svc.name.endswith("Service")
            stem = Path(fd.name).stem
            assert stem == re.sub(r"(?<!^)(?=[A-Z])", "_", svc.name).lower(), (fd.name, svc.name)


def test_rpcs_use_their_own_request_and_response(files) -> None:
    for fd in files:
        for svc in fd.service:
            for rpc in svc.method:
                assert re.fullmatch(r"[A-Z][A-Za-z0-9]+", rpc.name)
                assert rpc.input_type == f".{fd.package}.{rpc.name}Request", rpc.name
                assert rpc.output_type == f".{fd.package}.{rpc.name}Response", rpc.name


def test_enums_are_prefixed_with_unspecified_zero(files) -> None:
    def walk(enums, messages):
        yield from enums
        for m in messages:
            yield from walk(m.enum_type, m.nested_type)

    for fd in files:
        for enum in walk(fd.enum_type, fd.message_type):
            prefix = re.sub(r"(?<!^)(?=[A-Z])", "_", enum.name).upper() + "_"
            assert enum.value[0].number == 0 and enum.value[0].name == prefix + "UNSPECIFIED", enum.name
            for value in enum.value:
                assert value.name.startswith(prefix), value.name


def test_every_element_has_a_comment(files) -> None:
    missing = []
    for fd in files:
        comments = _comments(fd)
        for si, svc in enumerate(fd.service):
            if not comments.get((6, si)):
                missing.append(svc.name)
            for mi, rpc in enumerate(svc.method):
                if not comments.get((6, si, 2, mi)):
                    missing.append(f"{svc.name}.{rpc.name}")
        for mi, msg in enumerate(fd.message_type):
            if not comments.get((4, mi)):
                missing.append(msg.name)
            for fi, fld in enumerate(msg.field):
                if not comments.get((4, mi, 2, fi)):
                    missing.append(f"{msg.name}.{fld.name}")
        for ei, enum in enumerate(fd.enum_type):
            if not comments.get((5, ei)):
                missing.append(enum.name)
            for vi, value in enumerate(enum.value):
                if not comments.get((5, ei, 2, vi)):
                    missing.append(value.name)
    assert missing == [], f"add a one-line comment to: {missing}"


def test_error_reasons_match_the_domain_table(files) -> None:
    common = next(fd for fd in files if fd.name.endswith("common/v1/errors.proto"))
    enum = next(e for e in common.enum_type if e.name == "ErrorReason")
    wire = {v.name.removeprefix("ERROR_REASON_") for v in enum.value if v.number != 0}
    assert wire == {r.name for r in Reason}
    assert set(REASONS) == set(Reason)
