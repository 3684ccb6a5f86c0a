"""The documentation's relative links resolve, and the README stays short.

Every relative markdown link (``[text](path)``, ``[text](path#anchor)``) in the README, the
pages of docs/, ci/README.md and benchmarks/README.md must name an existing file, and an anchor
must name a heading of that file (GitHub's anchor rule: lower case, punctuation dropped, spaces
as dashes)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
PAGES = sorted(
    [ROOT / "README.md", ROOT / "ci" / "README.md", ROOT / "benchmarks" / "README.md",
     *(ROOT / "docs").glob("*.md")]
)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the headings of a markdown file."""
    text = FENCE.sub("", path.read_text("utf-8"))
    found = set()
    for line in text.splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            title = re.sub(r"[^\w\- ]", "", title)
            found.add(title.replace(" ", "-"))
    return found


def links(path: Path) -> list[str]:
    text = FENCE.sub("", path.read_text("utf-8"))
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    for target in links(page):
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        assert dest.exists(), f"{page.relative_to(ROOT)}: link to {target} names no file"
        if anchor and dest.suffix == ".md":
            assert anchor in anchors(dest), f"{page.relative_to(ROOT)}: no heading #{anchor}"


def test_the_readme_is_at_most_250_lines_and_starts_with_the_two_commands():
    lines = (ROOT / "README.md").read_text("utf-8").splitlines()
    assert len(lines) <= 250
    assert "pytest suites/ --opperf" in lines[3] and "pytest tests/" in lines[4]


def test_the_index_lists_every_page():
    index = (ROOT / "docs" / "index.md").read_text("utf-8")
    for page in (ROOT / "docs").glob("*.md"):
        if page.name != "index.md":
            assert f"]({page.name})" in index, page.name
