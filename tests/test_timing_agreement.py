"""ci/timing_agreement.py: per-op medians of two results files, their ratio and agreement."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from pytest_opperf.results import ResultSet, write_results
from tests.opperf_factories import e2e_run, stat

SCRIPT = Path(__file__).parent.parent / "ci" / "timing_agreement.py"


def _op(run_id, samples, timing):
    run = e2e_run(run_id, stats={})
    run.kind, run.timing, run.stats = "op", timing, [stat("conv2d", samples)]
    return run


def test_events_and_sync_side_by_side(tmp_path):
    events = ResultSet(
        runs=[
            _op("ops::conv", [2.0, 2.0, 2.2], "events"),
            _op("ops::relu", [0.010] * 3, "events"),
            _op("ops::only-here", [1.0], "events"),
        ]
    )
    sync = ResultSet(
        runs=[_op("ops::conv", [2.05, 2.1, 2.0], "sync"), _op("ops::relu", [0.030] * 3, "sync")]
    )
    write_results(tmp_path / "e.json", events)
    write_results(tmp_path / "s.json", sync)
    result = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            str(tmp_path / "e.json"),
            str(tmp_path / "s.json"),
            "--markdown",
            str(tmp_path / "t.md"),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "| op | events ms | sync ms | ratio | within 5% |"
    assert lines[2] == "| ops::conv | 2.0000 | 2.0500 | 1.025 | yes |"
    assert lines[3] == "| ops::relu | 0.0100 | 0.0300 | 3.000 | no |"
    assert lines[-1] == "1 of 2 ops agree within 5% (99.5% of the events time)"
    assert (tmp_path / "t.md").read_text().startswith("## events against sync, per op")


def test_files_without_common_ops_and_bad_files(tmp_path):
    write_results(tmp_path / "e.json", ResultSet(runs=[_op("a", [1.0], "events")]))
    write_results(tmp_path / "s.json", ResultSet(runs=[_op("b", [1.0], "sync")]))
    run = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path / "e.json"), str(tmp_path / "s.json")],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 3 and "no per-op run in both" in run.stderr
    (tmp_path / "bad.json").write_text("{")
    run = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path / "bad.json"), str(tmp_path / "s.json")],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 2 and "not valid JSON" in run.stderr
