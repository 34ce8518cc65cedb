"""scripts/rewrite_design_citations.py on a small tree: labels change in comments only; --check finds what dangles."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
S = "\u00a7"  # the section sign, kept out of this file's own comments so the tree-wide check ignores them


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location(
        "rewrite_design_citations", ROOT / "scripts" / "rewrite_design_citations.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["rewrite_design_citations"] = module
    spec.loader.exec_module(module)
    return module


ARCHITECTURE = """# Architecture

## 1. Guarantees

### 1.1 Idempotent produce

### 1.7 Definite errors

## 4. Partition storage

```
## 9. not a heading: inside a code fence
```
"""

SEMANTICS = """# Kafka semantics

## 2. Coordinator

### 2.3 InitProducerId

### 2.4 AddPartitionsToTxn

### 2.5 EndTxn

## 4. Storage

### 4.2 Validation
"""

CONVENTIONS = """# Conventions

## 3. Conventions
"""

MODULE = f'''"""A module (DESIGN {S}4, ref {S}2.3-2.5, {S}4.2).

Errors are definite or not (DESIGN {S}1.7); layout rules in CONVENTIONS {S}3.
"""

LABEL = "DESIGN {S}4 in a string that is code"


def f(x):
    """Ref {S}2.4: a function docstring."""
    return x  # trailing comment, ref {S}4.2


# DESIGN {S}1.1 and {S}1.7, ref {S}2.3 / {S}2.5
'''


def write_tree(root: Path, module: str = MODULE) -> Path:
    design = root / "docs" / "design"
    design.mkdir(parents=True)
    (design / "architecture.md").write_text(ARCHITECTURE, encoding="utf-8")
    (design / "kafka-semantics.md").write_text(SEMANTICS, encoding="utf-8")
    (design / "conventions.md").write_text(CONVENTIONS, encoding="utf-8")
    package = root / "libs" / "pkg"
    package.mkdir(parents=True)
    path = package / "module.py"
    path.write_text(module, encoding="utf-8")
    generated = root / "libs" / "oncelog" / "api"
    generated.mkdir(parents=True)
    (generated / "x_pb2.py").write_text(f"# DESIGN {S}99 in generated code is not ours\n", encoding="utf-8")
    return path


def test_rewrite_changes_comments_and_docstrings_only(tool, tmp_path: Path) -> None:
    path = write_tree(tmp_path)

    changed = tool.rewrite(tmp_path)

    assert changed == [path]
    text = path.read_text(encoding="utf-8")
    assert f"(design/architecture.md {S}4, design/kafka-semantics.md {S}2.3-2.5, {S}4.2)." in text
    assert f"(design/architecture.md {S}1.7); layout rules in design/conventions.md {S}3." in text
    assert f'"""design/kafka-semantics.md {S}2.4: a function docstring."""' in text
    assert f"# trailing comment, design/kafka-semantics.md {S}4.2" in text
    assert f"# design/architecture.md {S}1.1 and {S}1.7, design/kafka-semantics.md {S}2.3 / {S}2.5" in text
    assert f'LABEL = "DESIGN {S}4 in a string that is code"' in text, "code strings are left alone"
    assert (tmp_path / "libs" / "oncelog" / "api" / "x_pb2.py").read_text(encoding="utf-8").startswith("# DESIGN")
    compile(text, str(path), "exec")


def test_rewrite_is_idempotent(tool, tmp_path: Path) -> None:
    path = write_tree(tmp_path)
    tool.rewrite(tmp_path)
    once = path.read_text(encoding="utf-8")

    assert tool.rewrite(tmp_path) == []
    assert path.read_text(encoding="utf-8") == once


def test_check_reports_old_labels_then_passes_after_the_rewrite(tool, tmp_path: Path) -> None:
    write_tree(tmp_path)

    before = tool.check(tmp_path)
    assert len(before) == 8, before
    assert all("old label" in line for line in before)
    assert tool.main(["--root", str(tmp_path), "--check"]) == 1

    tool.rewrite(tmp_path)
    assert tool.check(tmp_path) == []
    assert tool.main(["--root", str(tmp_path), "--check"]) == 0


def test_check_reports_dangling_sections_and_documents(tool, tmp_path: Path) -> None:
    module = (
        f"# design/architecture.md {S}1.2, {S}4\n"  # 1.2 has no heading
        f"# design/kafka-semantics.md {S}2.3-2.6\n"  # the range ends on a missing section
        f"# design/replication.md {S}1\n"  # no such document
        f"# design/architecture.md {S}9\n"  # only inside a code fence in the document
        f'"""design/conventions.md {S}3 resolves."""\n'
    )
    write_tree(tmp_path, module)

    found = tool.check(tmp_path)

    assert len(found) == 4, found
    assert "module.py:1:" in found[0] and f"no heading {S}1.2 " in found[0]
    assert "module.py:2:" in found[1] and f"no heading {S}2.6 " in found[1]
    assert "module.py:3:" in found[2] and "replication.md, which does not exist" in found[2]
    assert "module.py:4:" in found[3] and f"no heading {S}9 " in found[3]


def test_long_lines_are_wrapped_within_the_limit(tool) -> None:
    source = (
        "def f():\n"
        + "    x = 1  # "
        + "word " * 15
        + f"(ref {S}2.11, {S}5.2) and more\n"
        + '    """'
        + "Docstring words " * 5
        + f"(DESIGN {S}1.7, {S}4) end of it."
        + '"""\n'
        + "    # * "
        + "bullet " * 13
        + f"(ref {S}4.2)\n"
        + "    return x\n"
    )
    limit = 80

    out = tool.rewrite_source(source, line_length=limit)

    assert all(len(line) <= limit for line in out.splitlines()), out
    compile(out, "<wrapped>", "exec")
    assert "    x = 1  # word" in out and "\n    # word word (design/kafka-semantics.md" in out, "trailing comment"
    assert f"design/kafka-semantics.md {S}2.11, {S}5.2" in out, "a citation is never split"
    assert f"design/architecture.md {S}1.7, {S}4" in out
    assert "\n    #   " in out, "a bullet's continuation is indented under its text"
    assert tool.rewrite_source(out, line_length=limit) == out


