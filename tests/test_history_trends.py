"""Change points, trends over commits and the history command (pure modules and the CLI)."""

from __future__ import annotations

import io
import json
import math

import pytest

from pytest_opperf.cli import main
from pytest_opperf.history.changepoints import detect
from pytest_opperf.history.store import Store
from pytest_opperf.history.trends import build, find_changes
from pytest_opperf.results import write_results
from tests.history_helpers import session, work

# deterministic noise of +-2 %: no RNG, so nothing depends on a platform
WIGGLE = [1.0, 1.02, 0.99, 1.01, 0.98, 1.0, 1.015, 0.985, 1.005, 0.995]


def noisy(level: float, n: int, phase: int = 0) -> list[float]:
    return [level * WIGGLE[(i + phase) % len(WIGGLE)] for i in range(n)]


def test_a_step_is_found_at_its_commit_with_its_size():
    values = noisy(10.0, 30) + noisy(12.5, 20, phase=3)
    (cp,) = detect(values)
    assert cp.index == 30
    assert cp.before == pytest.approx(10.0, rel=0.01) and cp.after == pytest.approx(12.5, rel=0.01)
    assert cp.change == pytest.approx(0.25, abs=0.02)


def test_a_flat_noisy_series_has_no_change_point():
    assert detect(noisy(3.0, 60)) == []
    assert detect([5.0] * 40) == []


def test_an_outlier_is_not_a_step_and_two_steps_are_two():
    assert detect(noisy(1.0, 20) + [4.0] + noisy(1.0, 20)) == []
    steps = detect(noisy(1.0, 15) + noisy(0.8, 15) + noisy(1.1, 15))
    assert [c.index for c in steps] == [15, 30]
    assert steps[0].change < -0.15 and steps[1].change > 0.3


def test_steps_below_min_change_are_dropped():
    values = [1.0] * 10 + [1.01] * 10  # 1 %: real in a noiseless series, but below the 3 % default
    assert detect(values) == []
    assert [c.index for c in detect(values, min_change=0.005)] == [10]


def test_a_step_needs_min_size_points_to_show():
    assert detect([2.0] * 10 + [3.0] * 2) == []
    assert [c.index for c in detect([2.0] * 10 + [3.0] * 3)] == [10]


def test_shares_and_zeros_are_fitted_on_their_scale():
    first, second = detect([0.0] * 5 + [0.1] * 10 + [0.2] * 10)  # not all positive: no log scale
    assert (first.index, second.index) == (5, 15)
    assert math.isinf(first.ratio) and second.ratio == pytest.approx(2.0)


def _stamp(i: int) -> str:
    return f"2026-11-{1 + i // 24:02d}T{i % 24:02d}:00:00+00:00"


def _sha(i: int) -> str:
    return f"{i:02x}" + "0" * 38


def test_trends_group_by_hardware_and_merge_the_sessions_of_a_commit(tmp_path):
    source = str(tmp_path / "h.sqlite")
    with Store(source, create=True) as store:
        store.append(session(conv_ms=2.0, sha="1" * 40, created=_stamp(0)))
        store.append(
            session(conv_ms=4.0, sha="1" * 40, created=_stamp(1))
        )  # same commit: median 3.0
        store.append(
            session(conv_ms=9.0, sha="1" * 40, dirty=True, created=_stamp(2))
        )  # a point of its own
        store.append(session(conv_ms=5.0, sha="2" * 40, created=_stamp(3)))
        store.append(
            session(conv_ms=7.0, sha="2" * 40, created=_stamp(4), device_class="nvidia-h200")
        )
        history = store.load()
    cpu, gpu = build(history)
    assert (cpu.device_class, gpu.device_class) == ("cpu", "nvidia-h200")
    assert [c.label for c in cpu.commits] == ["11111111", "11111111*", "22222222"]
    conv = next(s for s in cpu.series if s.metric == "step_ms:conv2d")
    assert conv.values == [3.0, 9.0, 5.0]
    assert [s.values for s in gpu.series if s.metric == "step_ms:conv2d"] == [[7.0]]
    metrics = {s.metric for s in cpu.series}
    assert {
        "examples_per_sec",
        "python_share",
        "step_ms:conv2d",
        "step_ms:relu",
        "call_ms:conv2d",
    } <= metrics


