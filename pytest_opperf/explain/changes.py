"""Is it this change? The changed lines of a diff that a metric's added work runs through.

:meth:`Changes.from_git` reads the head's diff against its base (``git diff -U0 --relative``: the
head's line numbers of every hunk, files relative to the checkout); :meth:`Changes.through`
gives, for the functions that do more work (:class:`pytest_opperf.explain.diff.FunctionDelta`),
the hunks that lie inside them (a function's lines: its definition in the head's source, found
with :mod:`ast` by its first line and name). None of them: the added work comes from elsewhere (a
dependency, the environment). No pytest.
"""

from __future__ import annotations

import ast
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..ab.reclaim import GIT_TIMEOUT_S
from .diff import Explanation, FunctionDelta

__all__ = ["Changes", "ChangesError", "function_lines", "parse_hunks"]

_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@")


class ChangesError(Exception):
    """The diff could not be read; the message names the command and what it said."""


def parse_hunks(diff: str) -> dict[str, list[tuple[int, int]]]:
    """``git diff -U0`` output as the head's line ranges of each file's hunks: ``{path: [(first,
    last), ...]}``; a hunk that only deletes is the line after which it deleted."""
    out: dict[str, list[tuple[int, int]]] = {}
    path: str | None = None
    for line in diff.splitlines():
        if line.startswith("+++ "):
            target = line[4:].strip()
            path = None if target == "/dev/null" else target.removeprefix("b/")
            continue
        m = _HUNK.match(line)
        if m and path is not None:
            start, count = int(m.group(1)), int(m.group(2) if m.group(2) is not None else 1)
            out.setdefault(path, []).append((start, start + count - 1) if count else
                                            (start, start))
    return out


def function_lines(source: str, line: int, name: str) -> tuple[int, int]:
    """The lines of the function (or class body) that starts at ``line`` (its first decorator or
    its ``def``) named ``name`` (a qualified name: its last part is matched) in ``source``; the
    whole module for ``<module>``; ``(line, line)`` when none is found (a lambda, a source that no
    longer parses)."""
    short = name.rpartition(".")[2]
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return line, line
    if short == "<module>":
        return 1, max(1, len(source.splitlines()))
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            if first == line and node.name == short:
                return first, node.end_lineno or node.lineno
    return line, line


@dataclass
class Changes:
    """The hunks of one diff: ``root`` is the head's checkout (whose sources give the functions'
    lines), ``hunks`` as :func:`parse_hunks` gives them, ``label`` the diff (``abc1234..working
    tree``)."""

    root: Path
    hunks: dict[str, list[tuple[int, int]]]
    label: str
    _sources: dict[str, str | None] = field(default_factory=dict, repr=False)

    @classmethod
    def from_git(cls, root: Path, base: str, head: str | None = None) -> Changes:
        """The diff of ``head`` (a revision; None: the working tree) against ``base`` in the
        git checkout ``root``, whose files are the head's (raises :class:`ChangesError`)."""
        args = ["git", "-C", str(root), "diff", "-U0", "--no-color", "--no-ext-diff",
                "--relative", base, *([head] if head else []), "--"]
        try:
            done = subprocess.run(args, capture_output=True, text=True, timeout=GIT_TIMEOUT_S,
                                  stdin=subprocess.DEVNULL)
        except (OSError, subprocess.SubprocessError) as exc:
            raise ChangesError(f"{' '.join(args)}: {exc}") from None
        if done.returncode != 0:
            said = done.stderr.strip().splitlines()
            raise ChangesError(f"{' '.join(args)} exited {done.returncode}: "
                               f"{said[-1] if said else 'no message'}")
        label = f"{base[:12]}..{head[:12] if head else 'the working tree'}"
        return cls(root, parse_hunks(done.stdout), label)

    def _source(self, file: str) -> str | None:
        if file not in self._sources:
            try:
                self._sources[file] = (self.root / file).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                self._sources[file] = None
        return self._sources[file]

    def through(self, functions: Sequence[FunctionDelta]) -> list[str]:
        """The hunks (``path:first-last``) inside the functions that do more work, in the
        functions' order, each once."""
        out: list[str] = []
        for f in functions:
            if not f.file or not any(d > 0 for d in f.deltas) or f.file not in self.hunks:
                continue
            source = self._source(f.file)
            first, last = function_lines(source, f.line, f.name) if source else (f.line, f.line)
            for a, b in self.hunks[f.file]:
                if a <= last and b >= first:
                    text = f"{f.file}:{a}" if a == b else f"{f.file}:{a}-{b}"
                    if text not in out:
                        out.append(text)
        return out

    def apply(self, e: Explanation) -> None:
        """Set ``e.changed``: the hunks its added work runs through (empty: none of them)."""
        e.changed = self.through(e.functions)
