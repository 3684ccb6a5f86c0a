"""A synthetic suite of sleeps through the plugin: counts, parents, shares, JSON, hooks, device
clocks."""

import json

import pytest

from tests.opperf_suites import e2e, inner_run_env  # noqa: F401

pytest_plugins = ["pytester"]


def run_json(pytester, *args):
    result = pytester.runpytest("--opperf", "--opperf-json=out.json", *args)
    data = (
        json.loads((pytester.path / "out.json").read_text())
        if (pytester.path / "out.json").exists()
        else None
    )
    return result, data


def test_synthetic_suite_counts_parents_shares_and_json(pytester):
    pytester.makepyfile(test_suite=e2e(steps=8, relu_ms=1.0, python_ms=3.0))
    result, data = run_json(pytester)
    result.assert_outcomes(passed=1)
    assert data["schema"] == "opperf/1"
    (run,) = data["runs"]
    assert run["id"] == "test_suite.py::test_train"
    assert (run["kind"], run["config"], run["device"], run["timing"]) == (
        "e2e",
        {"batch": 4},
        "cpu",
        "host",
    )
    assert (run["examples"], run["batches"]) == (32, 8)
    assert run["examples_per_sec"] == pytest.approx(32 / run["wall_s"])
    assert run["sec_per_batch"] == pytest.approx(run["wall_s"] / 8)
    stats = {s["name"]: s for s in run["stats"]}
    assert {n: s["count"] for n, s in stats.items()} == {
        "ExecutorRunTimer": 8, "CreateOpTimer": 8, "conv2d": 8, "conv2d/Im2ColTimer": 8, "relu": 8}
    assert {n: s["parent"] for n, s in stats.items()} == {
        "ExecutorRunTimer": None, "CreateOpTimer": "ExecutorRunTimer", "conv2d": "ExecutorRunTimer",
        "conv2d/Im2ColTimer": "conv2d", "relu": "ExecutorRunTimer"}
    assert run["counts"] == {name: 1 for name in stats}
    for s in stats.values():
        assert len(s["samples_ms"]) == 8
        assert sum(s["samples_ms"]) == pytest.approx(
            s["total_ms"], rel=1e-4
        )  # samples stored to 5 digits
        assert s["min_ms"] <= s["avg_ms"] <= s["max_ms"]
    # sleeps: 1 ms im2col inside a 2 ms conv2d, 1 ms relu; 3 ms of "Python" per step
    assert 1.0 <= stats["conv2d/Im2ColTimer"]["avg_ms"] < stats["conv2d"]["avg_ms"]
    assert 2.0 <= stats["conv2d"]["avg_ms"] < 3.5 and 1.0 <= stats["relu"]["avg_ms"] < 2.5
    assert stats["conv2d"]["flops"] == 8 * 4e6 and stats["conv2d"]["bytes"] == 8 * 1e6
    wall_ms = run["wall_s"] * 1e3
    executor = stats["ExecutorRunTimer"]["total_ms"]
    kernels = (
        stats["conv2d"]["total_ms"] + stats["relu"]["total_ms"]
    )  # Im2ColTimer is inside conv2d
    assert run["executor_ms"] == pytest.approx(executor) and run["kernel_ms"] == pytest.approx(
        kernels
    )
    assert run["python_share"] == pytest.approx((wall_ms - executor) / wall_ms)
    assert run["kernel_share"] == pytest.approx(kernels / wall_ms)
    assert run["framework_share"] == pytest.approx((executor - kernels) / wall_ms)
    # a fake clock: 2 ms of model building + 8 steps of 3 ms executor and 3 ms Python = 50 ms
    assert run["python_share"] == pytest.approx(26 / 50, abs=0.005)
    assert run["kernel_share"] == pytest.approx(24 / 50, abs=0.005)
    assert run["framework_share"] < 0.05
    assert (
        len(run["step_ms"]) == 8 and run["step_ms"][0] > run["step_ms"][1]
    )  # startup is in step 1
    assert data["gate"]["passed"] is True
    assert data["session"] == {
        "device": "cpu",
        "device_class": "cpu",
        "workload": "small",
        "timing": "host",
    }
    assert data["machine"]["cores"] >= 1 and data["machine"]["device_class"] == "cpu"
    # and the terminal report says the same
    result.stdout.fnmatch_lines(
        [
            "*= opperf =*",
            "session: device=cpu timing=host workload=small",
            "",
            "test_suite.py::test_train  device=cpu timing=host",
            "Total examples: 32, total time: *",
            "* examples/sec, * sec/batch",
            "unit: ms",
            "name * total * avg * max * min * count * share * GFLOP/s * GB/s",
            "ExecutorRunTimer *",
            "conv2d * 8 *%*",
            "  Im2ColTimer * 8",
            "relu * 8 *%*",
            "CreateOpTimer *",
            "Python *% | framework overhead *% | kernels *% of wall time",
            "",
            "gate: PASSED (0 checks; no baseline, no thresholds)",
        ]
    )


