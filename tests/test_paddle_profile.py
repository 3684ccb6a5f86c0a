"""pytest_opperf.paddle.profile() on real Paddle (CPU): a small CNN in dygraph and a small static
program, forward and backward; the stat table, per-step counts, the gate on an extra relu, the
Python share, the errors; the event trees' names and nesting on synthetic events; the device hook.

Needs paddlepaddle (``.ci/run`` installs paddlepaddle==3.3.1); skipped without it. Times are never
compared with the wall clock: what is asserted is a count, a name, a parent or a difference far
larger than any machine's noise (100 ms of busy work against a few ms of ops).
"""

from __future__ import annotations

import enum
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

from pytest_opperf import measure, timers
from pytest_opperf.comparison.gate import evaluate
from pytest_opperf.comparison.metrics import steady_python_shares, steady_steps
from pytest_opperf.comparison.thresholds import parse_thresholds
from pytest_opperf.device import CPU_HOST
from pytest_opperf.paddle.events import EXECUTOR, inner_name, op_name, samples_of
from pytest_opperf.paddle.support import INSTALL, PADDLE_SUPPORTED, import_paddle, version_problem
from pytest_opperf.recorded import MARK
from pytest_opperf.results import ResultSet, RunResult

try:
    paddle = import_paddle()
except ModuleNotFoundError:
    pytest.skip(f"paddle is not installed ({INSTALL})", allow_module_level=True)

from pytest_opperf.paddle import profile, pytest_opperf_select_device  # noqa: E402 (after the skip)
from pytest_opperf.paddle.profiling import (  # noqa: E402 (after the skip)
    DYGRAPH_NOTE,
    EXECUTOR_NOTE,
    SERIAL_NOTE,
)

# what Paddle's layers say while building and training (batch norm: "we now always track")
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:paddle")

STEPS = 4
nn = paddle.nn


def test_the_installed_paddle_is_in_the_supported_range() -> None:
    assert version_problem(paddle.__version__) is None, paddle.__version__
    assert PADDLE_SUPPORTED == ((3, 3), (3, 4))
    assert "outside the supported range >=3.3,<3.4" in str(version_problem("3.4.0"))


# --- dygraph: a small CNN ------------------------------------------------------------------

class Block(nn.Layer):
    """conv -> batch norm -> relu, with an optional extra relu (the injected regression)."""

    def __init__(self, cin: int, cout: int, extra_relu: bool = False) -> None:
        super().__init__()
        self.conv = nn.Conv2D(cin, cout, 3, padding=1, bias_attr=False)
        self.bn = nn.BatchNorm2D(cout)
        self.extra_relu = extra_relu

    def forward(self, x):
        y = nn.functional.relu(self.bn(self.conv(x)))
        return nn.functional.relu(y) if self.extra_relu else y


def small_cnn(extra_relu: bool = False) -> nn.Layer:
    paddle.seed(0)
    return nn.Sequential(Block(3, 4, extra_relu), nn.MaxPool2D(2), Block(4, 4, extra_relu),
                         nn.AdaptiveAvgPool2D(1), nn.Flatten(), nn.Linear(4, 5))


def dygraph_run(extra_relu: bool = False, busy_s: float = 0.0,
                run_id: str = "suite::test_dygraph") -> RunResult:
    model = small_cnn(extra_relu)
    opt = paddle.optimizer.Momentum(0.01, 0.9, parameters=model.parameters())
    x, y = paddle.randn([2, 3, 8, 8]), paddle.to_tensor([[1], [3]], dtype="int64")
    run = measure.Run(run_id, "e2e", None, CPU_HOST, "host", "ExecutorRunTimer")
    with measure.measure_window(run), profile():
        for _ in range(STEPS):
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.clear_grad()
            _busy(busy_s)
            run.step(examples=2)
    assert run.result is not None
    return run.result


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


