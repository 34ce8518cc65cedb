#!/usr/bin/env python3
"""Keep the section citations in comments and docstrings pointing at docs/design/.

The code cites the design in comments such as ``(design/architecture.md §4, design/kafka-semantics.md §4.4,
§4.6)``. Older comments name the documents by short labels that lived outside the repository; this script
rewrites those labels to the files of docs/design/ and checks that every citation names a section heading that
exists there.

Labels rewritten (only inside comments and docstrings, never in code; running it twice changes nothing):

=================================  ==============================================================
old label                          new label
=================================  ==============================================================
``DESIGN``                         ``design/architecture.md``
``ref`` / ``Ref``                  ``design/kafka-semantics.md``
``CONVENTIONS``                    ``design/conventions.md``
``reference pyspark-connector``,   ``design/spark-connector.md`` (``reference`` alone only in the
``pyspark-connector``,             Spark files, SPARK_FILES)
``reference``
``seed 002`` / ``Seed 002``        ``design/replication.md``, each section number mapped through
                                   SEED_SECTIONS (``seed 002 \u00a72.6.4`` becomes ``\u00a74``)
=================================  ==============================================================

A citation is a label followed by a section sign and a number; the numbers that follow it, separated by
commas, "and", "to", "/" or a dash, belong to the same document (``design/kafka-semantics.md §2.3-2.5,
§5.6``). A range is checked at both ends. A section sign with no label before it is a continuation and
gets the label written out: in the Spark files it means the Spark connector's design, with a Chinese numeral
the replication seed, elsewhere the document of the nearest citation before it in the file. OVERRIDES fixes
the few citations these rules get wrong (a ``ref`` in a Spark test that means the connector's design).
``docs/design/<file>.md`` citations are checked like ``design/<file>.md`` ones and left as they are.

Usage:
    python scripts/rewrite_design_citations.py            # rewrite libs/ services/ tests/ bench/ scripts/
    python scripts/rewrite_design_citations.py --check    # exit 1 listing old labels and dangling citations
    python scripts/rewrite_design_citations.py --root DIR --check path/to/file.py ...
"""

from __future__ import annotations

import argparse
import io
import re
import sys
import tokenize
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCANNED_DIRS = ("libs", "services", "tests", "bench", "scripts")
SKIPPED_PARTS = frozenset({"__pycache__", ".venv", "node_modules"})
GENERATED_DIR = Path("libs", "oncelog", "api")
DESIGN_DIR = Path("docs", "design")
LINE_LENGTH = 120  # ruff line-length in pyproject.toml

SECTION = "\u00a7"
ARCHITECTURE = "design/architecture.md"
SEMANTICS = "design/kafka-semantics.md"
REPLICATION = "design/replication.md"
SPARK = "design/spark-connector.md"
OLD_LABELS = {
    "DESIGN": ARCHITECTURE,
    "ref": SEMANTICS,
    "Ref": SEMANTICS,
    "CONVENTIONS": "design/conventions.md",
    "pyspark-connector": SPARK,
    "reference pyspark-connector": SPARK,
    "Reference pyspark-connector": SPARK,
    "reference": SPARK,  # in Spark files only (SPARK_FILES); elsewhere not a citation
    "Reference": SPARK,
    "seed 002": REPLICATION,  # numbers rewritten through SEED_SECTIONS
    "Seed 002": REPLICATION,
}
SPARK_FILES = (
    "libs/oncelog/spark/",
    "libs/oncelog/testing/spark.py",
    "tests/unit/spark/",
    "tests/integration/spark/",
    "tests/spark/",
    "bench/spark.py",
)
"""Where a bare "reference" label, and a bare section sign, mean the Spark connector's design."""
SPARK_ONLY_LABELS = frozenset({"reference", "Reference"})
SEED_LABELS = frozenset({"seed 002", "Seed 002"})
SEED_SECTIONS = {
    "2.6.2": "6",  # controller, broker election -> controller and elections
    "2.6.2.1": "6",
    "2.6.3": "1",  # reliability: replica placement is cited; placement is part of the catalog model
    "2.6.3.1": "7",  # out-of-sync replicas (replica.lag.time.max.ms) -> ISR shrink and expand
    "2.6.3.2": "3",  # replica copying -> replica fetch protocol
    "2.6.4": "4",  # consistency: HW and LEO
    "\u4e09.3": "10",  # transaction semantics, interleaving of plain and transactional producers (closest)
    "\u4e03": "5",  # HW/LEO failure cases 1 and 2 -> leader epochs and truncation, which resolves both
    "\u516b": "5",  # leader epoch
}
"""Sections of the replication seed (002) and the section of design/replication.md that covers each."""
OVERRIDES = {
    ("tests/unit/spark/test_writer.py", "ref", "3.4"): SPARK,
    ("services/oncelog/partition_storage/partition_manager.py", "", "7"): REPLICATION,
}
"""(file, label or "" for a bare section sign, first section) whose document the general rules get wrong."""

