"""The plugin's GPU additions as pure logic: steady-state throughput limits, the
measurement's identity in baseline comparisons, device span beside host enqueue,
NVML facts and throttling, NVTX ranges, and the per-op loop."""

from __future__ import annotations

import dataclasses

import pytest

from pytest_opperf import timers
from pytest_opperf.comparison.gate import evaluate
from pytest_opperf.comparison.metrics import steady_examples_per_sec
from pytest_opperf.comparison.thresholds import parse_thresholds
from pytest_opperf.core.identity import baseline_variant, mismatch
from pytest_opperf.core.machine import same_hardware
from pytest_opperf.core.oploop import LoopSettings, time_rounds
from pytest_opperf.core.port import Window
from pytest_opperf.device import DeviceInfo
from pytest_opperf.gpu import gpu_env
from pytest_opperf.gpu.nvtx_ranges import NvtxRanges
from pytest_opperf.measure import Run, measure_window
from pytest_opperf.records.checks import results_from_dict
from pytest_opperf.reports.gpu_report import bound, device_host_lines, steady_lines
from pytest_opperf.reports.report import run_lines
from pytest_opperf.results import StatResult, baseline_file
from tests.opperf_factories import e2e_run, results, stat

# --- throughput limits on the steady state -------------------------------------------


def _warm_up_heavy_run():
    # 32 examples per step; a 20 s first step (startup, compiles), then 0.5 s steps:
    # 64 examples/sec steady, 320 / 24.5 s = 13 examples/sec over the whole window
    return e2e_run("suites/test_resnet50.py::test_train[full]", stats={"conv2d": [1.0] * 10},
                   step_ms=[20_000.0] + [500.0] * 9)


def test_the_throughput_limit_applies_to_the_steps_after_warm_up():
    run = _warm_up_heavy_run()
    assert run.examples_per_sec == pytest.approx(320 / 24.5)
    assert steady_examples_per_sec(run) == pytest.approx(64.0)
    limit = parse_thresholds(
        {"limit": [{"run": "suites/test_resnet50.py::*", "min_examples_per_sec": 53.5}]}
    )
    assert evaluate(results(run), limit).passed
    strict = parse_thresholds(
        {"limit": [{"run": "suites/test_resnet50.py::*", "min_examples_per_sec": 70.0}]}
    )
    (v,) = evaluate(results(run), strict).violations
    assert v.value == pytest.approx(64.0) and v.statistic == "absolute limit on the steady state"
    assert "examples/sec in the steps after warm-up is below the limit 70" in v.message


def test_a_single_step_run_is_limited_on_its_whole_window():
    run = e2e_run("t::a", stats={"conv2d": [1.0]}, step_ms=[1000.0])
    assert steady_examples_per_sec(run) is None
    (v,) = evaluate(
        results(run), parse_thresholds({"limit": [{"min_examples_per_sec": 40.0}]})
    ).violations
    assert v.value == pytest.approx(32.0) and v.statistic == "absolute limit"


def test_the_report_gives_the_steady_state_and_the_compile_time():
    run = _warm_up_heavy_run()
    run.stats = [*run.stats, StatResult("CompileTimer", None, 4, 1234.5, 308.6, 100.0, 600.0)]
    lines = steady_lines(run)
    assert lines == ["steady state: 64.00000 examples/sec over the 9 steps after warm-up",
                     "kernel compiles 1234.5 ms (CompileTimer, one-time work)"]
    assert run_lines(run)[3:5] == lines  # under the whole window's examples/sec


# --- the measurement's identity -------------------------------------------------------


def test_baseline_files_are_named_by_the_measurement():
    assert baseline_variant("events") == baseline_variant("host") == ""
    assert (
        baseline_variant("sync") == "sync" and baseline_variant("events", l2_flush=True) == "cold"
    )
    assert (
        baseline_file("ci/baselines", "nvidia-h200", "full", baseline_variant("sync", True)).name
        == "nvidia-h200-full-sync-cold.json"
    )
    assert baseline_file("ci/baselines", "cpu", "small").name == "cpu-small.json"