# per step: forward, backward (grad nodes named after their kernels) and the optimizer
DYGRAPH = {"conv2d": 2, "batch_norm": 2, "relu": 2, "pool2d": 2, "matmul": 1, "add": 1,
           "cross_entropy_with_softmax": 1, "mean_all": 1,
           "conv2d_grad": 2, "batch_norm_grad": 2, "relu_grad": 2, "pool2d_grad": 2,
           "matmul_grad": 1, "add_grad": 1, "cross_entropy_with_softmax_grad": 1,
           "mean_all_grad": 1, "momentum": 8}  # 8 parameters: 2 convs, 2 batch norms, fc


def test_dygraph_every_op_forward_backward_and_optimizer_is_a_stat_counted_per_step() -> None:
    result = dygraph_run()
    for name, count in DYGRAPH.items():
        assert result.counts.get(name) == count, (name, result.counts)
    stats = {s.name: s for s in result.stats}
    assert stats["conv2d_grad"].kernel and stats["conv2d_grad"].parent is None
    assert stats["conv2d"].count == 2 * STEPS and len(stats["conv2d"].samples_ms) == STEPS
    assert not any(n.startswith(("pd_op.", "Global_")) or n.endswith(("_", " dygraph"))
                   for n in stats), sorted(stats)
    assert result.executor_stat is None and DYGRAPH_NOTE in result.notes
    top = sum(s.total_ms for s in result.stats if s.kernel and s.parent is None)
    assert result.executor_ms == pytest.approx(top)


# --- static graph: a small program ---------------------------------------------------------

def static_run(extra_relu: bool = False, busy_s: float = 0.0, serial: bool = True,
               run_id: str = "suite::test_static") -> RunResult:
    paddle.enable_static()
    try:
        main, startup = paddle.static.Program(), paddle.static.Program()
        run = measure.Run(run_id, "e2e", None, CPU_HOST, "host", "ExecutorRunTimer")
        with measure.measure_window(run), profile(serial=serial):
            with paddle.static.program_guard(main, startup):
                x = paddle.static.data("x", [-1, 3, 8, 8], "float32")
                label = paddle.static.data("label", [-1, 1], "int64")
                h = small_cnn(extra_relu)(x)
                loss = paddle.mean(nn.functional.cross_entropy(h, label))
                paddle.optimizer.Momentum(0.01, 0.9).minimize(loss)
            exe = paddle.static.Executor(paddle.CPUPlace())
            exe.run(startup)
            feed = {"x": np.ones((2, 3, 8, 8), "float32"), "label": np.array([[1], [3]], "int64")}
            for _ in range(STEPS):
                exe.run(main, feed=feed, fetch_list=[loss])
                _busy(busy_s)
                run.step(examples=2)
    finally:
        paddle.disable_static()
    assert run.result is not None
    return run.result


STATIC = {EXECUTOR: 1, "conv2d": 2, "batch_norm": 2, "relu": 2, "pool2d": 2, "matmul": 1,
          "add": 1, "cross_entropy_with_softmax": 1, "mean": 2, "fetch": 1, "conv2d_grad": 2,
          "batch_norm_grad": 2, "relu_grad": 2, "pool2d_grad": 2, "matmul_grad": 1,
          "add_grad": 1, "cross_entropy_with_softmax_grad": 1, "mean_grad": 2, "momentum": 8}


def test_static_ops_nest_under_the_executor_run_which_is_the_executor_stat() -> None:
    result = static_run()
    for name, count in STATIC.items():
        assert result.counts.get(name) == count, (name, result.counts)
    stats = {s.name: s for s in result.stats}
    assert not stats[EXECUTOR].kernel and stats[EXECUTOR].parent is None
    assert stats[EXECUTOR].count == STEPS + 1  # the startup program's run and each step's
    for name in STATIC:
        if name != EXECUTOR:
            assert (stats[name].parent, stats[name].kernel) == (EXECUTOR, True), name
    assert result.executor_stat == EXECUTOR
    assert result.executor_ms == pytest.approx(stats[EXECUTOR].total_ms)
    assert EXECUTOR_NOTE in result.notes and SERIAL_NOTE in result.notes
    # serially, the ops' time is inside the executor's: kernels never exceed it
    assert result.kernel_ms <= result.executor_ms
    assert not any("other threads" in n for n in result.notes)


