"""The plugin's GPU glue on a fake GPU device (a conftest answering the device hook):
L2-flushed per-op timing, NVTX ranges, the baseline's measurement variant, NVML
facts in the results, and one xdist worker per GPU with per-op benchmarks timed."""

from __future__ import annotations

import json

import pytest

from tests.opperf_suites import assert_one_line_usage_error, e2e, inner_run_env  # noqa: F401

pytest_plugins = ["pytester"]

# A GPU device whose "device time" advances only through work the tests queue;
# FLUSHES counts L2 flushes, CALLS the op's calls, in order.
FAKE_GPU = '''
import os
import pytest
from pytest_opperf.device import DeviceInfo

LOG = []

class Clock:
    now = 0  # one device: every clock reads the same time; the op advances it, a marker by 1 ns
    def mark(self):
        Clock.now += 1
        return Clock.now
    def elapsed_ns(self, a, b):
        return b - a
    def synchronize(self):
        pass
    def recycle(self):
        pass

CLOCK = Clock()
MODELS = {{"3": "Fake GPU A", "5": "Fake GPU {other}"}}

def pytest_opperf_select_device(config, requested):
    gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "3")
    model = MODELS.get(gpu, "Fake GPU A")
    return DeviceInfo(name=f"cuda:0 ({{model}})", is_gpu=True, clock=CLOCK, new_clock=Clock,
                      device_class=model.lower().replace(" ", "-"), gpu_model=model,
                      flush_cache=lambda: LOG.append("flush"), pci_bus_id=None)
'''

OP = """
import os
from conftest import LOG, Clock

def test_op(opperf_benchmark):
    def op():
        LOG.append("call")
        Clock.now += 50_000  # 50 us on the device
    opperf_benchmark.describe(stat="relu")
    opperf_benchmark(op)
    worker = os.environ.get('PYTEST_XDIST_WORKER', 'main')
    with open(f"seen-{{worker}}-{{os.getpid()}}.txt", "a") as f:
        visible = os.environ.get('CUDA_VISIBLE_DEVICES')
        f.write(f"{{visible}} {{LOG.count('flush')}} {{LOG.count('call')}}\\n")
"""


def fake_gpu(pytester, other="A", ops=1):
    pytester.makeconftest(FAKE_GPU.format(other=other))
    pytester.makepyfile(**{f"test_op{i}": OP.format() for i in range(ops)})


def test_l2_flush_runs_before_every_timed_call(pytester):
    fake_gpu(pytester)
    result = pytester.runpytest("--opperf", "--opperf-l2-flush", "--opperf-json=r.json",
                                "--benchmark-min-rounds=7", "--benchmark-max-time=0")
    assert result.ret == 0, result.stdout.str()
    (seen,) = [p.read_text().split() for p in pytester.path.glob("seen-*.txt")]
    flushes, calls = int(seen[1]), int(seen[2])
    assert (
        flushes == 1 + 7 and calls == 1 + flushes
    )  # one untimed call, a warm-up round, 7 rounds of one call
    data = json.loads((pytester.path / "r.json").read_text())
    (run,) = data["runs"]
    assert run["config"]["benchmark"] == {
        "rounds": 7,
        "iterations": 1,
        "loop": "opperf",
        "l2_flush": True,
    }
    assert run["timing"] == "events" and data["session"]["l2_flush"] is True


def test_l2_flush_on_a_device_without_one_is_a_usage_error(pytester):
    pytester.makepyfile(test_a="def test_a():\n    pass\n")
    result = pytester.runpytest("--opperf", "--opperf-l2-flush")
    assert_one_line_usage_error(result, "--opperf-l2-flush: device cpu has no cache flush")