def test_a_sync_baseline_is_not_compared_with_an_events_run():
    base = e2e_run("t::a", stats={"conv2d": [1.0] * 10}, counts={"conv2d": 1})
    base.timing = "sync"
    new = e2e_run(
        "t::a", stats={"conv2d": [5.0] * 10}, counts={"conv2d": 2}
    )  # 5x slower, one more op
    new.timing = "events"
    assert mismatch(base, new) == "timing events vs baseline sync"
    v = evaluate(results(new), parse_thresholds({}), results(base), "base.json")
    assert [x.metric for x in v.violations] == ["count:conv2d"]  # counts still compared, times not
    assert any(
        "measured otherwise than their baseline run, times not compared" in w
        and "t::a (timing events vs baseline sync)" in w
        for w in v.warnings
    )
    new.timing = "sync"  # the same measurement: the slowdown is found (gated with time = "gate")
    gated = parse_thresholds({"regression": {"time": "gate"}})
    assert "step_ms:conv2d" in [
        x.metric for x in evaluate(results(new), gated, results(base)).violations
    ]


def test_cold_and_warm_per_op_runs_are_different_measurements():
    base = e2e_run("t::op", stats={"conv2d": [1.0] * 10})
    new = e2e_run("t::op", stats={"conv2d": [1.0] * 10})
    new.config = {"benchmark": {"rounds": 10, "iterations": 1, "l2_flush": True}}
    assert mismatch(base, new) == "cold cache vs baseline warm"


def test_another_driver_or_clock_setting_is_other_hardware():
    def machine(driver, app_clock):
        return {
            "cpu": "x",
            "device_class": "nvidia-h200",
            "gpu": {"model": "NVIDIA H200", "driver": "d"},
            "gpu_env": {
                "start": {"driver": driver, "applications_sm_clock_mhz": app_clock, "ecc": "on"}
            },
        }

    assert same_hardware(machine("550.54", 1980), machine("550.54", 1980)) is None
    assert (
        same_hardware(machine("550.54", 1980), machine("560.10", 1980))
        == "gpu driver '550.54' vs '560.10'"
    )
    assert "gpu applications_sm_clock_mhz 1980 vs 1410" in same_hardware(machine("550.54", 1980),
                                                                         machine("550.54", 1410))
    assert (
        same_hardware(machine("550.54", 1980), {"cpu": "x", "device_class": "nvidia-h200"}) is None
    )  # old file


# --- device span beside host enqueue ----------------------------------------------------


def test_launch_bound_when_the_span_is_no_longer_than_the_enqueue():
    quick = stat("relu", [1.0] * 4, clock="device", host_ms=3.8)  # span 4.0 ms, host 3.8 ms
    heavy = stat("conv2d", [10.0] * 4, clock="device", host_ms=2.0)  # span 40 ms, host 2 ms
    assert bound(quick) == "launch" and bound(heavy) == "device"
    assert (
        bound(stat("x", [1.0], clock="host")) is None
        and bound(stat("y", [1.0], clock="device")) is None
    )
    run = e2e_run(stats={})
    run.stats = [quick, heavy]
    lines = device_host_lines(run)
    assert lines[0].startswith(
        "device span vs host enqueue per call (ms): 1 of 2 kernel stats launch-bound"
    )
    assert lines[2].split() == ["conv2d", "10.000", "0.500", "20.00", "device"]
    assert lines[3].split() == ["relu", "1.000", "0.950", "1.05", "launch"]
    from pytest_opperf.reports.report import markdown

    text = markdown(results(run), None)
    assert "```\n" + "\n".join(lines) + "\n```" in text


class CountingClock:
    """Device time advances by a fixed step per mark; host time is the real clock."""

    def __init__(self, step_ns: int) -> None:
        self.now, self.step = 0, step_ns

    def mark(self):
        self.now += self.step
        return self.now

    def elapsed_ns(self, a, b):
        return b - a

    def synchronize(self):
        pass

    def recycle(self):
        pass


