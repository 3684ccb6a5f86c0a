"""The worktrees of killed runs: marked with their owning process, reclaimed by the next run.

An A/B session (``opperf-ab-XXXX/base``) and a bisection (``opperf-bisect-XXXX/<sha>``) check
revisions out as git worktrees in a temporary directory and remove them on every way out they
can see; a SIGKILL (an OOM kill, a CI cancellation, ``kill -9``) leaves them, and each is a full
copy of the tree. :func:`mark` writes :data:`OWNER` into the temporary directory before any worktree
is added: the owning process's pid, its start time (so that a reused pid is not taken for the
owner), the machine's name (a pid is only known on its machine: a temporary directory shared with
another machine or container is never judged from here) and the repository. :func:`reclaim`, at the
next A/B session or bisection of the same repository, removes the worktrees and directories whose
owner is gone (``git worktree remove --force``, ``git worktree prune``, the directory); a worktree
without the marker is not ours and one whose owner runs is in use: both are left alone. No pytest
import.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["OWNER", "PREFIXES", "Reclaimed", "mark", "owner_gone", "process_start", "reclaim"]

OWNER = "opperf-owner.json"  # in the temporary directory that holds the worktrees
PREFIXES = ("opperf-ab-", "opperf-bisect-")  # the temporary directories' names (mkdtemp)
GIT_TIMEOUT_S = 120  # the longest a git command may take (worktree, rev-parse)


def process_start(pid: int) -> str | None:
    """When ``pid`` started, as the kernel counts it (``/proc/<pid>/stat`` field 22, clock ticks
    since boot); None where there is no ``/proc`` or no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()  # after the command name, which may hold spaces
    return fields[19] if len(fields) > 19 else None


def _zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return False
    fields = stat.rsplit(")", 1)[-1].split()
    return bool(fields) and fields[0] in ("Z", "X")


def mark(directory: Path, toplevel: Path) -> None:
    """Write the owner marker of this process into ``directory`` (before any worktree there)."""
    owner = {"pid": os.getpid(), "start": process_start(os.getpid()), "host": socket.gethostname(),
             "toplevel": str(toplevel)}
    (directory / OWNER).write_text(json.dumps(owner) + "\n", encoding="utf-8")


def _owner(directory: Path) -> dict[str, object] | None:
    try:
        owner = json.loads((directory / OWNER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(owner, dict) or not isinstance(owner.get("pid"), int):
        return None
    return owner


def owner_gone(owner: dict[str, object]) -> bool:
    """Whether the process a marker names has ended: no such pid, a zombie, or a pid that now
    belongs to a process started at another time. A marker of another machine (or of none) is
    never taken for gone: its pid says nothing here."""
    pid = owner["pid"]
    assert isinstance(pid, int)
    if pid == os.getpid() or owner.get("host") != socket.gethostname():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # another user's process: it runs
        return False
    if _zombie(pid):
        return True
    start = owner.get("start")
    return start is not None and process_start(pid) not in (None, start)


@dataclass
class Reclaimed:
    """What :func:`reclaim` removed (the directories) and what it could not."""

    directories: list[Path] = field(default_factory=list)
    worktrees: int = 0
    owners: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def line(self) -> str | None:
        """The one line that says what was reclaimed; None when nothing was."""
        if not self.directories:
            return None
        pids = ", ".join(str(p) for p in sorted(set(self.owners)))
        names = ", ".join(str(d) for d in self.directories)
        return (f"reclaimed what {len(self.directories)} killed run(s) of this repository left "
                f"(pid {pids}, gone): {self.worktrees} git worktree(s) removed, and {names}")


def _git(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=GIT_TIMEOUT_S, stdin=subprocess.DEVNULL)


def _listed(toplevel: Path) -> list[Path]:
    done = _git(["worktree", "list", "--porcelain"], toplevel)
    if done.returncode != 0:
        return []
    return [Path(line[len("worktree "):]) for line in done.stdout.splitlines()
            if line.startswith("worktree ")]


def _ours(directory: Path, toplevel: Path) -> dict[str, object] | None:
    """The marker of ``directory`` when it is one of ours for ``toplevel`` and its owner is gone."""
    if not directory.name.startswith(PREFIXES):
        return None
    owner = _owner(directory)
    if owner is None or owner.get("toplevel") != str(toplevel) or not owner_gone(owner):
        return None
    return owner


def reclaim(toplevel: Path, temp: Path | None = None) -> Reclaimed:
    """Remove the worktrees of ``toplevel`` and the temporary directories (in ``temp``, the
    system's by default) that killed runs left; never raises."""
    out = Reclaimed()
    toplevel = toplevel.resolve()
    found: dict[Path, list[Path]] = {}
    try:
        for tree in _listed(toplevel):
            if tree.parent.name.startswith(PREFIXES):
                found.setdefault(tree.parent, []).append(tree)
    except (OSError, subprocess.SubprocessError) as exc:
        out.problems.append(f"git worktree list in {toplevel}: {exc}")
    root = Path(temp or tempfile.gettempdir())
    try:
        for entry in root.iterdir():
            if entry.name.startswith(PREFIXES) and entry.is_dir():
                found.setdefault(entry, [])
    except OSError:
        pass
    pruned = False
    for directory in sorted(found):
        owner = _ours(directory, toplevel)
        if owner is None:
            continue
        for tree in found[directory]:
            try:
                done = _git(["worktree", "remove", "--force", str(tree)], toplevel)
                if done.returncode != 0 and tree.exists():
                    out.problems.append(f"git worktree remove {tree}: {done.stderr.strip()}")
                    continue
                out.worktrees += 1
            except (OSError, subprocess.SubprocessError) as exc:
                out.problems.append(f"git worktree remove {tree}: {exc}")
        shutil.rmtree(directory, ignore_errors=True)
        if directory.exists():
            out.problems.append(f"cannot remove {directory}")
            continue
        pruned = True
        out.directories.append(directory)
        pid = owner["pid"]
        assert isinstance(pid, int)
        out.owners.append(pid)
    if pruned:
        try:
            _git(["worktree", "prune"], toplevel)
        except (OSError, subprocess.SubprocessError) as exc:
            out.problems.append(f"git worktree prune in {toplevel}: {exc}")
    return out