_HAN_NUMERALS = "\u4e00\u4e8c\u4e09\u56db\u4e94\u516d\u4e03\u516b\u4e5d\u5341"
_DIGITS = r"\d+(?:\.\d+)*"
_NUMBER = rf"(?:\d+|[{_HAN_NUMERALS}]+)(?:\.\d+)*"  # the seed numbers its chapters in Chinese numerals
# One label and the run of section numbers that belong to it.
# New labels are any file of docs/design/ (others add documents there), old ones the short labels above.
_LABEL = r"(?:docs/)?design/[\w.-]+\.md|(?:[Rr]eference\s+)?pyspark-connector|[Ss]eed\s+002|" + "|".join(
    re.escape(label) for label in sorted(OLD_LABELS, key=len, reverse=True) if " " not in label
)
# After a comma, "and" or "/" another number needs its own section sign; a range end ("-", "to") may omit it.
_CONTINUATION = rf"(?:\s*(?:,|/|\band\b)\s*{SECTION}\s?{_NUMBER}|\s*(?:-|\u2013|\bto\b)\s*{SECTION}?\s?{_NUMBER})"
CITATION_RE = re.compile(
    rf"(?<![\w/.-])(?P<label>{_LABEL})\s+(?P<numbers>{SECTION}\s?{_NUMBER}(?:{_CONTINUATION}(?![\w]))*)"
)
# A section sign with no label before it: it continues a citation made earlier (see _bare_target).
_BARE_RE = re.compile(rf"(?<![\w/.-]){SECTION}\s?(?P<number>{_NUMBER})")
_NUMBER_RE = re.compile(_NUMBER)
_HEADING_RE = re.compile(rf"^#{{1,6}}\s+{SECTION}?\s*(?P<number>{_DIGITS})\.?(?:\s|$)")


@dataclass(frozen=True)
class Citation:
    """One citation found in a comment or docstring: where it is, which document, which sections.

    ``label`` is the label as written, whitespace collapsed ("" for a bare section sign); ``target`` the
    docs/design/ label it stands for (None when nothing tells); ``sections`` the numbers in that document.
    """

    path: Path
    line: int
    label: str
    sections: tuple[str, ...]
    text: str
    target: str | None = None
    old_style: bool = False

    @property
    def is_old_style(self) -> bool:
        """True while the citation does not name a file of docs/design/ itself."""
        return self.old_style

    @property
    def document(self) -> str:
        """The docs/design/ file name the citation points at (``architecture.md`` ...)."""
        return (self.target or self.label).removeprefix("docs/").removeprefix("design/")


@dataclass(frozen=True)
class _Found:
    """A citation with its place in the source and, for an old one, the text that replaces it."""

    start: int
    end: int
    citation: Citation
    replacement: str | None
    span_start: int
    is_comment: bool


def _is_spark_file(relative: str) -> bool:
    return relative.startswith(SPARK_FILES)


def _map_numbers(numbers: str, mapping: dict[str, str] | None) -> tuple[str, tuple[str, ...], bool]:
    """``numbers`` with each section replaced through ``mapping``; also the new sections and "all mapped"."""
    if mapping is None:
        return numbers, _sections(numbers), True
    complete = True

    def one(match: re.Match[str]) -> str:
        nonlocal complete
        if match.group(0) not in mapping:
            complete = False
            return match.group(0)
        return mapping[match.group(0)]

    mapped = _NUMBER_RE.sub(one, numbers)
    return mapped, _sections(mapped), complete


