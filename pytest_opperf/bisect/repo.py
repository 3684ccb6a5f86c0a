"""The git side of a bisection: the revisions, the first-parent history between them, the checks of
the selection, and one worktree per commit measured.

:func:`history` resolves GOOD and BAD, checks that GOOD is an ancestor of BAD on its first-parent
line and lists the commits from GOOD to BAD (GOOD first). :func:`dirty` names the selected files
that differ from HEAD: a bisection runs each commit's own suites, so an uncommitted change of
them would never be measured. :class:`Worktrees` checks commits out as detached worktrees in a
temporary directory and always removes them again (:meth:`Worktrees.close`; also a context
manager). Errors are :class:`BisectUsage` with a one-line message (exit status 4).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from ..ab.checkout import GIT_TIMEOUT_S, shallow_hint
from ..ab.reclaim import mark

__all__ = ["BisectCommit", "BisectUsage", "Worktrees", "dirty", "history", "selected_paths",
           "toplevel"]


class BisectUsage(Exception):
    """A bad input of the bisection; the message is one line naming it."""


@dataclass(frozen=True)
class BisectCommit:
    sha: str
    subject: str
    author: str
    date: str  # ISO 8601, the author's

    @property
    def short(self) -> str:
        return self.sha[:10]

    def to_dict(self) -> dict[str, str]:
        return {"sha": self.sha, "subject": self.subject, "author": self.author,
                "date": self.date}


def _git(args: Sequence[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                              timeout=GIT_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as exc:
        raise BisectUsage(f"cannot run git in {cwd}: {exc}") from None


def _last(done: subprocess.CompletedProcess[str]) -> str:
    return (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]


def toplevel(path: Path) -> Path:
    """The toplevel of the repository ``path`` is in."""
    done = _git(["rev-parse", "--show-toplevel"], path)
    if done.returncode != 0 or not done.stdout.strip():
        raise BisectUsage(f"{path} is in no git repository: a bisection checks out its commits")
    return Path(done.stdout.strip()).resolve()


def _resolve(rev: str, top: Path, what: str) -> str:
    if not rev.strip():
        raise BisectUsage(f"{what}: expected a git revision, got ''")
    done = _git(["rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}"], top)
    sha = done.stdout.strip()
    if done.returncode != 0 or len(sha) != 40:
        raise BisectUsage(f"{what} {rev!r} is no revision of the repository {top}"
                          f"{shallow_hint(top, history=True)}")
    return sha


_FORMAT = "%H%x1f%s%x1f%an%x1f%aI"


def _commits(top: Path, args: Sequence[str]) -> list[BisectCommit]:
    done = _git(["log", f"--format={_FORMAT}", *args], top)
    if done.returncode != 0:
        raise BisectUsage(f"git log {' '.join(args)}: {_last(done)}")
    return [BisectCommit(*line.split("\x1f", 3)) for line in done.stdout.splitlines() if line]


def history(top: Path, good: str, bad: str) -> list[BisectCommit]:
    """The commits from ``good`` to ``bad`` on ``bad``'s first-parent line, ``good`` first."""
    good_sha, bad_sha = _resolve(good, top, "GOOD"), _resolve(bad, top, "BAD")
    if good_sha == bad_sha:
        raise BisectUsage(f"GOOD {good!r} and BAD {bad!r} are the same commit {good_sha[:10]}")
    if _git(["merge-base", "--is-ancestor", good_sha, bad_sha], top).returncode != 0:
        raise BisectUsage(f"GOOD {good!r} ({good_sha[:10]}) is not an ancestor of BAD {bad!r} "
                          f"({bad_sha[:10]}){shallow_hint(top, history=True)}")
    after = _commits(top, ["--first-parent", "--reverse", f"{good_sha}..{bad_sha}"])
    parent = _git(["rev-parse", f"{after[0].sha}^1"], top).stdout.strip() if after else ""
    if parent != good_sha:
        raise BisectUsage(f"GOOD {good!r} ({good_sha[:10]}) is not on the first-parent line of "
                          f"BAD {bad!r}: name a commit of that line (e.g. the merge's parent)"
                          f"{shallow_hint(top, history=True)}")
    return _commits(top, ["-1", good_sha]) + after


def selected_paths(args: Sequence[str], invocation: Path) -> list[str]:
    """The test paths among pytest arguments (those that exist, ``::`` parts dropped)."""
    out = []
    for arg in args:
        path = arg.partition("::")[0]
        if path and not arg.startswith("-") and Path(invocation, path).exists():
            out.append(path)
    return out


def dirty(top: Path, paths: Sequence[str], invocation: Path) -> list[str]:
    """The files under ``paths`` (relative to ``invocation``) that differ from HEAD or are not
    committed."""
    if not paths:
        return []
    done = _git(["status", "--porcelain", "--untracked-files=all", "--",
                 *(str(Path(invocation, p).resolve()) for p in paths)], top)
    if done.returncode != 0:
        raise BisectUsage(f"git status: {_last(done)}")
    return [line[3:] for line in done.stdout.splitlines() if line.strip()]


@dataclass
class Worktrees:
    """One detached worktree per commit, made when first asked for, in a temporary directory;
    :meth:`close` removes them all (idempotent, never raises)."""

    top: Path
    path: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="opperf-bisect-")))
    made: dict[str, Path] = field(default_factory=dict)
    closed: bool = False

    def __post_init__(self) -> None:
        mark(self.path, self.top)  # a killed bisection's worktrees: the next run reclaims them

    def __enter__(self) -> Worktrees:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def checkout(self, sha: str) -> Path:
        """The worktree of ``sha`` (made now when it has none)."""
        if self.closed:
            raise RuntimeError("the worktrees are closed")
        if sha in self.made:
            return self.made[sha]
        target = self.path / sha[:12]
        done = _git(["worktree", "add", "--detach", "--end-of-options", str(target), sha],
                    self.top)
        if done.returncode != 0:
            raise BisectUsage(f"git worktree add {sha[:10]}: {_last(done)}")
        self.made[sha] = target
        return target

    def close(self) -> list[str]:
        """Remove every worktree and the directory; returns what could not be removed."""
        if self.closed:
            return []
        self.closed = True
        problems = []
        for target in self.made.values():
            try:
                done = _git(["worktree", "remove", "--force", str(target)], self.top)
                if done.returncode != 0 and target.exists():
                    problems.append(f"git worktree remove {target}: {_last(done)}")
            except BisectUsage as exc:
                problems.append(str(exc))
        shutil.rmtree(self.path, ignore_errors=True)
        try:
            _git(["worktree", "prune"], self.top)
        except BisectUsage as exc:
            problems.append(str(exc))
        problems += [f"worktree {t} is still there" for t in self.made.values() if t.exists()]
        return problems