def test_a_cold_session_reads_and_writes_its_own_baseline_file(pytester):
    fake_gpu(pytester)
    (pytester.path / "base").mkdir()
    result = pytester.runpytest(
        "--opperf",
        "--opperf-l2-flush",
        "--opperf-save=base",
        "--opperf-timing=sync",
        "--benchmark-max-time=0",
    )
    assert result.ret == 0, result.stdout.str()
    assert [p.name for p in (pytester.path / "base").iterdir()] == [
        "fake-gpu-a-full-sync-cold.json"
    ]
    result = pytester.runpytest("--opperf", "--opperf-baseline=base", "--benchmark-max-time=0")
    result.stdout.fnmatch_lines(["*warning: no baseline *base/fake-gpu-a-full.json*"])


NVTX = '''
EVENTS = []
def push_range(message, domain):
    EVENTS.append(("push", message))
def pop_range(domain):
    EVENTS.append(("pop",))
def start_range(message, domain):
    EVENTS.append(("start", message))
    return message
def end_range(range_id):
    EVENTS.append(("end", range_id))
'''


def test_nvtx_ranges_name_the_ops_and_steps(pytester):
    pytester.makepyfile(
        nvtx=NVTX,
        test_train=e2e(steps=2)
        + """

def test_ranges_seen():
    import nvtx
    names = [e[1] for e in nvtx.EVENTS if e[0] in ("push", "start")]
    assert names[:6] == ["step 1", "ExecutorRunTimer", "CreateOpTimer", "conv2d", "Im2ColTimer",
                         "relu"]
    assert ("start", "step 3") in nvtx.EVENTS
    assert nvtx.EVENTS.count(("pop",)) == names.count("relu") * 5
""",
    )
    pytester.syspathinsert()  # the fake nvtx module, importable when the plugin configures
    result = pytester.runpytest("--opperf", "--opperf-nvtx", "-p", "no:randomly")
    result.assert_outcomes(passed=2)


PER_OP_NVTX = """
def test_op(opperf_benchmark):
    opperf_benchmark.describe(stat="relu")
    opperf_benchmark.pedantic(lambda: None, rounds=3)

def test_ranges_seen():
    import nvtx
    assert nvtx.EVENTS.count(("push", "relu")) == nvtx.EVENTS.count(("pop",)) == 3
"""


def test_nvtx_ranges_around_per_op_benchmark_calls(pytester):
    pytester.makepyfile(nvtx=NVTX, test_op=PER_OP_NVTX)
    pytester.syspathinsert()
    result = pytester.runpytest("--opperf", "--opperf-nvtx", "-p", "no:randomly")
    result.assert_outcomes(passed=2)


def test_nvtx_without_the_package_is_a_usage_error(pytester, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "nvtx", None)  # import nvtx raises ImportError
    pytester.makepyfile(test_a="def test_a():\n    pass\n")
    result = pytester.runpytest("--opperf", "--opperf-nvtx")
    assert_one_line_usage_error(result, "--opperf-nvtx: the nvtx package is not installed")


def test_a_gpu_session_records_why_it_has_no_nvml_facts(pytester):
    fake_gpu(pytester)
    result = pytester.runpytest("--opperf", "--opperf-json=r.json", "--benchmark-max-time=0")
    assert result.ret == 0, result.stdout.str()
    env = json.loads((pytester.path / "r.json").read_text())["machine"]["gpu_env"]
    assert (
        env["start"] == env["end"] == {"error": "the device has no PCI bus id to find it in NVML"}
    )
    result.stdout.fnmatch_lines(
        ["note: GPU environment (NVML) not recorded: the device has no PCI bus id*"]
    )


# --- one xdist worker per GPU ----------------------------------------------------------


def _run_workers(pytester, *args, gpus="3,5", other="A"):
    fake_gpu(pytester, other=other, ops=4)
    return _subprocess(pytester, gpus, *args)


