"""The contract ships with the code: every citation of it in the sources names a docs page and one of
its sections (``docs/scripts/providers.md#metadata``), the section exists, and nothing cites the SPEC,
which does not ship.

Anchors are computed as the site builds them (Python-Markdown's ``toc`` extension, which MkDocs uses),
so a renamed heading fails here, not in a reader's browser.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import markdown
import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted(
    path
    for folder in ("proto", "contract", "worker", "coordinator", "tests", "rhai-python")
    for pattern in ("*.py", "*.rs")
    for path in (ROOT / folder).rglob(pattern)
    if "target" not in path.relative_to(ROOT).parts
)
#: Prose that ships with the code: the docs themselves, the protocol, the README files.
PROSE = sorted(
    [*(ROOT / "docs").rglob("*.md"), *ROOT.glob("*.md"), *(ROOT / "proto").glob("*.md"),
     *(ROOT / "examples").rglob("*.md"), ROOT / "rhai-python" / "Cargo.toml"]
)  # fmt: skip
CITATION = re.compile(r"\bdocs/((?:[\w-]+/)*[\w-]+\.md)(?:#([\w-]+))?")


@cache
def anchors(page: str) -> frozenset[str]:
    md = markdown.Markdown(extensions=["toc", "tables", "fenced_code", "admonition"])
    md.convert((ROOT / "docs" / page).read_text())

    def walk(tokens: list[dict[str, object]]) -> set[str]:
        found: set[str] = set()
        for token in tokens:
            found.add(str(token["id"]))
            found |= walk(token["children"])  # type: ignore[arg-type]
        return found

    return frozenset(walk(md.toc_tokens))


def citations() -> list[tuple[str, int, str, str | None]]:
    found = []
    for path in SOURCES:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for match in CITATION.finditer(line):
                found.append((path.relative_to(ROOT).as_posix(), number, match.group(1), match.group(2)))
    return found


def test_the_sources_cite_the_docs() -> None:
    """The citations are there to check (the walk is not looking at nothing)."""
    pages = {page for _, _, page, _ in citations()}
    assert {
        "scripts/regions.md",
        "scripts/providers.md",
        "scripts/host-functions.md",
        "scripts/errors.md",
    } <= pages


@pytest.mark.parametrize("page", sorted({c[2] for c in citations()}))
def test_every_cited_section_exists(page: str) -> None:
    assert (ROOT / "docs" / page).is_file(), page
    missing = [
        f"{where}:{number}: docs/{page}#{anchor}"
        for where, number, cited, anchor in citations()
        if cited == page and anchor is not None and anchor not in anchors(page)
    ]
    assert missing == []


def test_nothing_cites_the_spec() -> None:
    """The SPEC does not ship: a citation of it (``SPEC §3.6``) points nowhere a reader can go."""
    cites = re.compile(r"SPEC\s*§")
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in (*SOURCES, *PROSE)
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if cites.search(line) and path.resolve() != Path(__file__).resolve()
    ]
    assert found == []