def test_several_windows_in_one_test(pytester):
    pytester.makepyfile("""
        from pytest_opperf import timers
        def test_x(opperf):
            for name in (None, None, "eval"):
                with opperf.measure(name=name) as run:
                    with timers.timer("op", kernel=True):
                        pass
                    run.step(examples=1)
    """)
    _, data = run_json(pytester)
    assert [r["id"] for r in data["runs"]] == [
        "test_several_windows_in_one_test.py::test_x",
        "test_several_windows_in_one_test.py::test_x#2",
        "test_several_windows_in_one_test.py::test_x#eval",
    ]


def test_varying_step_counts_warn_and_keep_the_most_common(pytester):
    pytester.makepyfile("""
        from pytest_opperf import timers
        def test_x(opperf):
            with opperf.measure() as run:
                for i in range(6):
                    for _ in range(3 if i == 4 else 2):
                        with timers.timer("relu", kernel=True):
                            pass
                    run.step(examples=1)
            assert run.result.counts == {"relu": 2}
    """)
    result, data = run_json(pytester)
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(
        ["*OpPerfStepCountWarning: test_varying*per-step count of relu varies (2..3)*"]
    )
    assert any("per-step count of relu varies" in note for note in data["runs"][0]["notes"])


def test_first_step_is_warm_up_for_counts(pytester):
    pytester.makepyfile("""
        from pytest_opperf import timers
        def test_x(opperf):
            with opperf.measure() as run:
                with timers.timer("gaussian_random", kernel=True):  # startup program, step 1 only
                    pass
                for i in range(3):
                    with timers.timer("relu", kernel=True):
                        pass
                    run.step(examples=1)
    """)
    result, data = run_json(pytester)
    result.assert_outcomes(passed=1)
    assert data["runs"][0]["counts"] == {"relu": 1}


def test_failing_window_records_nothing(pytester):
    pytester.makepyfile("""
        def test_x(opperf):
            with opperf.measure() as run:
                run.step(examples=1)
                raise RuntimeError("boom")
    """)
    result, data = run_json(pytester)
    result.assert_outcomes(failed=1)
    assert data["runs"] == []


def test_run_result_is_available_to_the_suite(pytester):
    pytester.makepyfile("""
        from pytest_opperf import measure, timers
        NOW = [0]
        def clock():
            NOW[0] += 1000
            return NOW[0]
        def test_x(opperf, monkeypatch):
            monkeypatch.setattr(timers, "perf_counter_ns", clock)
            monkeypatch.setattr(measure, "perf_counter_ns", clock)
            assert opperf.enabled
            with opperf.measure(config={"w": 1}) as run:
                for _ in range(3):
                    with timers.timer("ExecutorRunTimer"):
                        NOW[0] += 2_000_000
                    run.step(examples=8)
            r = run.result
            assert (r.examples, r.batches, r.config) == (24, 3, {"w": 1})
            assert r.stat("ExecutorRunTimer").count == 3
            assert 0 <= r.python_share < 0.5
    """)
    pytester.runpytest("--opperf").assert_outcomes(passed=1)


def test_no_executor_stat_falls_back_and_says_so(pytester):
    pytester.makepyfile("""
        import time
        from pytest_opperf import timers
        def test_x(opperf):
            with opperf.measure() as run:
                for _ in range(2):
                    with timers.timer("matmul", kernel=True):
                        time.sleep(0.002)
                    run.step(examples=1)
    """)
    result, data = run_json(pytester)
    run = data["runs"][0]
    assert run["executor_stat"] is None
    assert run["executor_ms"] == pytest.approx(run["stats"][0]["total_ms"])
    result.stdout.fnmatch_lines(
        ["note: no ExecutorRunTimer stat: executor time is the sum of top-level stats"]
    )


