"""Synthetic suites in a temporary git repository for the A/B tests: a busy-loop op and an e2e loop.

The timed regions are busy loops (no sleeps: a sleeping side would not show
the lockstep). Every test may leave traces for the outer test in files named
by environment variables: ``AB_MARKS`` collects ``<side>+``/``<side>-``
around each piece of timed work, ``AB_WHERE`` the files the side imported
its framework and the plugin from, ``AB_PIDS`` one file per side process.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

SUITE = """
import os
import time

import reference_framework
from pytest_opperf import timers

N = {n}
STEPS = {steps}
SIDE = os.environ.get("OPPERF_AB_SIDE", "solo")


def mark(text):
    path = os.environ.get("AB_MARKS")
    if path:
        with open(path, "a") as f:
            f.write(f"{{SIDE}}{{text}}\\n")


def trace_side():
    pids = os.environ.get("AB_PIDS")
    if pids:
        open(os.path.join(pids, str(os.getpid())), "w").close()
    where = os.environ.get("AB_WHERE")
    if where:
        import pytest_opperf
        with open(os.path.join(where, SIDE), "w") as f:
            f.write(reference_framework.__file__ + "\\n")
            f.write(os.path.realpath(pytest_opperf.__file__) + "\\n")


def busy(n):
    x = 0
    for i in range(n):
        x += i
    return x


def test_op(opperf_benchmark):
    trace_side()
    opperf_benchmark.describe(stat="busy")

    def call():
        mark("+")
        busy(N)
        mark("-")

    opperf_benchmark(call)


def test_e2e(opperf):
    trace_side()
    with opperf.measure(config={{"batch": 4}}) as run:
        for step in range(STEPS):
            mark("+")
            {hook}
            with timers.timer("ExecutorRunTimer"):
                with timers.timer("relu", kernel=True):
                    busy(5 * N)
            busy(N)
            mark("-")
            run.step(examples=4)
    {after}
"""

FRAMEWORK = (
    '"""A stand-in for the framework under test: the side must import its own copy."""\n'
    'VERSION = "{version}"\n'
)


def suite(n: int = 3000, steps: int = 4, hook: str = "pass", after: str = "pass") -> str:
    """``after``: a statement after the window (a counting pass)."""
    return SUITE.format(n=n, steps=steps, hook=hook, after=after)


def git(cwd: Path, *args: str) -> str:
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t")
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def make_repo(root: Path, base: dict[str, str], head: dict[str, str] | None = None) -> str:
    """A git repository in ``root``: ``base`` committed (its sha returned), then ``head`` written
    over it in the working tree, uncommitted (the head is the working tree)."""
    files = {
        "pytest.ini": "[pytest]\n",
        "reference_framework/__init__.py": FRAMEWORK.format(version="base"),
    }
    write(root, {**files, **base})
    git(root, "init", "-q", ".")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "base")
    write(
        root, {"reference_framework/__init__.py": FRAMEWORK.format(version="head"), **(head or {})}
    )
    return git(root, "rev-parse", "HEAD")


def worktrees(root: Path) -> list[str]:
    return [
        line
        for line in git(root, "worktree", "list", "--porcelain").splitlines()
        if line.startswith("worktree ")
    ]


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting to be reaped does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return state not in ("Z", "X")
