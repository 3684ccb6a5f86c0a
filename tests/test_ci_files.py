"""The CI gate's files: thresholds with a reason for every value, and a CPU
baseline that matches the suites as they are."""

from __future__ import annotations

import re
from fnmatch import fnmatchcase
from pathlib import Path

from pytest_opperf.comparison.thresholds import load_thresholds
from pytest_opperf.records.reader import read_results
from reference_framework.benchmark import WORKLOADS
from suites.support import distinct_ops, training_program

CI = Path(__file__).parent.parent / "ci"


def test_every_threshold_says_why():
    lines = (CI / "thresholds.toml").read_text().splitlines()
    for i, line in enumerate(lines):
        if re.match(r"^\w+ = ", line) and not line.startswith("run = "):
            assert lines[i - 1].startswith("#") or lines[i - 1].startswith("run = "), (
                f"no reason above: {line}"
            )
        if line == "[[limit]]":
            assert lines[i + 1].startswith("#"), f"limit table {i + 1} has no reason"


def test_limits_reach_the_runs_they_are_for():
    t = load_thresholds(CI / "thresholds.toml")
    assert 0 < t.regression.max_slowdown < 1 and t.regression.counts == "exact"
    by_run = {lim.run: lim for lim in t.limits}
    small = next(
        lim
        for run, lim in by_run.items()
        if fnmatchcase("suites/test_resnet50.py::test_train[small]", run)
    )
    full = next(
        lim
        for run, lim in by_run.items()
        if fnmatchcase("suites/test_resnet50.py::test_train[full]", run)
    )
    assert small.max_python_share == 0.25 and full.min_examples_per_sec == 53.5
    assert not fnmatchcase("suites/test_resnet50.py::test_train[full]", small.run)


def test_the_cpu_baseline_covers_what_the_suites_run_now():
    base = read_results(CI / "baselines" / "cpu-small.json")
    assert (base.session["device_class"], base.session["workload"]) == ("cpu", "small")
    ids = {run.id for run in base.runs}
    assert {
        "suites/test_resnet50.py::test_train[small]",
        "suites/test_resnet50.py::test_train[small-no-overheads]",
        "suites/test_executor.py::test_program_clone",
        "suites/test_executor.py::test_create_ops",
        "suites/test_executor.py::test_local_scope_create_delete",
        "suites/test_executor.py::test_feed_fetch",
    } <= ids
    config = WORKLOADS["small"]
    cases = distinct_ops(training_program(config).main, config.batch_size)
    assert {i for i in ids if "test_ops.py" in i} == {
        f"suites/test_ops.py::test_op[{c.id}]" for c in cases
    }
    e2e = next(r for r in base.runs if r.id.endswith("test_train[small]"))
    assert e2e.counts["conv2d"] == 53 and e2e.counts["ExecutorRunTimer"] == 2