def test_executor_stat_ini_key(pytester):
    pytester.makeini("[pytest]\nopperf_executor_stat = RunTimer\n")
    pytester.makepyfile("""
        from pytest_opperf import timers
        def test_x(opperf):
            with opperf.measure() as run:
                with timers.timer("RunTimer"):
                    with timers.timer("op", kernel=True):
                        pass
                run.step(examples=1)
    """)
    _, data = run_json(pytester)
    assert data["runs"][0]["executor_stat"] == "RunTimer"


HOOKS = """
import pytest
from pytest_opperf.device import DeviceInfo

class FakeClock:
    # device time: every marker is 1 ms after the previous one
    def __init__(self):
        self.t = 0
        self.syncs = 0
    def mark(self):
        self.t += 1_000_000
        return self.t
    def elapsed_ns(self, a, b):
        return b - a
    def synchronize(self):
        self.syncs += 1
    def recycle(self):
        pass

CLOCK = FakeClock()

def pytest_opperf_select_device(config, requested):
    return DeviceInfo(name="cuda:0 (Fake)", is_gpu=True, clock=CLOCK, synchronize=CLOCK.synchronize,
                      device_class="fake", gpu_model="Fake", driver="9", cuda="13")

def pytest_opperf_machine_info(config, info):
    info["rack"] = "r1"

def pytest_opperf_modify_results(config, results):
    results.runs = [r for r in results.runs if not r.id.endswith("dropped")]
"""


def test_device_clock_hooks_and_machine_info(pytester):
    pytester.makeconftest(HOOKS)
    pytester.makepyfile("""
        from pytest_opperf import timers
        import conftest
        def test_x(opperf):
            with opperf.measure() as run:
                for _ in range(3):
                    with timers.timer("ExecutorRunTimer"):
                        with timers.timer("conv2d", kernel=True):
                            pass
                    run.step(examples=1)
            print("SYNCS", conftest.CLOCK.syncs)
        def test_dropped(opperf):
            with opperf.measure() as run:
                run.step(examples=1)
    """)
    result, data = run_json(pytester, "-s")
    result.assert_outcomes(passed=2)
    assert [r["id"] for r in data["runs"]] == [
        "test_device_clock_hooks_and_machine_info.py::test_x"
    ]
    run = data["runs"][0]
    conv = next(s for s in run["stats"] if s["name"] == "conv2d")
    assert (conv["clock"], conv["total_ms"], conv["samples_ms"]) == ("device", 3.0, [1.0, 1.0, 1.0])
    assert run["timing"] == "events"
    assert data["machine"]["rack"] == "r1"
    assert data["machine"]["gpu"] == {"model": "Fake", "driver": "9", "cuda": "13"}
    assert data["session"]["workload"] == "full"
    result.stdout.fnmatch_lines(
        ["*SYNCS 3", "*clock: kernel stats on the device clock*"]
    )  # one sync per step


def test_sync_timing_synchronises_around_kernels(pytester):
    pytester.makeconftest(HOOKS)
    pytester.makepyfile("""
        from pytest_opperf import timers
        import conftest
        def test_x(opperf):
            with opperf.measure() as run:
                for _ in range(3):
                    with timers.timer("conv2d", kernel=True):
                        pass
                    run.step(examples=1)
            print("SYNCS", conftest.CLOCK.syncs)
    """)
    result, data = run_json(pytester, "-s", "--opperf-timing=sync")
    result.stdout.fnmatch_lines(["*SYNCS 6"])  # before and after each of the 3 kernels
    assert data["runs"][0]["timing"] == "sync"


FROZEN_SUITE = """
import gc

def test_the_heap_is_frozen_before_the_first_test():
    assert gc.get_freeze_count() > 1000, gc.get_freeze_count()
"""


def test_the_collected_heap_is_frozen_so_collections_in_a_window_skip_it(pytester):
    pytester.makepyfile(test_frozen=FROZEN_SUITE)
    pytester.runpytest_subprocess("--opperf").assert_outcomes(passed=1)
    # without --opperf the plugin leaves the collector alone
    pytester.runpytest_subprocess().assert_outcomes(failed=1)


def test_the_heap_is_unfrozen_when_the_session_ends(pytester):
    # in-process, as pytester runs sessions in turn: each one's objects must stay collectable
    import gc

    pytester.makepyfile(test_frozen=FROZEN_SUITE)
    assert gc.get_freeze_count() == 0
    pytester.runpytest_inprocess("--opperf", "-p", "no:cacheprovider").assert_outcomes(passed=1)
    assert gc.get_freeze_count() == 0
