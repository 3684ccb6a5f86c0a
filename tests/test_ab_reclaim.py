"""Worktrees that killed runs left (pytest_opperf.ab.reclaim): ours whose owner is gone are
removed; one not ours, whose owner runs, or of another machine, stays."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_opperf.ab.reclaim import OWNER, mark, owner_gone, process_start, reclaim
from tests.ab_suites import git, make_repo, worktrees


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "repo"
    root.mkdir()
    make_repo(root, {"test_a.py": "def test_a():\n    pass\n"})
    temp = tmp_path / "tmp"
    temp.mkdir()
    return root.resolve(), temp


def _checkout(root: Path, temp: Path, name: str, owner: dict | None) -> Path:
    directory = temp / name
    directory.mkdir()
    if owner is not None:
        (directory / OWNER).write_text(json.dumps({"toplevel": str(root),
                                                   "host": socket.gethostname(), **owner}))
    git(root, "worktree", "add", "--detach", str(directory / "base"), "HEAD")
    return directory


def _ended_pid() -> int:
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    return done.pid


def test_only_ours_whose_owner_is_gone_are_reclaimed(repo):
    root, temp = repo
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as live:
        try:
            dead = _ended_pid()
            killed = _checkout(root, temp, "opperf-ab-killed", {"pid": dead, "start": "1"})
            reused = _checkout(root, temp, "opperf-bisect-reused",  # the pid lives, another start
                               {"pid": live.pid, "start": "not-its-start"})
            running = _checkout(root, temp, "opperf-ab-running",
                                {"pid": live.pid, "start": process_start(live.pid)})
            unmarked = _checkout(root, temp, "opperf-ab-unmarked", None)
            other = _checkout(root, temp, "elsewhere", {"pid": dead, "start": "1"})
            before = mark_dir = temp / "opperf-ab-nothing-added"  # killed before worktree add
            mark_dir.mkdir()
            (mark_dir / OWNER).write_text(json.dumps({"toplevel": str(root), "pid": dead,
                                                      "host": socket.gethostname()}))
            # a shared temporary directory: another machine's pid says nothing here
            remote = _checkout(root, temp, "opperf-ab-remote",
                               {"pid": dead, "start": "1", "host": socket.gethostname() + "-x"})
            hostless = _checkout(root, temp, "opperf-ab-hostless", {"pid": dead, "host": None})
            assert len(worktrees(root)) == 8
            done = reclaim(root, temp)
            assert done.problems == []
            assert sorted(done.directories) == sorted([killed, reused, before])
            assert done.worktrees == 2 and done.owners.count(dead) == 2
            line = done.line()
            assert line is not None and line.startswith("reclaimed what 3 killed run(s) of this "
                                                        "repository left (pid ")
            assert "2 git worktree(s) removed" in line and str(killed) in line
            assert not killed.exists() and not reused.exists() and not before.exists()
            assert running.exists() and unmarked.exists() and other.exists() and remote.exists()
            left = {Path(w.split(" ", 1)[1]).parent for w in worktrees(root)[1:]}
            assert left == {running, unmarked, other, remote, hostless}
            assert reclaim(root, temp).line() is None  # nothing more
        finally:
            live.kill()


def test_another_repositorys_and_our_own_are_left_alone(repo, tmp_path):
    root, temp = repo
    other = tmp_path / "other"
    other.mkdir()
    make_repo(other, {"test_a.py": "def test_a():\n    pass\n"})
    theirs = _checkout(other.resolve(), temp, "opperf-ab-theirs", {"pid": _ended_pid()})
    mine = temp / "opperf-ab-mine"
    mine.mkdir()
    mark(mine, root)
    assert json.loads((mine / OWNER).read_text())["pid"] == os.getpid()
    assert json.loads((mine / OWNER).read_text())["host"] == socket.gethostname()
    assert not owner_gone(json.loads((mine / OWNER).read_text()))
    assert reclaim(root, temp).directories == []
    assert theirs.exists() and mine.exists() and len(worktrees(other)) == 2
