"""Acceptance: the gate catches regressions injected into the tiny ResNet-50
training benchmark, against a baseline saved in the same test.

Each test saves a baseline of the unchanged code, runs again with one
regression injected (selected by an environment variable the inner suite
reads), and expects exit status 1 with an ``opperf gate`` section naming the
metric; unchanged code must pass (A/A).

The real framework runs (its program, executor, op counts and timers), but on
a virtual clock: every reading of the clock the timers and the measured window
use advances it by 1 us, a program clone costs 2 us per op, and an injected
slow op naps a fixed virtual time per call. Every time in the results follows
from the program alone, so the verdicts do not depend on how busy the machine
is; what these tests check is the gate's reading of the framework's stats,
not the machine's speed (the suites and ``benchmarks/`` measure that).
"""

from __future__ import annotations

import json

import pytest

from tests.opperf_suites import FAKE_CLOCK, inner_run_env  # noqa: F401

pytest_plugins = ["pytester"]

SUITE = FAKE_CLOCK + '''
import os

import reference_framework as rf
from reference_framework.benchmark import WORKLOADS, run_benchmark
from reference_framework.registry import get_op_def

INJECT = os.environ.get("OPPERF_INJECT", "")


@pytest.fixture(autouse=True)
def _costed_clone(monkeypatch):
    clone = rf.Program.clone

    def costed_clone(program, *args, **kwargs):
        nap(0.002 * sum(len(block.ops) for block in program.blocks))
        return clone(program, *args, **kwargs)

    monkeypatch.setattr(rf.Program, "clone", costed_clone)


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
                            lambda ins, attrs, ctx: (nap(0.05), relu(ins, attrs, ctx))[1])
    with opperf.measure(config=config.as_dict()) as run:
        run_benchmark(config, on_batch=lambda n: run.step(examples=n),
                      on_build=add_an_op_per_step if INJECT == "extra-op" else None)
'''

# On the virtual clock an unchanged run repeats its baseline exactly: the
# quiet, dedicated machine on which time against a stored baseline may gate
# (time = "gate"); the tolerances are the ones a user would start from. A relu call takes 1 us
# (one reading) and 51 us slowed; the clone of the tiny program is ~25 % of a
# step, so it shows in the Python share too.
THRESHOLDS = """
[regression]
time = "gate"
max_slowdown = 0.1
min_diff_ms = 0.05
max_python_share_increase = 0.02
counts = "exact"
"""


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.setenv("OPPERF_INJECT", "")
    pytester.makepyfile(test_tiny=SUITE)
    pytester.makefile(".toml", thresholds=THRESHOLDS)
    result = pytester.runpytest_subprocess("--opperf", "--opperf-save=baseline.json")
    assert result.ret == 0, result.stdout.str()
    return pytester


def check(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, inject: str = ""
) -> pytest.RunResult:
    monkeypatch.setenv("OPPERF_INJECT", inject)
    return pytester.runpytest_subprocess(
        "--opperf",
        "--opperf-baseline=baseline.json",
        "--opperf-thresholds=thresholds.toml",
        "--opperf-json=new.json",
    )


def violations(pytester: pytest.Pytester) -> dict[str, dict]:
    return {
        v["metric"]: v
        for v in json.loads((pytester.path / "new.json").read_text())["gate"]["violations"]
    }


def test_unchanged_code_passes(suite, monkeypatch):
    result = check(suite, monkeypatch)
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["gate: PASSED *"])
    assert "opperf gate" not in result.stdout.str()


def test_turning_the_program_clone_back_on_is_caught(suite, monkeypatch):
    result = check(suite, monkeypatch, "clone")
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        ["*= opperf gate =*", "FAIL test_tiny.py::test_train count:ProgramCloneTimer"]
    )
    found = violations(suite)
    assert found["count:ProgramCloneTimer"]["value"] > found["count:ProgramCloneTimer"]["baseline"]
    assert found["python_share"]["value"] > found["python_share"]["limit"]
    result.stdout.fnmatch_lines(["FAIL test_tiny.py::test_train python_share"])


def test_an_op_made_slower_is_flagged_by_name(suite, monkeypatch):
    result = check(suite, monkeypatch, "slow-relu")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*= opperf gate =*", "FAIL test_tiny.py::test_train step_ms:relu"])
    relu = violations(suite)["step_ms:relu"]
    assert relu["value"] > 2 * relu["baseline"]


def test_an_extra_op_per_step_is_a_count_change(suite, monkeypatch):
    result = check(suite, monkeypatch, "extra-op")
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        ["*= opperf gate =*", "FAIL test_tiny.py::test_train count:fill_zeros_like"]
    )
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
    result.stdout.fnmatch_lines(
        ["*= opperf gate =*", "FAIL test_tiny.py::test_train examples_per_sec"]
    )
    assert "examples_per_sec" in violations(suite)