def test_one_name_for_static_and_dygraph() -> None:
    shared = {"conv2d", "conv2d_grad", "batch_norm", "batch_norm_grad", "relu", "relu_grad",
              "pool2d", "pool2d_grad", "matmul", "matmul_grad", "momentum"}
    assert shared <= set(static_run().counts) and shared <= set(dygraph_run().counts)


def test_without_serial_ops_on_the_executors_threads_are_noted_and_filed_in_its_run() -> None:
    result = static_run(serial=False)
    stats = {s.name: s for s in result.stats}
    assert stats["conv2d"].parent == EXECUTOR and result.counts["conv2d_grad"] == 2
    assert any("op(s) ran on other threads than the window's" in n for n in result.notes), \
        result.notes


# --- the gate: an extra relu per block by count; the Python share --------------------------

THRESHOLDS = parse_thresholds({"regression": {"counts": "exact"}})


@pytest.mark.parametrize("make", [dygraph_run, static_run], ids=["dygraph", "static"])
def test_an_extra_relu_per_block_is_caught_by_the_exact_count_gate(make) -> None:
    base = ResultSet(runs=[make()])
    same = evaluate(ResultSet(runs=[make()]), THRESHOLDS, base)
    assert not [v for v in same.violations if v.metric.startswith("count:")]
    verdict = evaluate(ResultSet(runs=[make(extra_relu=True)]), THRESHOLDS, base)
    counts = {v.metric: v for v in verdict.violations if v.metric.startswith("count:")}
    assert set(counts) == {"count:relu", "count:relu_grad"}
    assert (counts["count:relu"].value, counts["count:relu"].baseline) == (4, 2)
    assert not verdict.passed


@pytest.mark.parametrize("make", [dygraph_run, static_run], ids=["dygraph", "static"])
def test_busy_work_outside_the_executor_moves_the_python_share(make) -> None:
    import statistics

    quiet, busy = make(), make(busy_s=0.1)  # 100 ms of busy work per step, outside every op
    quiet_shares, busy_shares = steady_python_shares(quiet), steady_python_shares(busy)
    assert len(quiet_shares) == len(busy_shares) == STEPS - 1
    # each step spent at least its 100 ms outside the executor (wall clock, not a CPU's speed)
    outside_ms = [share * ms for share, ms in zip(busy_shares, steady_steps(busy), strict=True)]
    assert min(outside_ms) >= 100.0, outside_ms
    assert statistics.median(busy_shares) > statistics.median(quiet_shares), (quiet_shares,
                                                                              busy_shares)


def test_every_window_of_many_in_a_row_files_its_ops_under_their_kinds() -> None:
    # Paddle frees and reuses its events' memory with each result; an event type kept from an
    # earlier window (once a cache key) then read as another kind, and about one window in
    # twenty lost its op to a Python binding's name (found by CI)
    for i in range(150):
        with timers.recording() as table, profile():
            paddle.nn.functional.relu(paddle.ones([2]))
        names = set(table)
        assert "relu" in names and table["relu"].count == 1, (i, sorted(names))
        assert not any("pybind" in name or "warm_up" in name for name in names), (i, sorted(names))


# --- bad input and faults ----------------------------------------------------------------

def test_profile_outside_a_window_is_an_error_and_does_nothing_in_an_unmeasured_one() -> None:
    with pytest.raises(RuntimeError, match=r"no opperf.measure\(\) window .* is open"), profile():
        pass
    with measure.counting_window(), profile() as prof:  # opperf.measure() without --opperf
        paddle.nn.functional.relu(paddle.ones([2]))
    assert prof.table is None and prof.timing == "off"


