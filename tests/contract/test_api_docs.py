"""docs/api.md is the current rendering of the proto comments (scripts/gen_api_docs.py), and renders all of it."""

from __future__ import annotations

import importlib.util
import re
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "api.md"


@pytest.fixture(scope="module")
def gen():
    spec = importlib.util.spec_from_file_location("gen_api_docs", ROOT / "scripts" / "gen_api_docs.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_api_docs"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def descriptors(gen):
    return gen.compile_protos()


def test_committed_api_reference_is_current(gen) -> None:
    assert gen.main(["--check"]) == 0, "docs/api.md is stale: run `python scripts/gen_api_docs.py`"


def test_check_fails_on_a_stale_reference(gen, tmp_path: Path) -> None:
    stale = tmp_path / "api.md"
    stale.write_text(DOCS.read_text().replace("| `EndTxn` |", "| `FinishTxn` |"))
    assert gen.main(["--check", "--output", str(stale)]) == 1
    assert gen.main(["--check", "--output", str(tmp_path / "absent.md")]) == 1


def test_a_changed_proto_comment_changes_the_reference(gen, tmp_path: Path) -> None:
    protos = tmp_path / "proto"
    shutil.copytree(ROOT / "proto", protos)
    service = protos / "oncelog" / "api" / "pid" / "v1" / "pid_allocator_service.proto"
    text = service.read_text()
    assert "// PidAllocatorService" in text
    service.write_text(text.replace("// PidAllocatorService", "// PidAllocatorService (edited comment)", 1))
    assert "(edited comment)" in gen.render(gen.compile_protos(protos))
    assert "(edited comment)" not in DOCS.read_text()


def test_rendering_is_deterministic(gen, descriptors) -> None:
    assert gen.render(descriptors) == gen.render(gen.compile_protos())


def test_every_service_rpc_message_field_and_enum_value_is_documented(gen, descriptors) -> None:
    text = gen.render(descriptors)
    missing = []

    def messages(prefix, message_types):
        for message in message_types:
            if message.options.map_entry:
                continue
            name = f"{prefix}.{message.name}"
            if f'<a name="{name}"></a>' not in text:
                missing.append(name)
            missing.extend(f"{name}.{f.name}" for f in message.field if f"| `{f.name}` | {f.number} |" not in text)
            messages(name, message.nested_type)
            enums(name, message.enum_type)

    def enums(prefix, enum_types):
        for enum in enum_types:
            name = f"{prefix}.{enum.name}"
            if f'<a name="{name}"></a>' not in text:
                missing.append(name)
            missing.extend(f"{name}.{v.name}" for v in enum.value if f"| `{v.name}` | {v.number} |" not in text)

    for fd in descriptors.file:
        for service in fd.service:
            if f'<a name="{fd.package}.{service.name}"></a>' not in text:
                missing.append(f"{fd.package}.{service.name}")
            missing.extend(f"{service.name}.{m.name}" for m in service.method if f"| `{m.name}` |" not in text)
        messages(fd.package, fd.message_type)
        enums(fd.package, fd.enum_type)
    assert not missing, f"not in the reference: {missing}"


def test_links_point_at_anchors_that_exist(gen, descriptors) -> None:
    text = gen.render(descriptors)
    anchors = set(re.findall(r'<a name="([^"]+)"></a>', text))
    targets = set(re.findall(r"\]\(#([^)]+)\)", text))
    assert targets and targets <= anchors, sorted(targets - anchors)


def test_field_comments_reach_their_rows(gen, descriptors) -> None:
    lines = gen.render(descriptors).splitlines()
    checked = 0
    for fd in descriptors.file:
        comments = gen.Comments(fd)
        for i, message in enumerate(fd.message_type):
            for j, f in enumerate(message.field):
                comment = comments((4, i, 2, j)).replace("|", "\\|")
                prefix, suffix = f"| `{f.name}` | {f.number} |", f"| {comment} |"
                assert comment and any(line.startswith(prefix) and line.endswith(suffix) for line in lines), (
                    f"{message.name}.{f.name}: no row carries its comment {comment!r}"
                )
                checked += 1
    assert checked > 50
