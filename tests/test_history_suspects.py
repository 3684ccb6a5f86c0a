"""Suspected regressions: the push job's summary names the commit range of a step that held, and
nothing for an outlier (pure, on stored histories)."""

from __future__ import annotations

import io
import random

from pytest_opperf.cli import main
from pytest_opperf.history import suspects
from pytest_opperf.history.store import Store
from pytest_opperf.history.trends import build
from pytest_opperf.results import write_results
from tests.history_helpers import session


def _stamp(i: int) -> str:
    return f"2026-11-{1 + i // 24:02d}T{i % 24:02d}:00:00+00:00"


def _sha(i: int) -> str:
    return f"{i:02x}" + "0" * 38


def _history(tmp_path, levels):
    source = str(tmp_path / "h.sqlite")
    with Store(source, create=True) as store:
        for i, level in enumerate(levels):
            store.append(session(conv_ms=level, sha=_sha(i), created=_stamp(i)))
        return source, store.load()


def _noisy(levels, seed=0, spread=0.01):
    rng = random.Random(seed)
    return [v * (1 + rng.uniform(-spread, spread)) for v in levels]


def test_a_ten_percent_step_that_holds_names_its_commit_range(tmp_path):
    _, history = _history(tmp_path, _noisy([2.0] * 12 + [2.2] * 3))
    found = [s for s in suspects.find(build(history), last=10) if s.metric == "step_ms:conv2d"]
    (s,) = found
    assert (s.before, s.first) == (_sha(11)[:8], _sha(12)[:8])
    assert 0.08 < s.change < 0.12 and s.held == 3
    assert f"between {_sha(11)[:8]} and {_sha(12)[:8]}" in s.describe()


def test_a_step_seen_at_the_last_two_commits_already_counts(tmp_path):
    _, history = _history(tmp_path, _noisy([2.0] * 12 + [2.2] * 2, seed=1))
    assert [s.first for s in suspects.find(build(history)) if s.metric == "step_ms:conv2d"] == [
        _sha(12)[:8]]


def test_a_single_outlier_commit_names_nothing(tmp_path):
    levels = _noisy([2.0] * 14, seed=2)
    levels[9] = 2.6  # one bad commit, then back
    _, history = _history(tmp_path, levels)
    assert suspects.find(build(history)) == []
    levels[-1] = 2.6  # the newest commit alone: not held yet
    (tmp_path / "newest").mkdir()
    _, history = _history(tmp_path / "newest", levels)
    assert suspects.find(build(history)) == []


def test_improvements_and_old_steps_are_not_suspects(tmp_path):
    _, faster = _history(tmp_path, _noisy([2.0] * 8 + [1.6] * 4, seed=3))
    assert [s for s in suspects.find(build(faster)) if s.metric == "step_ms:conv2d"] == []
    (tmp_path / "old").mkdir()
    _, old = _history(tmp_path / "old", _noisy([2.0] * 4 + [2.4] * 16, seed=4))
    assert suspects.find(build(old), last=10) == []  # stepped 16 commits ago


def test_the_history_command_warns_and_appends_the_job_summary(tmp_path):
    files = []
    for i, level in enumerate(_noisy([2.0] * 10 + [2.3] * 3, seed=5)):
        path = tmp_path / f"r{i}.json"
        write_results(path, session(conv_ms=level, sha=_sha(i), created=_stamp(i)))
        files.append(str(path))
    source = str(tmp_path / "h.sqlite")
    assert main(["history", "import", *files, "--into", source], io.StringIO()) == 0
    summary = tmp_path / "summary.md"
    summary.write_text("# earlier steps\n")
    out = io.StringIO()
    assert main(["history", source, "--summary", str(summary)], out) == 0  # a warning, not red
    lines = out.getvalue().splitlines()
    assert any(line.startswith("warning: suspected regression: cpu / small: suite.py::test_train "
                               "step_ms:conv2d stepped +1") for line in lines)
    text = summary.read_text()
    assert text.startswith("# earlier steps\n## opperf history: suspected regressions")
    assert f"| {_sha(9)[:8]}..{_sha(10)[:8]} |" in text


def test_a_quiet_history_says_so(tmp_path):
    source, _ = _history(tmp_path, _noisy([2.0] * 12, seed=6))
    out = io.StringIO()
    summary = tmp_path / "s.md"
    assert main(["history", source, "--summary", str(summary)], out) == 0
    assert "suspected regressions in the last 10 commit(s): none" in out.getvalue()
    assert "No metric stepped for the worse in the last 10 commit(s)." in summary.read_text()