SPARK_DESIGN = """# Spark connector

## 3. What Spark does

### 3.1 Where each piece runs

### 3.2 Checkpoint and replay

### 3.4 Task retries

## 4. Exactly-once sink
"""

REPLICATION = """# Partition replication

## 1. Catalog model

## 4. HW and LEO

## 5. Leader epochs and truncation

## 7. ISR shrink and expand

## 10. Transactions over replicas
"""

SEVEN, EIGHT = "\u4e03", "\u516b"  # the replication seed numbers some chapters in Chinese numerals

SPARK_MODULE = f'''"""Planning runs on the driver (reference pyspark-connector {S}3.1): a range is read with
the consumer's filter (ref {S}4.2), so a replay reads the same rows ({S}3.2). Readers pickle (reference
pyspark-connector {S}3.1).
"""


def f():
    return 1  # retries need local[N,F] (reference {S}3.4); sink design (pyspark-connector {S}4 (a))
'''

SPARK_TEST = f'''"""Fencing twins (ref {S}3.4); sequences restart after the bump (ref {S}4.2)."""
'''

OTHER_MODULE = f'''"""Not Spark: a "reference {S}3.1" here is nobody's label (DESIGN {S}1.1).

Errors stay definite ({S}1.7).
"""
'''

REPLICA_MODULE = f'''"""Rules (seed 002 {S}2.6.3.1, {S}2.6.4); truncation (Seed 002 {S}{SEVEN} case 2, KIP-279).

Leader epochs ({S}{EIGHT}); a chapter nobody mapped (seed 002 {S}2.6.9).
"""
'''

ORPHAN_MODULE = f'''"""A section sign with nothing before it to name its document ({S}2)."""
'''


def write_spark_tree(root: Path) -> dict[str, Path]:
    write_tree(root)
    design = root / "docs" / "design"
    (design / "spark-connector.md").write_text(SPARK_DESIGN, encoding="utf-8")
    (design / "replication.md").write_text(REPLICATION, encoding="utf-8")
    files = {
        "libs/oncelog/spark/reader.py": SPARK_MODULE,
        "tests/unit/spark/test_writer.py": SPARK_TEST,
        "libs/pkg/other.py": OTHER_MODULE,
        "services/pkg/replica_state.py": REPLICA_MODULE,
        "libs/pkg/orphan.py": ORPHAN_MODULE,
    }
    paths = {}
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        paths[relative] = path
    return paths