def comment_spans(source: str) -> Iterator[tuple[int, int, bool]]:
    """Character ranges of the comments and docstrings of ``source``, each with "is a comment".

    A string token counts as a docstring when it is a statement of its own: it starts a logical line and the
    line ends right after it. Strings inside expressions (arguments, assignments) are code and never touched.
    """
    line_starts = [0]
    for line in source.splitlines(keepends=True):
        line_starts.append(line_starts[-1] + len(line))

    def offset(position: tuple[int, int]) -> int:
        row, col = position
        return line_starts[row - 1] + col

    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    statement_start = True
    for index, token in enumerate(tokens):
        if token.type == tokenize.COMMENT:
            yield offset(token.start), offset(token.end), True
            continue
        if token.type == tokenize.STRING and statement_start:
            following = next((t for t in tokens[index + 1 :] if t.type not in (tokenize.NL, tokenize.COMMENT)), None)
            if following is None or following.type in (tokenize.NEWLINE, tokenize.ENDMARKER):
                yield offset(token.start), offset(token.end), False
        if token.type in (tokenize.NL, tokenize.COMMENT):
            continue
        statement_start = token.type in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT) or (
            token.type == tokenize.OP and token.string == ";"
        )


def _sections(numbers: str) -> tuple[str, ...]:
    return tuple(_NUMBER_RE.findall(numbers))


def _resolve(label: str, numbers: str, relative: str) -> tuple[str | None, str]:
    """The docs/design/ label that ``label`` stands for in ``relative`` and ``numbers`` in that document.

    Returns (None, numbers) when the label is not a citation there, or when a seed section has no counterpart.
    """
    label = " ".join(label.split())
    first = _sections(numbers)[0]
    override = OVERRIDES.get((relative, label, first))
    if override:
        return override, numbers
    if label in SPARK_ONLY_LABELS and not _is_spark_file(relative):
        return None, numbers
    if label in SEED_LABELS or (not label and first[0] in _HAN_NUMERALS):
        mapped, _, complete = _map_numbers(numbers, SEED_SECTIONS)
        return (REPLICATION if complete else None), mapped
    if label in OLD_LABELS:
        return OLD_LABELS[label], numbers
    return label.removeprefix("docs/"), numbers


def _scan(source: str, path: Path, relative: str) -> list[_Found]:
    """Every citation inside the comments and docstrings of ``source``, labelled or bare, in source order.

    A bare section sign (one with no label before it) belongs to: the replication seed when its number is a
    Chinese numeral; the Spark connector's design in a Spark file (SPARK_FILES); else the document of the
    nearest citation before it in the file. OVERRIDES correct the few places where these rules are wrong.
    """
    found: list[_Found] = []
    previous: tuple[str, str | None] | None = None  # (label as written, its target) of the last citation
    for start, end, is_comment in comment_spans(source):
        labelled = list(CITATION_RE.finditer(source, start, end))
        taken = [(m.start(), m.end()) for m in labelled]
        bare = [m for m in _BARE_RE.finditer(source, start, end) if not any(a <= m.start() < b for a, b in taken)]
        for match in sorted(labelled + bare, key=lambda m: m.start()):
            line = source.count("\n", 0, match.start()) + 1
            if "label" in match.groupdict():
                written = match.group("label")
                label = " ".join(written.split())
                numbers = match.group("numbers")
                target, mapped = _resolve(label, numbers, relative)
                if target is None and label in SPARK_ONLY_LABELS:
                    continue  # "reference §" outside the Spark files is not one of ours
                old = not label.startswith(("design/", "docs/design/"))
                replacement = None
                if old and target is not None:
                    gap = source[match.end("label") : match.start("numbers")]
                    inner = re.search(r"\s*\n\s*", written)
                    replacement = target + (inner.group(0) if inner else gap) + mapped
                citation = Citation(path, line, label, _sections(mapped), match.group(0), target, old)
                found.append(_Found(match.start("label"), match.end(), citation, replacement, start, is_comment))
                previous = (label, target)
                continue
            numbers = match.group(0)
            key = (relative, "", match.group("number"))
            if key in OVERRIDES:
                target, mapped = OVERRIDES[key], numbers
            elif match.group("number")[0] in _HAN_NUMERALS:
                target, mapped = _resolve("", numbers, relative)
            elif _is_spark_file(relative):
                target, mapped = SPARK, numbers
            elif previous is not None and previous[1] is not None:
                # a seed label before it: its numbers are the seed's too
                if previous[0] in SEED_LABELS:
                    target, mapped = _resolve(previous[0], numbers, relative)
                else:
                    target, mapped = previous[1], numbers
            else:
                target, mapped = None, numbers
            replacement = None if target is None else f"{target} {mapped}"
            citation = Citation(path, line, "", _sections(mapped), numbers, target, True)
            found.append(_Found(match.start(), match.end(), citation, replacement, start, is_comment))
    return found


