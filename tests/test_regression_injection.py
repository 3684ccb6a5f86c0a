"""Acceptance: the gate catches regressions injected into the tiny ResNet-50
training benchmark, against a baseline saved in the same test.

Each test saves a baseline of the unchanged code, runs again with one
regression injected (selected by an environment variable the inner suite
reads), and expects exit status 1 with an ``opperf gate`` section naming the
metric; unchanged code must pass (A/A).

The inner runs are separate processes with single-threaded BLAS: on a busy
machine two BLAS threads wait for each other's cores, and those stalls are
larger than the regressions injected here.
"""

from __future__ import annotations

import json

import pytest

from tests.opperf_suites import inner_run_env  # noqa: F401

pytest_plugins = ["pytester"]

SUITE = '''
import os

from reference_framework.benchmark import WORKLOADS, run_benchmark
from reference_framework.registry import get_op_def

INJECT = os.environ.get("OPPERF_INJECT", "")


def add_an_op_per_step(main):
    block = main.global_block()
    block.create_var(name="extra", dtype="float32")
    block.append_op(type="fill_zeros_like", inputs={"X": [block.ops[-1].output_arg_names[0]]},
                    outputs={"Out": ["extra"]})


def test_train(opperf, monkeypatch):
    # The baseline runs with the program cache on (no clone per run).
    config = WORKLOADS["tiny"].replace(iterations=8, use_program_cache=INJECT != "clone")
    if INJECT == "slow-relu":
        relu = get_op_def("relu").kernel
        monkeypatch.setattr(get_op_def("relu"), "kernel",
                            lambda ins, attrs, ctx: [relu(ins, attrs, ctx) for _ in range(3)][-1])
    with opperf.measure(config=config.as_dict()) as run:
        run_benchmark(config, on_batch=lambda n: run.step(examples=n),
                      on_build=add_an_op_per_step if INJECT == "extra-op" else None)
'''

# The injected regressions are 3x; back-to-back runs on a busy machine differ
# by tens of percent on small stats, hence a wide relative tolerance and a 1 ms
# floor per step. Tiny steps take ~0.2 s, of which the program clone is ~1 %:
# a tight Python-share tolerance, so the clone shows in the share too.
THRESHOLDS = """
[regression]
max_slowdown = 0.5
min_diff_ms = 1.0
max_python_share_increase = 0.005
counts = "exact"
"""


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.setenv(var, "1")
    monkeypatch.setenv("OPPERF_INJECT", "")
    pytester.makepyfile(test_tiny=SUITE)
    pytester.makefile(".toml", thresholds=THRESHOLDS)
    result = pytester.runpytest_subprocess("--opperf", "--opperf-save=baseline.json")
    assert result.ret == 0, result.stdout.str()
    return pytester


def check(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, inject: str = "") -> pytest.RunResult:
    monkeypatch.setenv("OPPERF_INJECT", inject)
    return pytester.runpytest_subprocess("--opperf", "--opperf-baseline=baseline.json",
                                         "--opperf-thresholds=thresholds.toml", "--opperf-json=new.json")


def violations(pytester: pytest.Pytester) -> dict[str, dict]:
    return {v["metric"]: v for v in json.loads((pytester.path / "new.json").read_text())["gate"]["violations"]}


def test_unchanged_code_passes(suite, monkeypatch):
    result = check(suite, monkeypatch)
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["gate: PASSED *"])
    assert "opperf gate" not in result.stdout.str()


def test_turning_the_program_clone_back_on_is_caught(suite, monkeypatch):
    result = check(suite, monkeypatch, "clone")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*= opperf gate =*", "FAIL test_tiny.py::test_train count:ProgramCloneTimer:*"])
    found = violations(suite)
    assert found["count:ProgramCloneTimer"]["value"] > found["count:ProgramCloneTimer"]["baseline"]
    assert found["python_share"]["value"] > found["python_share"]["limit"]
    result.stdout.fnmatch_lines(["FAIL test_tiny.py::test_train python_share:*"])


def test_an_op_made_three_times_slower_is_flagged_by_name(suite, monkeypatch):
    result = check(suite, monkeypatch, "slow-relu")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*= opperf gate =*", "FAIL test_tiny.py::test_train step_ms:relu:*"])
    relu = violations(suite)["step_ms:relu"]
    assert relu["value"] > 2 * relu["baseline"]


def test_an_extra_op_per_step_is_a_count_change(suite, monkeypatch):
    result = check(suite, monkeypatch, "extra-op")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*= opperf gate =*", "FAIL test_tiny.py::test_train count:fill_zeros_like:*"])
    extra = violations(suite)["count:fill_zeros_like"]
    assert (extra["value"], extra["baseline"]) == (1, 0)


def test_a_baseline_with_three_times_the_throughput_fails_the_throughput_check(suite, monkeypatch):
    path = suite.path / "baseline.json"
    doc = json.loads(path.read_text())
    (run,) = doc["runs"]
    # Everything three times faster: throughput, wall and step times, every stat.
    run["examples_per_sec"] *= 3
    for key in ("wall_s", "sec_per_batch", "executor_ms", "kernel_ms"):
        run[key] /= 3
    run["step_ms"] = [ms / 3 for ms in run["step_ms"]]
    for stat in run["stats"]:
        for key in ("total_ms", "avg_ms", "min_ms", "max_ms"):
            stat[key] /= 3
        stat["samples_ms"] = [ms / 3 for ms in stat["samples_ms"]]
    path.write_text(json.dumps(doc))
    result = check(suite, monkeypatch)
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*= opperf gate =*", "FAIL test_tiny.py::test_train examples_per_sec:*"])
    assert "examples_per_sec" in violations(suite)
