"""Suspected regressions: the push job's summary names the commit range of a step that held, and
nothing for an outlier (pure, on stored histories)."""

from __future__ import annotations

import io
import random

import pytest

from pytest_opperf.cli import main
from pytest_opperf.history import suspects
from pytest_opperf.history.store import Store
from pytest_opperf.history.trends import build
from pytest_opperf.results import write_results
from tests.history_helpers import session, work


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


def _work_history(tmp_path, conv_bytecodes, pythons=None):
    conv_ms = _noisy([2.0] * len(conv_bytecodes), seed=7)
    source = str(tmp_path / "h.sqlite")
    with Store(source, create=True) as store:
        for i, (n, ms) in enumerate(zip(conv_bytecodes, conv_ms, strict=True)):
            counted = work(bytecodes=n)
            if pythons is not None:
                counted.versions["python"] = pythons[i]
            store.append(session(conv_ms=ms, sha=_sha(i), created=_stamp(i),
                                 work_counts=counted))
        return source, store.load()


def test_bytecodes_that_step_up_at_one_commit_are_a_suspect_with_its_range(tmp_path):
    # conv2d's self bytecodes 50,000 -> 51,000 at commit 12: the step's total 78,000 -> 79,000
    # (+1.3 %, under the times' 3 % floor); its time is steady
    _, history = _work_history(tmp_path, [50_000] * 12 + [51_000] * 3)
    found = {s.metric: s for s in suspects.find(build(history), last=10)}
    assert set(found) == {"bytecodes", "bytecodes:conv2d"}  # calls and the outside unchanged
    total = found["bytecodes"]
    assert (total.before, total.first, total.held) == (_sha(11)[:8], _sha(12)[:8], 3)
    assert (total.old, total.new) == (78_000, 79_000)
    assert total.change == pytest.approx(1_000 / 78_000)
    assert found["bytecodes:conv2d"].change == pytest.approx(0.02)
    assert total.describe() == (
        f"cpu / small: suite.py::test_train bytecodes stepped +1.3% between {_sha(11)[:8]} and "
        f"{_sha(12)[:8]} (78,000 -> 79,000, held for 3 commit(s))")
    assert total.versions is None  # counted with the same versions throughout
    assert f"| {_sha(11)[:8]}..{_sha(12)[:8]} | +1.3% | 78,000 | 79,000 |" in "\n".join(
        suspects.markdown_lines(list(found.values()), 10))


def test_less_work_and_a_one_commit_blip_are_no_suspects(tmp_path):
    _, fewer = _work_history(tmp_path, [50_000] * 10 + [45_000] * 4)
    assert suspects.find(build(fewer)) == []
    (tmp_path / "blip").mkdir()
    counts = [50_000] * 14
    counts[9] = 60_000
    _, blip = _work_history(tmp_path / "blip", counts)
    assert suspects.find(build(blip)) == []


def test_the_history_command_warns_of_a_work_step(tmp_path):
    source, _ = _work_history(tmp_path, [50_000] * 10 + [52_000] * 3)
    out = io.StringIO()
    assert main(["history", source, "--stat", "bytecodes"], out) == 0
    lines = [line for line in out.getvalue().splitlines() if line.startswith("warning:")]
    assert lines == [
        f"warning: suspected regression: cpu / small: suite.py::test_train bytecodes stepped "
        f"+2.6% between {_sha(9)[:8]} and {_sha(10)[:8]} (78,000 -> 80,000, held for 3 commit(s))"]


def test_a_work_step_with_a_new_python_says_so(tmp_path):
    # the step came with Python 3.12 (and an older Python at commit 3, long before it)
    pythons = ["3.11.9"] * 3 + ["3.11.8"] + ["3.11.9"] * 6 + ["3.12.1"] * 3
    _, history = _work_history(tmp_path, [50_000] * 10 + [52_000] * 3, pythons)
    found = {s.metric: s for s in suspects.find(build(history))}
    total = found["bytecodes"]
    assert total.versions == "python 3.11.9 -> 3.12.1"
    assert total.describe().endswith(
        "(78,000 -> 80,000, held for 3 commit(s); counted with other versions: "
        "python 3.11.9 -> 3.12.1)")
    # md_text escapes ">": the summary shows "->"
    assert ("| bytecodes (counted with other versions: python 3.11.9 -&gt; 3.12.1) | "
            f"{_sha(9)[:8]}..{_sha(10)[:8]} |") in "\n".join(suspects.markdown_lines([total], 10))