def test_a_second_profiler_is_a_clear_error_and_profile_works_once_it_is_gone() -> None:
    theirs = paddle.profiler.Profiler(targets=[paddle.profiler.ProfilerTarget.CPU])
    with timers.recording() as table:
        with pytest.raises(RuntimeError, match=r"another Paddle profiler is alive"), profile():
            pass
        del theirs
        with profile():
            paddle.nn.functional.relu(paddle.ones([2]))
    assert table["relu"].count == 1


def test_an_exception_in_profile_keeps_the_ops_before_it_and_says_so() -> None:
    run = measure.Run("suite::test_fault", "e2e", None, CPU_HOST, "host", "ExecutorRunTimer")
    with measure.measure_window(run):
        with timers.timer("outside"):
            pass
        with pytest.raises(ZeroDivisionError), profile():
            paddle.nn.functional.relu(paddle.ones([2]))
            run.step(examples=1)
            raise ZeroDivisionError("inside")
        run.step(examples=1)
    result = run.result
    assert result is not None
    stats = {s.name: s for s in result.stats}
    assert stats["relu"].count == 1 and stats["outside"].count == 1  # the window's data kept
    assert any("profile() was left by ZeroDivisionError: inside" in n for n in result.notes)
    with timers.recording() as table, profile():  # Paddle's profiler was freed
        paddle.nn.functional.relu(paddle.ones([2]))
    assert table["relu"].count == 1


def test_a_window_left_by_an_exception_frees_paddles_profiler() -> None:
    run = measure.Run("suite::test_fail", "e2e", None, CPU_HOST, "host", "ExecutorRunTimer")
    with pytest.raises(KeyError), measure.measure_window(run), profile():
        raise KeyError("inside")
    with timers.recording() as table, profile():
        paddle.nn.functional.relu(paddle.ones([2]))
    assert table["relu"].count == 1


def test_ops_on_another_thread_are_noted_not_dropped() -> None:
    run = measure.Run("suite::test_thread", "e2e", None, CPU_HOST, "host", "ExecutorRunTimer")
    with measure.measure_window(run), profile():
        worker = threading.Thread(target=lambda: paddle.nn.functional.relu(paddle.ones([2])))
        worker.start()
        worker.join()
        run.step(examples=1)
    assert run.result is not None
    assert {s.name for s in run.result.stats} >= {"relu"}
    assert any("op(s) ran on other threads than the window's" in n and "relu x1" in n
               for n in run.result.notes), run.result.notes