def _subprocess(pytester, gpus, *args):
    import os

    old = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = gpus
    try:
        return pytester.runpytest_subprocess(
            "-p",
            "no:hypothesispytest",
            "--opperf",
            "--opperf-gpu-workers",
            "--opperf-json=r.json",
            "--benchmark-max-time=0.01",
            *args,
        )
    finally:
        if old is None:
            del os.environ["CUDA_VISIBLE_DEVICES"]
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = old


def test_one_worker_per_gpu_each_with_its_own_gpu_and_per_op_runs_timed(pytester):
    result = _run_workers(pytester, "-n", "auto")
    out = result.stdout.str()
    assert result.ret == 0, out + result.stderr.str()
    result.assert_outcomes(passed=4)
    seen = {}
    for path in pytester.path.glob("seen-gw*.txt"):
        worker = path.name.split("-")[1]
        seen.setdefault(worker, set()).update(
            line.split()[0] for line in path.read_text().splitlines()
        )
    assert sorted(seen) == ["gw0", "gw1"]  # -n auto: one worker per GPU
    assert seen["gw0"] == {"3"} and seen["gw1"] == {"5"}
    data = json.loads((pytester.path / "r.json").read_text())
    assert len(data["runs"]) == 4 and all(
        r["config"]["benchmark"]["loop"] == "opperf" for r in data["runs"]
    )
    assert all(r["stats"][0]["count"] > 0 for r in data["runs"])  # timed under xdist, not lost
    assert sorted(data["machine"]["workers"]) == ["gw0", "gw1"]
    assert {w["cuda_visible_devices"] for w in data["machine"]["workers"].values()} == {"3", "5"}
    assert out.count("= opperf =") == 1 and "untimed" not in out


def test_workers_on_different_gpu_models_fail_the_session(pytester):
    result = _run_workers(pytester, "-n", "2", other="B")
    out = result.stdout.str()
    assert result.ret == 1, out
    assert (
        "error: the workers ran on different GPU models (gw0: Fake GPU A, gw1: Fake GPU B)" in out
    )


def test_more_workers_than_gpus_is_a_usage_error(pytester):
    result = _run_workers(pytester, "-n", "3")
    assert result.ret == 4
    assert (
        "--opperf-gpu-workers: -n 3 workers for 2 GPU(s) (3,5)"
        in result.stderr.str() + result.stdout.str()
    )


def test_gpu_workers_without_xdist_is_a_usage_error(pytester):
    pytester.makepyfile(test_a="def test_a():\n    pass\n")
    result = pytester.runpytest("--opperf-gpu-workers")
    assert_one_line_usage_error(
        result, "--opperf-gpu-workers needs pytest-xdist workers: add -n auto"
    )


PEDANTIC = '''
from conftest import LOG, Clock

def test_op(opperf_benchmark):
    def op(x):
        LOG.append(("call", x))
        Clock.now += 20_000
    def setup():
        LOG.append("setup")
        return (7,), {}
    opperf_benchmark.describe(stat="relu")
    opperf_benchmark.pedantic(op, setup=setup, rounds=4, warmup_rounds=1, iterations=2)
    assert LOG == ["setup", "flush", ("call", 7), ("call", 7)] * 5  # a warm-up round, then 4 timed
'''


def test_pedantic_with_the_flush_keeps_rounds_iterations_and_setup(pytester):
    pytester.makeconftest(FAKE_GPU.format(other="A"))
    pytester.makepyfile(test_p=PEDANTIC)
    result = pytester.runpytest("--opperf", "--opperf-l2-flush", "--opperf-json=r.json")
    assert result.ret == 0, result.stdout.str()
    (run,) = json.loads((pytester.path / "r.json").read_text())["runs"]
    assert run["config"]["benchmark"] == {
        "rounds": 4,
        "iterations": 2,
        "loop": "opperf",
        "l2_flush": True,
    }
    (s,) = run["stats"]
    assert (
        s["count"] == 8 and s["samples_ms"] == [pytest.approx(0.02, abs=1e-5)] * 4
    )  # 20 us a call, no flush