def _relative_to(path: Path, root: Path | None) -> str:
    """``path`` relative to ``root`` in POSIX form (the key of SPARK_FILES and OVERRIDES)."""
    if root is not None:
        try:
            return path.resolve().relative_to(root.resolve()).as_posix()
        except ValueError:
            pass
    return path.as_posix()


def find_citations(source: str, path: Path = Path("<string>"), root: Path | None = None) -> list[Citation]:
    """Every citation (old or new label, or a bare section sign) in the comments and docstrings of ``source``.

    ``path`` relative to ``root`` (or as given) decides which rules apply (SPARK_FILES, OVERRIDES).
    """
    return [found.citation for found in _scan(source, path, _relative_to(path, root))]


def rewrite_source(source: str, line_length: int = LINE_LENGTH, relative: str = "") -> str:
    """``source`` with every old citation inside comments and docstrings naming its docs/design/ file.

    ``relative`` is the file's path from the repository root (it decides SPARK_FILES and OVERRIDES).
    A longer label can push a line past ``line_length``; such a line (and only such a line) is broken at a space
    before the limit, never inside a citation, and continued with the same comment prefix or indentation.
    """
    pieces = []
    done = 0
    comment_lines: dict[int, int] = {}  # line index -> column of the comment that got a new label
    for found in _scan(source, Path(relative or "<string>"), relative):
        if found.replacement is None:
            continue
        pieces.append(source[done : found.start])
        pieces.append(found.replacement)
        done = found.end
        if found.is_comment:
            line_start = source.rfind("\n", 0, found.span_start) + 1
            comment_lines[source.count("\n", 0, found.span_start)] = found.span_start - line_start
    if not pieces:
        return source
    pieces.append(source[done:])
    before = source.splitlines(keepends=True)
    out = []
    for index, line in enumerate("".join(pieces).splitlines(keepends=True)):
        width = len(line.rstrip("\r\n"))
        grown = index < len(before) and width > max(line_length, len(before[index].rstrip("\r\n")))
        out.extend(_wrap(line, line_length, comment_lines.get(index)) if grown else [line])
    return "".join(out)


_BULLET_RE = re.compile(r"(?:[*-]|\d+\.)[ \t]+")


def _wrap(line: str, line_length: int, comment_column: int | None) -> list[str]:
    """Break one over-long comment or docstring line at spaces before ``line_length``, outside citations.

    Continuation lines keep the comment's ``#`` and indentation (a trailing comment continues as a comment
    line at the code's indentation); docstring lines keep their indentation, plus a bullet's width.
    """
    text = line.rstrip("\r\n")
    ending = line[len(text) :]
    indent = text[: len(text) - len(text.lstrip())]
    if comment_column is not None:
        after_hash = text[comment_column + 1 :]
        body = after_hash.lstrip(" ")
        spaces = " " * max(1, len(after_hash) - len(body)) if comment_column == len(indent) else " "
        bullet = _BULLET_RE.match(body)
        prefix = indent + "#" + spaces + " " * (bullet.end() if bullet else 0)
        first_text_at = comment_column + 1
    else:
        body = text.lstrip().lstrip("rbuRBU").removeprefix('"""').removeprefix("'''")
        bullet = _BULLET_RE.match(body)
        prefix = indent + " " * (bullet.end() if bullet else 0)
        first_text_at = len(indent) + 1
    result = []
    while len(text) > line_length:
        protected = [(m.start(), m.end()) for m in CITATION_RE.finditer(text)]
        cut = next(
            (
                i
                for i in range(line_length, first_text_at, -1)
                if text[i] == " " and text[i - 1] != " " and not any(a < i < b for a, b in protected)
            ),
            None,
        )
        if cut is None:
            break
        result.append(text[:cut].rstrip() + ending)
        text = prefix + text[cut:].lstrip()
        first_text_at = len(prefix)
    result.append(text + ending)
    return result


