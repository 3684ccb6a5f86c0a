"""A throwaway git repository made from the project, for real bisections: its tracked files as
the first commit (conv2d wrapped so that a later commit can slow it by a factor), then one
commit per change. Used by tests/test_bisect_e2e.py and benchmarks/bisect_acceptance.py."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).parent.parent
CONV = "reference_framework/ops/conv.py"
# conv2d's kernel, wrapped: with _SLOWDOWN = f a call takes f times as long (a busy wait after
# the real work, on the calling thread). The first commit has it at 1.0.
WRAPPER = '''

_SLOWDOWN = 1.0


def _slowed(kernel: Any) -> Any:
    import time

    def slowed(ins: dict[str, Any], attrs: dict[str, Any], ctx: KernelContext) -> dict[str, Any]:
        start = time.perf_counter()
        out = kernel(ins, attrs, ctx)
        if _SLOWDOWN != 1.0:
            end = time.perf_counter() + (_SLOWDOWN - 1.0) * (time.perf_counter() - start)
            while time.perf_counter() < end:
                pass
        return out

    return slowed

'''
GIT_ENV = {"GIT_AUTHOR_NAME": "Ann Author", "GIT_AUTHOR_EMAIL": "ann@example.com",
           "GIT_COMMITTER_NAME": "Ann Author", "GIT_COMMITTER_EMAIL": "ann@example.com"}


def git(repo: Path, *args: str) -> str:
    import os

    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV}, check=True)
    return done.stdout.strip()


def commit(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--no-verify", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def set_slowdown(repo: Path, factor: float) -> None:
    path = repo / CONV
    text = path.read_text()
    line = next(x for x in text.splitlines() if x.startswith("_SLOWDOWN = "))
    path.write_text(text.replace(line, f"_SLOWDOWN = {factor!r}"))


def unrelated(repo: Path, i: int) -> None:
    with open(repo / "docs" / "index.md", "a", encoding="utf-8") as f:
        f.write(f"\n<!-- unrelated change {i} -->\n")


def break_import(repo: Path) -> None:
    """A commit whose framework fails to import (fixed by the next :func:`fix_import`)."""
    with open(repo / "reference_framework" / "__init__.py", "a", encoding="utf-8") as f:
        f.write("\nraise ImportError('broken on purpose')  # bisect test\n")


def fix_import(repo: Path) -> None:
    path = repo / "reference_framework" / "__init__.py"
    path.write_text(path.read_text().replace(
        "\nraise ImportError('broken on purpose')  # bisect test\n", ""))


def make(dest: Path, plan: Sequence[str | float]) -> list[str]:
    """The repository in ``dest``: the project as the first commit, then one commit per item of
    ``plan``: a float sets conv2d's slowdown, ``"-"`` is an unrelated change, ``"break"`` and
    ``"fix"`` break and mend the framework's import. Returns the shas, first commit first."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split("\0")
    for name in files:
        if name and (ROOT / name).is_file() and not name.startswith(("ci/baselines", ".ci/")):
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    conv = dest / CONV
    text = conv.read_text()
    marker = "\n# conv2d_grad recomputes the columns"
    assert marker in text and "kernel=conv2d," in text
    text = text.replace(marker, WRAPPER + marker, 1)
    text = text.replace("kernel=conv2d,", "kernel=_slowed(conv2d),")
    conv.write_text(text)
    git(dest, "init", "-q", "-b", "main")
    shas = [commit(dest, "the project")]
    for i, item in enumerate(plan, 1):
        if isinstance(item, float):
            set_slowdown(dest, item)
            message = f"conv2d {item:g}x as slow"
        elif item == "break":
            break_import(dest)
            message = "a broken import"
        elif item == "fix":
            fix_import(dest)
            message = "the import mended"
        else:
            unrelated(dest, i)
            message = f"unrelated change {i}"
        shas.append(commit(dest, message))
    return shas