def run_cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


def test_history_import_then_trends_with_the_commit_of_the_step(tmp_path):
    files = []
    for i, level in enumerate([2.0] * 8 + [2.6] * 4):
        path = tmp_path / f"r{i}.json"
        write_results(path, session(conv_ms=level, sha=_sha(i), created=_stamp(i)))
        files.append(str(path))
    doc = json.loads((tmp_path / "r11.json").read_text())
    doc["compare"] = {"summary": "0 regressed"}
    (tmp_path / "r11.json").write_text(json.dumps(doc))
    source = str(tmp_path / "h.sqlite")
    code, out, err = run_cli("history", "import", *files, "--into", source)
    assert code == 0 and not err, err
    assert out.splitlines()[0] == f"{files[0]}: stored as session 1 (2 runs)"
    code, out, _ = run_cli("history", "import", files[0], "--into", source)
    assert code == 0 and out == f"{files[0]}: already in the history, skipped\n"

    code, out, err = run_cli("history", source, "--stat", "conv2d", "--last", "6")
    assert code == 0 and not err
    lines = out.splitlines()
    assert lines[0] == f"history {source}: 12 session(s) in 1 group(s) (device class / workload)"
    step = _sha(8)[:8]
    row = next(
        line
        for line in lines
        if "step_ms:conv2d" in line and line.startswith("suite.py::test_train")
    )
    assert row.split()[2:] == ["2", "2", "2.6*", "2.6", "2.6", "2.6"]
    assert (
        f"  suite.py::test_train step_ms:conv2d: stepped at {step} ({_stamp(8)}): "
        "2 -> 2.6 (+30.0%, worse)"
        in lines
    )
    assert "examples_per_sec" not in out  # --stat selects
    code, out, _ = run_cli("history", source, "--run", "*test_op*", "--stat", "*")
    assert "call_ms:conv2d" in out and "test_train" not in out.split("trend over")[1]
    code, out, _ = run_cli("history", source)
    assert "examples_per_sec" in out and "stepped at" in out and "yes" in out  # the A/B column


@pytest.mark.parametrize("argv, message", [
    (["history", "import", "x.json"], "history import: expected FILE.json... --into SOURCE"),
    (["history", "h.sqlite", "x.json"], "unexpected arguments x.json"),
    (["history", "h.sqlite", "--last", "0"], "--last: expected a positive integer, got '0'"),
    (["history", "missing.sqlite"], "missing.sqlite: no such file"),
    (["dashboard", "missing.sqlite", "--out", "d"], "missing.sqlite: no such file"),
    (["history", "import", "nope.json", "--into", "h.sqlite"], "nope.json: no such file"),
])
def test_usage_errors_are_one_line_and_exit_4(tmp_path, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(*argv)
    assert code == 4 and not out
    assert err.count("\n") == 1 and err.startswith("error: ") and message in err
    assert not (tmp_path / "h.sqlite").exists()


def test_a_bad_file_stores_nothing_of_an_import(tmp_path):
    good = tmp_path / "good.json"
    write_results(good, session())
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "opperf/9", "runs": []}')
    code, _, err = run_cli(
        "history", "import", str(good), str(bad), "--into", str(tmp_path / "h.sqlite")
    )
    assert code == 4 and "unknown results schema 'opperf/9'" in err
    assert not (tmp_path / "h.sqlite").exists()


def _work_history(tmp_path, conv_bytecodes, instructions=None):
    """Results files of one commit each (conv2d's time steady), imported into a history."""
    files = []
    for i, n in enumerate(conv_bytecodes):
        path = tmp_path / f"w{i}.json"
        counted = work(bytecodes=n, instructions=None if instructions is None else instructions[i])
        write_results(path, session(conv_ms=2.0, sha=_sha(i), created=_stamp(i),
                                    work_counts=counted))
        files.append(str(path))
    source = str(tmp_path / "h.sqlite")
    code, _, err = run_cli("history", "import", *files, "--into", source)
    assert code == 0, err
    return source


