"""The bisection's git side (pytest_opperf.bisect.repo) and the command's usage errors, on tiny
throwaway repositories."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_opperf import cli
from pytest_opperf.bisect.repo import BisectUsage, Worktrees, dirty, history, selected_paths
from tests.bisect_repo import GIT_ENV, commit, git

ROOT = Path(__file__).parent.parent


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, list[str]]:
    """main: c0 - c1 - m (merging side: s1) - c3; test_x.py in every commit."""
    r = tmp_path / "repo"
    r.mkdir()
    git(r, "init", "-q", "-b", "main")
    (r / "test_x.py").write_text("def test_x():\n    pass\n")
    shas = [commit(r, "c0")]
    (r / "a.txt").write_text("1\n")
    shas.append(commit(r, "c1"))
    git(r, "checkout", "-q", "-b", "side")
    (r / "s.txt").write_text("side\n")
    side = commit(r, "s1")
    git(r, "checkout", "-q", "main")
    git(r, "merge", "-q", "--no-ff", "-m", "merge side", "side")
    shas.append(git(r, "rev-parse", "HEAD"))
    (r / "a.txt").write_text("2\n")
    shas.append(commit(r, "c3"))
    shas.append(side)
    return r, shas


def test_history_is_the_first_parent_line_good_first(repo):
    r, (c0, c1, m, c3, side) = repo
    commits = history(r, c0, "main")
    assert [c.sha for c in commits] == [c0, c1, m, c3]
    assert [c.subject for c in commits] == ["c0", "c1", "merge side", "c3"]
    assert commits[0].author == GIT_ENV["GIT_AUTHOR_NAME"] and commits[0].date[:2] == "20"


@pytest.mark.parametrize("good, bad, message", [
    ("nosuchrev", "main", "GOOD 'nosuchrev' is no revision of the repository"),
    ("main", "nosuchrev", "BAD 'nosuchrev' is no revision"),
    ("main", "main", "are the same commit"),
    ("main", "main~2", "is not an ancestor of BAD"),
    ("--help", "main", "is no revision"),
])
def test_bad_revisions_are_usage_errors(repo, good, bad, message):
    r, _ = repo
    with pytest.raises(BisectUsage, match=message):
        history(r, good, bad)


def test_good_off_the_first_parent_line_is_a_usage_error(repo):
    r, (_, _, _, _, side) = repo
    with pytest.raises(BisectUsage, match="not on the first-parent line"):
        history(r, side, "main")


def test_a_dirty_selection_is_found(repo):
    r, _ = repo
    assert selected_paths(["test_x.py::test_x", "-k", "x", "nosuch.py"], r) == ["test_x.py"]
    assert dirty(r, ["test_x.py"], r) == []
    (r / "test_x.py").write_text("def test_x():\n    assert 1\n")
    assert dirty(r, ["test_x.py"], r) == ["test_x.py"]
    (r / "sub").mkdir()
    (r / "sub" / "test_new.py").write_text("")
    assert dirty(r, ["sub"], r) == ["sub/test_new.py"]


def _worktrees(r: Path) -> list[str]:
    out = git(r, "worktree", "list", "--porcelain")
    return [line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("worktree ")]


def test_worktrees_are_removed_after_success_and_failure(repo):
    r, (c0, c1, *_) = repo
    with Worktrees(r) as trees:
        a, b = trees.checkout(c0), trees.checkout(c1)
        assert trees.checkout(c0) == a and (b / "a.txt").read_text() == "1\n"
        assert len(_worktrees(r)) == 3
    assert not trees.path.exists() and len(_worktrees(r)) == 1
    with pytest.raises(RuntimeError, match="boom"), Worktrees(r) as trees:
        trees.checkout(c1)
        raise RuntimeError("boom")
    assert not trees.path.exists() and _worktrees(r) == [str(r.resolve())]
    assert trees.close() == []  # idempotent


def test_sigterm_removes_the_worktrees(repo, tmp_path):
    r, (c0, c1, *_) = repo
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from pytest_opperf.bisect.command import _trapped\n"
        "from pytest_opperf.bisect.repo import Worktrees\n"
        f"with _trapped(), Worktrees(Path({str(r)!r})) as t:\n"
        f"    print(t.checkout({c0!r}), t.checkout({c1!r}), flush=True)\n"
        "    time.sleep(120)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    made = proc.stdout.readline().split()
    assert len(made) == 2 and all(Path(p).is_dir() for p in made)
    time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    assert "KeyboardInterrupt" in proc.stderr.read()
    assert not any(Path(p).exists() for p in made)
    assert _worktrees(r) == [str(r.resolve())]


@pytest.mark.parametrize("args, message", [
    (["HEAD~1", "HEAD"], "no selection"),
    (["HEAD~1", "HEAD", "--", "test_x.py", "--opperf-json=x.json"],
     "--opperf-json has no meaning in a bisection (use --json)"),
    (["HEAD~1", "HEAD", "--", "test_x.py", "--opperf-workload=huge"], "workload"),
    (["HEAD~1", "HEAD", "--", "test_x.py", "--opperf-instructions"],
     "--opperf-instructions has no meaning in a bisection"),
    (["HEAD~1", "HEAD", "--", "test_x.py", "--opperf-baseline", "b.json"],
     "--opperf-baseline has no meaning in a bisection"),
    (["HEAD~1", "HEAD", "--", "test_x.py", "--opperf-thresholds=nosuch.toml"], "nosuch.toml"),
    (["HEAD", "HEAD~1", "--", "test_x.py"], "is not an ancestor of BAD"),
    (["HEAD~1", "nosuch", "--", "test_x.py"], "BAD 'nosuch' is no revision"),
    (["HEAD~1", "HEAD", "--selection", "test_x.py '"], "--selection: No closing quotation"),
    (["HEAD~1", "HEAD", "--budget", "0", "--", "test_x.py"], "expected seconds"),
])
def test_usage_errors_exit_4_with_one_line(repo, monkeypatch, capsys, args, message):
    r, _ = repo
    monkeypatch.chdir(r)
    assert cli.main(["bisect", *args]) == 4
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


def test_a_dirty_selection_exits_4(repo, monkeypatch, capsys):
    r, _ = repo
    monkeypatch.chdir(r)
    (r / "test_x.py").write_text("def test_x():\n    assert 2\n")
    assert cli.main(["bisect", "HEAD~1", "HEAD", "--", "test_x.py", "-k", "x"]) == 4
    assert "the selection has changes not committed (test_x.py)" in capsys.readouterr().err


def test_the_selection_s_opperf_options_go_to_the_children(tmp_path):
    import argparse

    from pytest_opperf.bisect.command import _inputs

    thresholds = tmp_path / "t.toml"
    thresholds.write_text("[compare]\nmin_slowdown = 0.1\n")
    args = argparse.Namespace(selection=None, pytest_args=[
        "suites/test_ops.py", "-k", "conv2d and not grad", "--opperf", "--opperf-workload=tiny",
        "--opperf-count-steps", "0", f"--opperf-thresholds={thresholds}", "--opperf-l2-flush"])
    selection, fixed, loaded = _inputs(args)
    assert selection == ["suites/test_ops.py", "-k", "conv2d and not grad"]
    assert fixed["workload"] == "tiny" and fixed["count-steps"] == "0"
    assert fixed["l2-flush"] == "true" and fixed["device"] == "auto"
    assert loaded.compare.min_slowdown == 0.1
    args = argparse.Namespace(selection="suites/x.py -k 'a and b' --opperf-device=cpu",
                              pytest_args=[])
    selection, fixed, _ = _inputs(args)
    assert selection == ["suites/x.py", "-k", "a and b"] and fixed["device"] == "cpu"


def test_pooled_sessions_keep_their_process_pairs_apart_and_decide():
    from pytest_opperf.ab import decide
    from pytest_opperf.bisect.runner import pool
    from pytest_opperf.comparison.metrics import MetricKey
    from pytest_opperf.comparison.thresholds import CompareSettings

    key = MetricKey("t::a", "call_ms:op")
    sessions = []
    for bias in (1.08, 0.97):
        s = decide.SessionPairs()
        for g in (0, 1):
            for i in range(8):
                s.add(key, "time", 1.0, bias * (1 + 0.002 * (i % 3)), "base" if g == 0 else "head",
                      g)
        sessions.append(s)
    pooled = pool(sessions[0], None, sessions[1])
    assert pooled.generations_of(key) == [0] * 8 + [1] * 8 + [2] * 8 + [3] * 8
    (d,) = decide.final_decisions(pooled, CompareSettings())
    assert "4 generations' process pairs" in d.statistic  # two sessions' bias: widened


def test_a_session_s_environment_warning_reaches_the_report_once(tmp_path, monkeypatch):
    import types

    from pytest_opperf.ab.decide import SessionPairs
    from pytest_opperf.bisect import runner
    from pytest_opperf.bisect.repo import BisectCommit
    from pytest_opperf.comparison.thresholds import CompareSettings

    warning = ("the two sides load other compiled extensions from outside their checkouts: "
               "numpy._core._multiarray_umath (other bytes): an environment difference")

    class FakeController:
        def __init__(self, base, head, *args, **kwargs):
            self.warnings = [warning]
            self.sides = types.SimpleNamespace(ids={"base": ["t::a"], "head": ["t::a"]})
            self.samples, self.pairs, self.counted = SessionPairs(), 0, {}

        def start(self):
            return None, {"base": [], "head": []}

        def run(self):
            return None

        def close(self, grace_s):
            return None

    monkeypatch.setattr(runner, "Controller", FakeController)
    commits = [BisectCommit(c * 40, f"commit {c}", "Ann", "2026-01-01") for c in "abc"]
    trees = types.SimpleNamespace(checkout=lambda sha: tmp_path)
    oracle = runner.ABOracle(commits, trees, "", ["t.py"], {}, CompareSettings(), tmp_path,
                             tmp_path / "logs")
    oracle(0, 2, None, None)
    oracle(0, 1, None, None)
    assert oracle.warnings == [f"{'a' * 10} -> {'c' * 10}: {warning}"]


def test_a_shallow_clone_is_said_with_what_to_do(repo, tmp_path):
    r, (c0, *_) = repo
    shallow = tmp_path / "shallow"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{r}", str(shallow)],
                   check=True, capture_output=True)
    for good in ("HEAD~1", c0):
        with pytest.raises(BisectUsage, match=r"is no revision of the repository .*shallow clone.*"
                                              r": a bisection needs every commit from GOOD to "
                                              r"BAD: fetch them .*fetch-depth: 0.*git fetch "
                                              r"--unshallow`\)$"):
            history(shallow, good, "HEAD")
    subprocess.run(["git", "fetch", "-q", "--unshallow"], cwd=shallow, check=True,
                   capture_output=True)  # what the message says to do: then it bisects
    assert [c.sha for c in history(shallow, c0, "HEAD")] == [c.sha for c in history(r, c0, "HEAD")]
    with pytest.raises(BisectUsage) as full:
        history(r, "nosuchrev", "main")
    assert "shallow clone" not in str(full.value)