def test_measured_windows_keep_the_host_time_of_device_stats():
    device = DeviceInfo(name="cuda:0", is_gpu=True, clock=CountingClock(1_000_000))
    run = Run("t::w", "e2e", {}, device, "events", "ExecutorRunTimer")
    with measure_window(run):
        for _ in range(2):
            with timers.timer("relu", kernel=True):
                pass
            run.step(examples=1)
    relu = run.result.stat("relu")
    assert relu.clock == "device" and relu.total_ms == pytest.approx(2.0)  # two 1 ms spans
    assert relu.host_ms is not None and 0 <= relu.host_ms < relu.total_ms
    assert StatResult(**dataclasses.asdict(relu)).to_dict()["host_ms"] == relu.host_ms
    back = results_from_dict(results(run.result).to_dict())
    assert back.runs[0].stat("relu").host_ms == pytest.approx(relu.host_ms)


# --- NVML facts ---------------------------------------------------------------------------


class FakeNvml:
    """Answers NVML's queries; any setter is a test failure (the plugin never changes a GPU)."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2

    def __init__(self, sm=1980, violation=(0, 0), reasons=0, ecc=(1, 1)):
        self.sm, self.violation, self.reasons, self.ecc = sm, violation, reasons, ecc
        self.calls = []

    def __getattr__(self, name):
        if "Set" in name or "Reset" in name or "Clear" in name:
            raise AssertionError(f"{name} would change the GPU's settings")
        raise AttributeError(name)

    def nvmlInit(self):
        self.calls.append("init")

    def nvmlShutdown(self):
        self.calls.append("shutdown")

    def nvmlDeviceGetHandleByPciBusId_v2(self, bus):
        if bus != "0000:3B:00.0":
            raise RuntimeError("NVML_ERROR_NOT_FOUND")
        return "h"

    def nvmlDeviceGetName(self, h):
        return b"NVIDIA H200"

    def nvmlSystemGetDriverVersion(self):
        return "550.54.15"

    def nvmlSystemGetCudaDriverVersion(self):
        return 12040

    def nvmlDeviceGetClockInfo(self, h, kind):
        return self.sm if kind == 1 else 2619

    def nvmlDeviceGetMaxClockInfo(self, h, kind):
        return 1980

    def nvmlDeviceGetApplicationsClock(self, h, kind):
        raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return 700_000

    def nvmlDeviceGetTemperature(self, h, sensor):
        return 41

    def nvmlDeviceGetEccMode(self, h):
        return self.ecc

    def nvmlDeviceGetMigMode(self, h):
        return (0, 0)

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h):
        return self.reasons

    def nvmlDeviceGetViolationStatus(self, h, policy):
        class Time:
            violationTime = self.violation[policy]
        return Time()


def test_a_snapshot_reads_the_gpu_and_changes_nothing():
    nvml = FakeNvml(ecc=(1, 0))
    snap = gpu_env.snapshot("0000:3B:00.0", nvml)
    assert snap == {
        "name": "NVIDIA H200",
        "driver": "550.54.15",
        "cuda_driver": "12.4",
        "sm_clock_mhz": 1980,
        "mem_clock_mhz": 2619,
        "max_sm_clock_mhz": 1980,
        "applications_sm_clock_mhz": None,
        "applications_mem_clock_mhz": None,
        "power_limit_w": 700.0,
        "temperature_c": 41,
        "ecc": "on (pending off)",
        "mig": "off",
        "clock_reasons": [],
        "violation_ns": {"power": 0, "thermal": 0},
    }
    assert nvml.calls == ["init", "shutdown"]


def test_a_snapshot_says_why_it_has_no_facts(monkeypatch):
    monkeypatch.setattr(gpu_env, "nvml_module", lambda: None)
    assert gpu_env.snapshot("0000:3B:00.0") == {
        "error": "nvidia-ml-py is not installed (pip install 'pytest-opperf[gpu]')"
    }
    assert gpu_env.snapshot(None, FakeNvml()) == {
        "error": "the device has no PCI bus id to find it in NVML"
    }
    assert gpu_env.snapshot("0000:99:00.0", FakeNvml()) == {
        "error": "NVML has no GPU at PCI bus id 0000:99:00.0"
    }


def test_throttling_is_found_in_the_counters_the_reasons_and_the_clocks():
    start = gpu_env.snapshot("0000:3B:00.0", FakeNvml())
    assert gpu_env.throttling(start, gpu_env.snapshot("0000:3B:00.0", FakeNvml())) == []
    end = gpu_env.snapshot(
        "0000:3B:00.0", FakeNvml(sm=1410, violation=(2_500_000_000, 0), reasons=0x4 | 0x1)
    )
    assert gpu_env.throttling(start, end) == [
        "the GPU was held back by its power limit for 2500 ms during the session "
        "(NVML violation counter): its timings are slower than its clocks allow",
        "at the end of the session the GPU's clocks were held back: sw_power_cap",
        "the GPU's SM clock fell from 1980 MHz at the start of the session to 1410 MHz at the end",
    ]
    assert gpu_env.throttling({"error": "x"}, end) == []


# --- NVTX ---------------------------------------------------------------------------------


class FakeNvtx:
    def __init__(self):
        self.events = []

    def push_range(self, message, domain):
        self.events.append(("push", message, domain))

    def pop_range(self, domain):
        self.events.append(("pop", domain))

    def start_range(self, message, domain):
        self.events.append(("start", message))
        return message

    def end_range(self, range_id):
        self.events.append(("end", range_id))


def test_nvtx_ranges_around_every_region_and_step():
    nvtx = FakeNvtx()
    run = Run(
        "t::n", "e2e", {}, DeviceInfo(), "events", "ExecutorRunTimer",
        window=Window(annotate=NvtxRanges(nvtx)),
    )
    with measure_window(run):
        with timers.timer("ExecutorRunTimer"), timers.timer("conv2d", kernel=True):
            pass
        run.step(examples=1)
    assert nvtx.events == [
        ("start", "step 1"),
        ("push", "ExecutorRunTimer", "opperf"),
        ("push", "conv2d", "opperf"),
        ("pop", "opperf"),
        ("pop", "opperf"),
        ("end", "step 1"),
        ("start", "step 2"),
        ("end", "step 2"),
    ]
    assert run.result.stat("conv2d").count == 1


def test_without_nvtx_regions_are_the_plain_ones():
    with timers.recording() as table:
        region = table.region("relu", kernel=True)
    assert type(region) is timers._Region


# --- the per-op loop -------------------------------------------------------------------------


class FakeTime:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_the_loop_calibrates_iterations_and_runs_until_max_time():
    clock = FakeTime()
    calls = []

    def call():
        calls.append(1)
        clock.t += 1e-6  # 1 us per call

    rounds, iterations = time_rounds(
        call,
        clock,
        LoopSettings(min_rounds=3, max_time=0.001, min_time=4e-6, warmup_rounds=1),
        clock=clock,
    )
    assert iterations == 4  # 1, 2 us rounds are below 4 us
    assert all(r == pytest.approx(1e-6) for r in rounds)
    assert len(rounds) >= 3 and sum(rounds) * iterations >= 0.001 - 1e-5


def test_with_a_flush_each_round_is_one_call_after_it_and_the_flush_is_not_timed():
    clock = FakeTime()
    order = []

    def flush():
        order.append("flush")
        clock.t += 1.0  # a slow flush: never in a round

    def call():
        order.append("call")
        clock.t += 2e-3

    rounds, iterations = time_rounds(
        call,
        clock,
        LoopSettings(min_rounds=5, max_time=0.0, warmup_rounds=1),
        before_round=flush,
        clock=clock,
    )
    assert iterations == 1 and rounds == [pytest.approx(2e-3)] * 5
    assert order == ["flush", "call"] * 6  # one warm-up round, five timed


# --- separate event pools: a per-op benchmark inside a measured window ---------------------


class _Device:
    now = 0


class PooledClock:
    """Events from a pool, as backend.CudaEventClock keeps them: recycled events are re-recorded."""

    def __init__(self, device):
        self.device, self.free, self.used = device, [], []

    def mark(self):
        event = self.free.pop() if self.free else {}
        event["t"] = self.device.now
        self.used.append(event)
        return event

    def elapsed_ns(self, a, b):
        return b["t"] - a["t"]

    def synchronize(self):
        pass

    def recycle(self):
        self.free += self.used
        self.used = []


def _window_with_a_benchmark_inside(device_info, device):
    from pytest_opperf.device import benchmark_timer

    with timers.recording(device_clock=device_info.clock) as table:
        with timers.timer("conv2d", kernel=True):
            device.now += 5_000_000  # 5 ms queued, its events not read yet
        timer = benchmark_timer(device_info, "events")
        start = timer()
        device.now += 1_000_000
        assert timer() - start == pytest.approx(0.001)
        with timers.timer("relu", kernel=True):  # the window goes on, marking more events
            device.now += 2_000_000
    return table["conv2d"].total_ms


def test_a_benchmark_inside_a_window_times_on_its_own_pool():
    device = _Device()
    clock = PooledClock(device)
    info = DeviceInfo(
        name="cuda:0", is_gpu=True, clock=clock, new_clock=lambda: PooledClock(device)
    )
    assert _window_with_a_benchmark_inside(info, device) == pytest.approx(5.0)


def test_one_shared_pool_would_lose_the_windows_events():
    device = _Device()
    shared = DeviceInfo(name="cuda:0", is_gpu=True, clock=PooledClock(device))  # no new_clock
    assert _window_with_a_benchmark_inside(shared, device) != pytest.approx(
        5.0
    )  # the defect new_clock avoids


# --- per-GPU workers: the pure part ----------------------------------------------------------


def test_the_visible_gpus_come_from_cuda_visible_devices_first():
    from pytest_opperf.gpu.xdist_gpu import GpuWorkersError, visible_gpus

    never = (lambda: pytest.fail("probed although CUDA_VISIBLE_DEVICES was set"),)
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "2, 3"}, never) == ["2", "3"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "GPU-8f1c,GPU-77aa"}, never) == [
        "GPU-8f1c",
        "GPU-77aa",
    ]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "1,-1,0"}, never) == [
        "1"
    ]  # CUDA stops at an invalid entry
    with pytest.raises(GpuWorkersError, match="CUDA_VISIBLE_DEVICES='-1' hides every GPU"):
        visible_gpus({"CUDA_VISIBLE_DEVICES": "-1"}, never)
    assert visible_gpus({}, (lambda: None, lambda: ["0", "1", "2", "3"])) == ["0", "1", "2", "3"]
    with pytest.raises(GpuWorkersError, match="no GPU found"):
        visible_gpus({}, (lambda: None,))


def test_each_worker_gets_its_own_gpu_before_cuda_starts():
    from pytest_opperf.gpu.xdist_gpu import (
        ENV_LIST,
        GpuWorkersError,
        assign,
        different_models,
        set_worker_device,
    )

    assert [assign(f"gw{i}", ["3", "5"]) for i in range(3)] == ["3", "5", "3"]
    with pytest.raises(GpuWorkersError, match="unexpected xdist worker id 'main'"):
        assign("main", ["0"])
    env = {ENV_LIST: "3,5", "PYTEST_XDIST_WORKER": "gw1", "CUDA_VISIBLE_DEVICES": "3,5"}
    assert set_worker_device(env) == "5" and env["CUDA_VISIBLE_DEVICES"] == "5"
    untouched = {
        "PYTEST_XDIST_WORKER": "gw1",
        "CUDA_VISIBLE_DEVICES": "3,5",
    }  # not a per-GPU session
    assert set_worker_device(untouched) is None and untouched["CUDA_VISIBLE_DEVICES"] == "3,5"
    assert different_models({"gw0": {"gpu_model": "H200"}, "gw1": {"gpu_model": "H200"}}) is None
    assert (
        different_models({"gw1": {"gpu_model": "A100"}, "gw0": {"gpu_model": "H200"}})
        == "gw0: H200, gw1: A100"
    )
