"""One real bisection, end to end: a throwaway repository made from the project (six commits,
one of which breaks the framework's import and one slows conv2d fourfold), one conv2d test at the
tiny workload, real A/B steps. About 30-60 s; the acceptance runs (10 % slower, N = 16 and 64,
A/A) are benchmarks/bisect_acceptance.py's."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import jsonschema

from tests.bisect_repo import git, make

ROOT = Path(__file__).parent.parent
SELECTION = ["suites/test_ops.py", "-k", "conv2d-N4xC512x1x1-k1s1p0-o2048",
             "--opperf-workload=tiny"]


def test_a_real_bisection_names_and_verifies_the_culprit_and_skips_a_broken_commit(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    shas = make(repo, ["-", "break", "fix", 4.0, "-"])
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "GITHUB_", "OPPERF_"))}
    env["PYTHONPATH"] = str(ROOT)  # the release under test; the repository holds a copy too
    out_json = tmp_path / "bisect.json"
    done = subprocess.run(
        [sys.executable, "-m", "pytest_opperf", "bisect", shas[0], shas[-1], "--budget", "300",
         "--json", str(out_json), "--markdown", str(tmp_path / "bisect.md"), "--", *SELECTION],
        cwd=repo, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert f"culprit: {shas[4]} [4/5] 'conv2d 4x as slow' (Ann Author, " in done.stdout
    assert any(" skipped: " in line and shas[2][:10] in line for line in lines), done.stdout
    starts = [line for line in lines if " starts: " in line]
    ends = [line for line in lines if " ends: " in line]
    assert starts and len(starts) == len(ends)
    doc = json.loads(out_json.read_text())
    schema = ROOT / "pytest_opperf" / "schema" / "opperf-bisect-1.schema.json"
    jsonschema.validate(doc, json.loads(schema.read_text()))
    assert [c["position"] for c in doc["culprits"]] == [4] and doc["culprits"][0]["verified"]
    assert [s["position"] for s in doc["skipped"]] == [2]
    assert doc["exit_status"] == 0 and doc["ab_steps"] == len(doc["steps"]) <= 8
    assert "```text" in (tmp_path / "bisect.md").read_text()
    # nothing left behind: no worktree, no temporary directory
    assert git(repo, "worktree", "list").count("\n") == 0
    assert not any(Path(line.split()[0]).name.startswith("opperf-bisect-")
                   for line in git(repo, "worktree", "list", "--porcelain").splitlines()
                   if line.startswith("worktree "))


def _running_in(directory: Path) -> list[int]:
    """This user's processes whose working directory is under ``directory``."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cwd = os.readlink(proc / "cwd")
        except OSError:
            continue
        if cwd.startswith(str(directory)):
            found.append(int(proc.name))
    return found


def test_sigterm_in_a_step_leaves_no_worktree_and_no_process(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    shas = make(repo, ["-", 4.0])
    scratch = tmp_path / "scratch"  # the bisection's temporary directory goes here
    scratch.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "GITHUB_", "OPPERF_"))}
    env.update(PYTHONPATH=str(ROOT), TMPDIR=str(scratch))
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest_opperf", "bisect", shas[0], shas[-1], "--", *SELECTION],
        cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        while " starts: " not in (line := proc.stdout.readline()):
            assert line, proc.stderr.read() if proc.stderr else ""
        deadline = time.monotonic() + 60
        while len(_running_in(scratch)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)  # both sides started in their worktrees
        assert len(_running_in(scratch)) >= 2
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 2
    assert "interrupted" in (proc.stderr.read() if proc.stderr else "")
    assert _running_in(scratch) == [] and list(scratch.iterdir()) == []
    assert git(repo, "worktree", "list").count("\n") == 0


def test_a_killed_bisections_worktrees_are_reclaimed_by_the_next_run(tmp_path):
    """SIGKILL leaves a bisection's two worktrees and their directory; the next bisection of the
    repository removes them and says so in one line."""
    repo = tmp_path / "repo"
    repo.mkdir()
    shas = make(repo, ["-", 4.0])
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "GITHUB_", "OPPERF_"))}
    env.update(PYTHONPATH=str(ROOT), TMPDIR=str(scratch))
    command = [sys.executable, "-m", "pytest_opperf", "bisect"]
    proc = subprocess.Popen([*command, shas[0], shas[-1], "--", *SELECTION], cwd=repo, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        while " starts: " not in (line := proc.stdout.readline()):
            assert line, "the bisection ended before its first step"
        deadline = time.monotonic() + 60
        while len(_running_in(scratch)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        proc.kill()  # SIGKILL: no cleanup runs
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    deadline = time.monotonic() + 60
    while _running_in(scratch) and time.monotonic() < deadline:
        time.sleep(0.1)  # the sides end when their controller's socket closes
    for pid in _running_in(scratch):
        os.kill(pid, signal.SIGKILL)
    (killed,) = scratch.glob("opperf-bisect-*")
    assert git(repo, "worktree", "list").count("\n") == 2  # the main one and two left behind
    # the next bisection (here one that stops at its input: BAD before GOOD) reclaims them
    done = subprocess.run([*command, shas[-1], shas[0], "--", *SELECTION], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 4, done.stdout + done.stderr
    first, *rest = done.stderr.splitlines()
    assert first == (f"bisect: reclaimed what 1 killed run(s) of this repository left (pid "
                     f"{proc.pid}, gone): 2 git worktree(s) removed, and {killed}")
    assert rest and "is not an ancestor of BAD" in rest[-1]
    assert git(repo, "worktree", "list").count("\n") == 0
    assert not killed.exists() and list(scratch.iterdir()) == []