def test_spark_seed_and_bare_citations_are_rewritten(tool, tmp_path: Path) -> None:
    paths = write_spark_tree(tmp_path)

    tool.rewrite(tmp_path)

    spark = paths["libs/oncelog/spark/reader.py"].read_text(encoding="utf-8")
    assert f"(design/spark-connector.md {S}3.1): a range" in spark
    assert f"(design/kafka-semantics.md {S}4.2)" in spark, "ref keeps meaning Kafka's semantics in Spark files"
    assert f"(design/spark-connector.md {S}3.2)" in spark, "a bare continuation in a Spark file"
    assert f"(design/spark-connector.md\n{S}3.1)" in spark, "a label broken over two lines keeps the line count"
    assert f"(design/spark-connector.md {S}3.4)" in spark and f"(design/spark-connector.md {S}4 (a))" in spark
    spark_test = paths["tests/unit/spark/test_writer.py"].read_text(encoding="utf-8")
    assert f"(design/spark-connector.md {S}3.4)" in spark_test, "OVERRIDES: this ref means the connector"
    assert f"(design/kafka-semantics.md {S}4.2)" in spark_test
    other = paths["libs/pkg/other.py"].read_text(encoding="utf-8")
    assert f'a "reference {S}3.1" here' in other, "reference alone is a label in Spark files only"
    assert f"(design/architecture.md {S}1.7)" in other, "a bare continuation takes the nearest citation's document"
    replica = paths["services/pkg/replica_state.py"].read_text(encoding="utf-8")
    assert f"Rules (design/replication.md {S}7, {S}4)" in replica
    assert f"(design/replication.md {S}5 case 2, KIP-279)" in replica
    assert f"Leader epochs (design/replication.md {S}5)" in replica
    assert f"(seed 002 {S}2.6.9)" in replica, "an unmapped seed section is left for a person"
    assert paths["libs/pkg/orphan.py"].read_text(encoding="utf-8") == ORPHAN_MODULE
    for path in paths.values():
        compile(path.read_text(encoding="utf-8"), str(path), "exec")
    assert tool.rewrite(tmp_path) == [], "running it twice changes nothing"


def test_check_reports_spark_seed_and_bare_citations(tool, tmp_path: Path) -> None:
    write_spark_tree(tmp_path)

    before = tool.check(tmp_path)
    by_file = {
        name: [line for line in before if line.startswith(name)]
        for name in (
            "libs/oncelog/spark/reader.py",
            "tests/unit/spark/test_writer.py",
            "libs/pkg/other.py",
            "services/pkg/replica_state.py",
            "libs/pkg/orphan.py",
        )
    }
    assert len(by_file["libs/oncelog/spark/reader.py"]) == 6, before
    assert len(by_file["tests/unit/spark/test_writer.py"]) == 2, before
    assert len(by_file["libs/pkg/other.py"]) == 2, before
    assert len(by_file["services/pkg/replica_state.py"]) == 4, before
    assert len(by_file["libs/pkg/orphan.py"]) == 1 and "names no document" in by_file["libs/pkg/orphan.py"][0]

    tool.rewrite(tmp_path)
    after = tool.check(tmp_path)

    assert len(after) == 2, after
    assert any("replica_state.py:3:" in line and "no section of docs/design/ is mapped" in line for line in after)
    assert any("orphan.py:1:" in line and "names no document" in line for line in after)


def test_check_catches_a_design_section_that_is_missing(tool, tmp_path: Path) -> None:
    write_spark_tree(tmp_path)
    design = tmp_path / "docs" / "design" / "spark-connector.md"
    design.write_text(SPARK_DESIGN.replace("### 3.4 Task retries\n", ""), encoding="utf-8")
    tool.rewrite(tmp_path)

    missing = [line for line in tool.check(tmp_path) if f"no heading {S}3.4 " in line]

    assert len(missing) == 2, missing  # the Spark comment and the overridden ref in the Spark test
