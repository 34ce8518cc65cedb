#!/usr/bin/env python3
"""Keep the section citations in comments and docstrings pointing at docs/design/.

The code cites the design in comments such as ``(design/architecture.md §4, design/kafka-semantics.md §4.4,
§4.6)``. Older comments name the documents by short labels that lived outside the repository; this script
rewrites those labels to the files of docs/design/ and checks that every citation names a section heading that
exists there.

Labels rewritten (only inside comments and docstrings, never in code; running it twice changes nothing):

=====================  ==============================
old label              new label
=====================  ==============================
``DESIGN``             ``design/architecture.md``
``ref`` / ``Ref``      ``design/kafka-semantics.md``
``CONVENTIONS``        ``design/conventions.md``
=====================  ==============================

A citation is a label followed by a section sign and a number; the numbers that follow it, separated by
commas, "and", "to", "/" or a dash, belong to the same document (``design/kafka-semantics.md §2.3-2.5,
§5.6``). A range is checked at both ends.

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
OLD_LABELS = {
    "DESIGN": "design/architecture.md",
    "ref": "design/kafka-semantics.md",
    "Ref": "design/kafka-semantics.md",
    "CONVENTIONS": "design/conventions.md",
}

_NUMBER = r"\d+(?:\.\d+)*"
# One label and the run of section numbers that belong to it.
# New labels are any file of docs/design/ (others add documents there), old ones the three short labels.
_LABEL = r"design/[\w.-]+\.md|" + "|".join(re.escape(label) for label in sorted(OLD_LABELS, key=len, reverse=True))
# After a comma, "and" or "/" another number needs its own section sign; a range end ("-", "to") may omit it.
_CONTINUATION = rf"(?:\s*(?:,|/|\band\b)\s*{SECTION}\s?{_NUMBER}|\s*(?:-|\u2013|\bto\b)\s*{SECTION}?\s?{_NUMBER})"
CITATION_RE = re.compile(
    rf"(?<![\w/.-])(?P<label>{_LABEL})\s+(?P<numbers>{SECTION}\s?{_NUMBER}(?:{_CONTINUATION}(?![\w]))*)"
)
_NUMBER_RE = re.compile(_NUMBER)
_HEADING_RE = re.compile(rf"^#{{1,6}}\s+{SECTION}?\s*(?P<number>{_NUMBER})\.?(?:\s|$)")


@dataclass(frozen=True)
class Citation:
    """One citation found in a comment or docstring: where it is, which document, which sections."""

    path: Path
    line: int
    label: str
    sections: tuple[str, ...]
    text: str

    @property
    def is_old_style(self) -> bool:
        """True while the citation still uses a label that names no file of docs/design/."""
        return self.label in OLD_LABELS

    @property
    def document(self) -> str:
        """The docs/design/ file name the citation points at (``architecture.md`` ...)."""
        return OLD_LABELS.get(self.label, self.label).removeprefix("design/")


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


def find_citations(source: str, path: Path = Path("<string>")) -> list[Citation]:
    """Every citation (old or new label) inside the comments and docstrings of ``source``."""
    found = []
    for start, end, _ in comment_spans(source):
        for match in CITATION_RE.finditer(source, start, end):
            line = source.count("\n", 0, match.start()) + 1
            found.append(Citation(path, line, match.group("label"), _sections(match.group("numbers")), match.group(0)))
    return found


def rewrite_source(source: str, line_length: int = LINE_LENGTH) -> str:
    """``source`` with every old label inside comments and docstrings replaced by its docs/design/ file.

    A longer label can push a line past ``line_length``; such a line (and only such a line) is broken at a space
    before the limit, never inside a citation, and continued with the same comment prefix or indentation.
    """
    pieces = []
    done = 0
    comment_lines: dict[int, int] = {}  # line index -> column of the comment that got a new label
    for start, end, is_comment in comment_spans(source):
        for match in CITATION_RE.finditer(source, start, end):
            label = match.group("label")
            if label in OLD_LABELS:
                pieces.append(source[done : match.start("label")])
                pieces.append(OLD_LABELS[label])
                done = match.end("label")
                if is_comment:
                    line_start = source.rfind("\n", 0, start) + 1
                    comment_lines[source.count("\n", 0, start)] = start - line_start
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
        citations.extend(find_citations(path.read_text(encoding="utf-8"), path))
    return problems(citations, sections, root)


def rewrite(root: Path, paths: Iterable[Path] = ()) -> list[Path]:
    """Rewrite old labels in place; returns the files that changed."""
    changed = []
    for path in python_files(root, paths):
        source = path.read_text(encoding="utf-8")
        updated = rewrite_source(source)
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
