"""The documentation's links resolve, its pages stay short, and it cites nothing the project lacks.

Every relative markdown link (``[text](path)``, ``[text](path#anchor)``) in the README, the
pages of docs/, ci/README.md and benchmarks/README.md must name an existing file, and an anchor
must name a heading of that file (GitHub's anchor rule: lower case, punctuation dropped, spaces
as dashes; mkdocs's is the same for these headings). The user pages (the README and docs/, less
docs/validation.md) stay within their size, and hold no dates, machine names or commit hashes:
those belong to docs/validation.md, CHANGELOG.md and benchmarks/notes/."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
DOCS = sorted((ROOT / "docs").rglob("*.md"))
PAGES = sorted([ROOT / "README.md", ROOT / "ci" / "README.md", ROOT / "benchmarks" / "README.md",
                *DOCS])
MEASUREMENTS = ROOT / "docs" / "validation.md"
USER_PAGES = [ROOT / "README.md", *(p for p in DOCS if p != MEASUREMENTS)]
MAX_WORDS = 20_000
MAX_LINES = 400
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
MACHINE = re.compile(r"\b(Xeon|EPYC|Ryzen|Threadripper|Core\(TM\)|H100|H200|A100)\b")
# a commit hash: 7 to 40 hex digits with a digit and a letter (not a word such as "added")
HASH = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")


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


def name(page: Path) -> str:
    return str(page.relative_to(ROOT))


@pytest.mark.parametrize("page", PAGES, ids=name)
def test_every_relative_link_resolves(page):
    for target in links(page):
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        assert dest.exists(), f"{name(page)}: link to {target} names no file"
        if anchor and dest.suffix == ".md":
            assert anchor in anchors(dest), f"{name(page)}: no heading #{anchor}"


@pytest.mark.parametrize("page", DOCS, ids=name)
def test_a_page_of_docs_links_only_into_docs(page):
    # the site is built from docs/ alone: a link out of it is a broken link there
    for target in links(page):
        file = target.partition("#")[0]
        if file:
            dest = (page.parent / file).resolve()
            assert (ROOT / "docs").resolve() in dest.parents, (
                f"{name(page)}: {target} is outside docs/; name the file as a code span")


def test_the_readme_is_short_and_starts_with_the_two_commands():
    lines = (ROOT / "README.md").read_text("utf-8").splitlines()
    assert len(lines) <= 150
    assert "pytest suites/ --opperf" in lines[3] and "pytest tests/" in lines[4]


def test_the_index_lists_every_page():
    index = (ROOT / "docs" / "index.md").read_text("utf-8")
    for page in DOCS:
        relative = page.relative_to(ROOT / "docs").as_posix()
        if relative != "index.md":
            assert f"]({relative})" in index, relative


def test_the_user_pages_are_short():
    words = {name(p): len(p.read_text("utf-8").split()) for p in USER_PAGES}
    assert sum(words.values()) <= MAX_WORDS, sorted(words.items(), key=lambda kv: -kv[1])
    for page in [*USER_PAGES, MEASUREMENTS]:
        lines = page.read_text("utf-8").count("\n")
        assert lines <= MAX_LINES, f"{name(page)}: {lines} lines"


@pytest.mark.parametrize("page", [*USER_PAGES, ROOT / "ci" / "README.md",
                                  ROOT / "benchmarks" / "README.md"], ids=name)
def test_the_user_pages_hold_no_dates_machines_or_hashes(page):
    text = page.read_text("utf-8")
    # pinned actions' hashes are what a copied workflow must hold
    text = re.sub(r"uses: \S+@[0-9a-f]{40}", "uses: ACTION", text)
    for pattern in (DATE, MACHINE, HASH):
        found = pattern.findall(text)
        assert not found, f"{name(page)}: {found[:5]} belongs in docs/validation.md"


def test_the_forbidden_patterns_find_what_they_must():
    assert DATE.findall("on 2026-12-06, at 1.5") == ["2026-12-06"]
    assert MACHINE.findall("an AMD EPYC, nvidia-h200-full.json") == ["EPYC"]
    assert HASH.findall("at 433d369, deadbeef, a 1234567 ms") == ["433d369"]


def tracked_files() -> list[Path]:
    done = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip("not a git checkout")
    return [ROOT / f for f in done.stdout.splitlines()
            if (ROOT / f).is_file() and not f.startswith("benchmarks/notes/")]


def test_no_file_cites_a_page_or_design_the_project_does_not_have():
    design = "ARCHI" + "TECTURE"  # spelled apart: this file names it only to forbid it
    section = re.compile(r"\b[Ss]ection \d")  # a numbered section of a design the project lacks
    for path in tracked_files():
        if path.suffix not in (".py", ".md", ".toml", ".yml", ".yaml", ".sh", ".cfg", ".txt"):
            continue
        text = path.read_text("utf-8", errors="replace")
        assert design not in text, name(path)
        assert not section.search(text), f"{name(path)}: {section.search(text)}"
        for cited in re.findall(r"\bdocs/[\w/.-]+\.md", text):
            assert (ROOT / cited).is_file(), f"{name(path)} cites {cited}, which does not exist"