def test_paddle_not_installed_is_one_line() -> None:
    code = ("import sys; sys.modules['paddle'] = None\n"
            "from pytest_opperf import timers\n"
            "from pytest_opperf.paddle import profile\n"
            "with timers.recording():\n"
            "    try:\n"
            "        with profile(): pass\n"
            "    except ModuleNotFoundError as e: print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out == f"pytest_opperf.paddle: paddle is not installed ({INSTALL})\n"


def test_import_pytest_opperf_paddle_does_not_import_paddle() -> None:
    code = ("import sys, pytest_opperf.plugin\n"
            "from pytest_opperf.paddle import pytest_opperf_select_device, profile\n"
            "assert 'paddle' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True)


# --- the event trees, on synthetic events ---------------------------------------------------

Kind = enum.Enum("Kind", ["UserDefined", "PythonUserDefined", "Operator", "OperatorInner",
                          "StaticKernelLaunch", "DygraphKernelLaunch"])  # as TracerEventType


def ev(name: str, kind: str, start: int, end: int, *children, thread: int = 1):
    return SimpleNamespace(name=name, type=Kind[kind], start_ns=start, end_ns=end,
                           thread_id=thread, children_node=list(children))


def root(*children, thread: int = 1):
    return ev("root node", "UserDefined", 0, 0, *children, thread=thread)


def test_op_names_lose_the_dialect_prefix_and_the_inplace_suffix() -> None:
    assert [op_name(n) for n in ("pd_op.relu_", "pd_op.conv2d_grad", "relu dygraph",
                                 "momentum_ dygraph", "conv2d kernel launch",
                                 "Global_GradNodeAccumulation", "cf.yield")] == [
        "relu", "conv2d_grad", "relu", "momentum", "conv2d", "GradNodeAccumulation", "cf.yield"]
    assert [inner_name(n) for n in ("conv2d infer_meta", "PhiKernelInstruction::infermeta",
                                    "conv2d kernel launch")] == [
        "infer_meta", "infer_meta", "kernel_launch"]


def test_samples_nest_ops_under_the_executor_and_name_grad_nodes_by_their_kernel() -> None:
    trees = {1: root(
        ev(MARK, "PythonUserDefined", 1, 2),
        ev(EXECUTOR, "UserDefined", 10, 100, ev("default-0", "UserDefined", 11, 99,
           ev("pd_op.relu_", "Operator", 20, 30,
              ev("PhiKernelInstruction::infermeta", "UserDefined", 21, 22),
              ev("relu kernel launch", "StaticKernelLaunch", 23, 29)))),
        ev("backward", "UserDefined", 110, 200,
           ev("full kernel launch", "DygraphKernelLaunch", 111, 112),
           ev("Global_Conv2dGradNodeFinal", "Operator", 120, 150,
              ev("Local_Conv2dGradNodeFinal", "OperatorInner", 121, 149,
                 ev("conv2d_grad kernel launch", "DygraphKernelLaunch", 122, 148))),
           ev("Global_GradNodeAccumulation", "Operator", 160, 161)),
        ev(MARK, "PythonUserDefined", 300, 301)),
        2: root(ev("pd_op.conv2d", "Operator", 40, 60, thread=2),
                ev("pd_op.conv2d", "Operator", 250, 260, thread=2), thread=2)}
    read = samples_of(trees)
    assert read.main_thread == 1 and read.mark_starts == [1, 300] and read.executor_runs == 1
    assert sorted(read.samples, key=lambda s: s[1]) == [
        (EXECUTOR, 10, 90, 1), (f"{EXECUTOR}/relu", 20, 10, 1),
        (f"{EXECUTOR}/conv2d", 40, 20, 2),  # another thread, inside the executor's run
        ("full", 111, 1, 1), ("conv2d_grad", 120, 30, 1), ("GradNodeAccumulation", 160, 1, 1),
        ("conv2d", 250, 10, 2)]  # another thread, outside every run
    assert read.other_threads == {"conv2d": 2}
    nested = samples_of(trees, nested=True).samples
    assert (f"{EXECUTOR}/relu/infer_meta", 21, 1, 1) in nested
    assert ("conv2d_grad/kernel_launch", 122, 26, 1) in nested


# --- the device hook, CUDA faked (no GPU here) ------------------------------------------------

def test_the_device_hook_takes_the_cpu_here_and_a_cuda_place_when_usable(monkeypatch) -> None:
    cpu = pytest_opperf_select_device(None, "cpu")
    assert (cpu.name, cpu.is_gpu, cpu.note) == ("cpu", False, "")
    auto = pytest_opperf_select_device(None, "auto")
    assert auto.note == f"no GPU (paddle {paddle.__version__} is a CPU build): fell back to CPU"
    with pytest.raises(pytest.UsageError, match=r"--opperf-device=gpu: no usable GPU: paddle"):
        pytest_opperf_select_device(None, "gpu")
    devices = []
    monkeypatch.setattr(paddle.device, "is_compiled_with_cuda", lambda: True)
    monkeypatch.setattr(paddle.device.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(paddle.device.cuda, "get_device_name", lambda index: "NVIDIA H200")
    monkeypatch.setattr(paddle.device, "set_device", devices.append)
    monkeypatch.setattr(paddle.version, "cuda", lambda: "12.6")
    gpu = pytest_opperf_select_device(None, "auto")
    assert (gpu.name, gpu.is_gpu, gpu.device_class, gpu.cuda) == ("gpu:0", True, "nvidia-h200",
                                                                  "12.6")
    assert devices == ["gpu:0"] and gpu.clock is not None
    assert pytest_opperf_select_device(None, "cpu").name == "cpu"  # asked for the CPU: the CPU