def test_work_counts_are_series_with_their_change_points(tmp_path):
    # conv2d's self bytecodes step from 50,000 to 53,000 at commit 10: the step's total from
    # 78,000 (with relu's 20,000 and 8,000 outside) to 81,000; calls unchanged
    source = _work_history(tmp_path, [50_000] * 10 + [53_000] * 4,
                           instructions=[4_000_000] * 10 + [4_100_000] * 4)
    with Store(source) as store:
        (group,) = build(store.load())
    by_metric = {s.metric: s for s in group.series if s.run == "suite.py::test_train"}
    assert by_metric["bytecodes"].values == [78_000] * 10 + [81_000] * 4
    assert by_metric["py_calls"].values == [1_750] * 14 and by_metric["py_calls"].changes == []
    assert by_metric["c_calls"].values == [960] * 14
    assert by_metric["bytecodes:(outside)"].values == [8_000] * 14
    assert by_metric["bytecodes:conv2d"].values == [50_000] * 10 + [53_000] * 4
    assert by_metric["instructions"].values == [4_000_000] * 10 + [4_100_000] * 4
    for metric, (before, after) in {"bytecodes": (78_000, 81_000),
                                    "bytecodes:conv2d": (50_000, 53_000),
                                    "instructions": (4_000_000, 4_100_000)}.items():
        (cp,) = by_metric[metric].changes
        assert (cp.index, cp.before, cp.after) == (10, before, after), metric
    assert "step_ms:conv2d" in by_metric and by_metric["step_ms:conv2d"].changes == []


def test_a_small_step_of_a_work_count_is_found_where_time_would_hide_it():
    # 0.5 %: below the 3 % floor of times, but an exact count that changed is work that was added
    values = [78_000.0] * 10 + [78_400.0] * 4
    assert detect(values) == []
    (cp,) = find_changes("bytecodes", values)
    assert (cp.index, cp.before, cp.after) == (10, 78_000, 78_400)
    assert find_changes("step_ms:conv2d", values) == []
    assert find_changes("bytecodes", [78_000.0] * 14) == []


def test_the_listing_shows_the_work_per_step_after_the_times(tmp_path):
    source = _work_history(tmp_path, [50_000] * 10 + [53_000] * 4,
                           instructions=[9_000_000] * 14)
    code, out, err = run_cli("history", source, "--last", "5")
    assert code == 0 and not err
    lines = out.splitlines()
    rows = [line.split() for line in lines if line.startswith("suite.py::test_train ")]
    metrics = [row[1] for row in rows]
    assert metrics == ["examples_per_sec", "python_share", "window_examples_per_sec",
                       "window_python_share", "step_ms:conv2d", "step_ms:relu",
                       "bytecodes", "py_calls", "c_calls", "instructions", "bytecodes:(outside)"]
    assert rows[6][2:] == ["78,000"] + ["81,000*"] + ["81,000"] * 3  # counts in full
    assert rows[9][2:] == ["9,000,000"] * 5 and rows[10][2:] == ["8,000"] * 5
    assert ("  suite.py::test_train bytecodes: stepped at "
            f"{_sha(10)[:8]} ({_stamp(10)}): 78,000 -> 81,000 (+3.8%, worse)") in lines
    assert "work counts per step" in out  # the table says what its numbers are

    code, out, _ = run_cli("history", source, "--stat", "conv2d", "--last", "5")
    metrics = [line.split()[1] for line in out.splitlines()
               if line.startswith("suite.py::test_train ")]
    assert metrics == ["step_ms:conv2d", "bytecodes:conv2d"]  # a stat's own work, on request
    code, out, _ = run_cli("history", source, "--stat", "bytecodes", "--last", "5")
    assert [line.split()[1] for line in out.splitlines()
            if line.startswith("suite.py::test_train ")] == ["bytecodes"]


def test_a_history_without_instructions_lists_none(tmp_path):
    source = _work_history(tmp_path, [50_000] * 6)
    code, out, _ = run_cli("history", source)
    metrics = [line.split()[1] for line in out.splitlines()
               if line.startswith("suite.py::test_train ")]
    assert code == 0 and metrics[-4:] == ["bytecodes", "py_calls", "c_calls",
                                          "bytecodes:(outside)"]