def load_sections(design_dir: Path) -> dict[str, set[str]]:
    """Section numbers of every Markdown file of ``design_dir``, from its numbered headings."""
    sections: dict[str, set[str]] = {}
    for document in sorted(design_dir.glob("*.md")):
        numbers = sections.setdefault(document.name, set())
        in_fence = False
        for line in document.read_text(encoding="utf-8").splitlines():
            if line.lstrip().startswith("```"):
                in_fence = not in_fence
                continue
            match = None if in_fence else _HEADING_RE.match(line)
            if match:
                numbers.add(match.group("number"))
    return sections


def python_files(root: Path, paths: Iterable[Path] = ()) -> list[Path]:
    """The Python files to scan: ``paths`` if given, else everything under the scanned directories of ``root``."""
    chosen = [Path(p) for p in paths]
    if not chosen:
        chosen = [root / d for d in SCANNED_DIRS if (root / d).is_dir()]
    files = []
    for entry in chosen:
        candidates = sorted(entry.rglob("*.py")) if entry.is_dir() else [entry]
        for candidate in candidates:
            relative = candidate.resolve().relative_to(root.resolve()) if candidate.is_absolute() else candidate
            if SKIPPED_PARTS.intersection(candidate.parts) or relative.parts[:3] == GENERATED_DIR.parts:
                continue
            files.append(candidate)
    return files


def problems(citations: Iterable[Citation], sections: dict[str, set[str]], root: Path) -> list[str]:
    """One line per old-style label and per citation of a section (or document) missing from docs/design/."""
    found = []
    for citation in citations:
        where = f"{_display(citation.path, root)}:{citation.line}"
        if citation.is_old_style:
            if citation.target is None and not citation.label:
                found.append(f"{where}: {citation.text!r} names no document; write design/<file>.md before it")
            elif citation.target is None:
                found.append(f"{where}: {citation.text!r}: no section of docs/design/ is mapped for it (SEED_SECTIONS)")
            elif not citation.label:
                found.append(
                    f"{where}: {citation.text!r} names no document; it continues {citation.target} "
                    "(run scripts/rewrite_design_citations.py)"
                )
            else:
                found.append(f"{where}: old label {citation.text!r} (run scripts/rewrite_design_citations.py)")
            continue
        known = sections.get(citation.document)
        if known is None:
            found.append(f"{where}: {citation.text!r} names docs/design/{citation.document}, which does not exist")
            continue
        missing = [s for s in citation.sections if s not in known]
        if missing:
            listed = ", ".join(SECTION + s for s in missing)
            found.append(f"{where}: {citation.text!r}: no heading {listed} in docs/design/{citation.document}")
    return found


def _display(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


def check(root: Path, paths: Iterable[Path] = ()) -> list[str]:
    """Every problem with the citations under ``root`` (or in ``paths``); empty when all resolve."""
    sections = load_sections(root / DESIGN_DIR)
    citations = []
    for path in python_files(root, paths):
        citations.extend(find_citations(path.read_text(encoding="utf-8"), path, root))
    return problems(citations, sections, root)


def rewrite(root: Path, paths: Iterable[Path] = ()) -> list[Path]:
    """Rewrite old citations in place; returns the files that changed."""
    changed = []
    for path in python_files(root, paths):
        source = path.read_text(encoding="utf-8")
        updated = rewrite_source(source, relative=_relative_to(path, root))
        if updated != source:
            path.write_text(updated, encoding="utf-8")
            changed.append(path)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="repository root (default: this checkout)")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 on any problem")
    parser.add_argument("paths", nargs="*", type=Path, help="files or directories (default: the scanned dirs)")
    args = parser.parse_args(argv)
    if args.check:
        found = check(args.root, args.paths)
        for line in found:
            print(line)
        if found:
            print(f"{len(found)} citation problem(s)", file=sys.stderr)
            return 1
        return 0
    changed = rewrite(args.root, args.paths)
    for path in changed:
        print(f"rewrote {_display(path, args.root)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
