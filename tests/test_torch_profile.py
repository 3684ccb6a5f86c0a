"""pytest_opperf.torch.profile(): the Stat table of a small CNN, counts per step, the
gate on injected regressions, autograd's threads, grouping by module, accounting.

Needs the CPU build of torch (``.ci/run`` installs torch==2.13.0). Times are
never compared with the wall clock: the time case runs on a fake clock.
"""

from __future__ import annotations

import threading
from typing import ClassVar

import pytest

from pytest_opperf import measure, timers
from pytest_opperf.comparison.gate import evaluate
from pytest_opperf.comparison.thresholds import parse_thresholds
from pytest_opperf.device import CPU_HOST
from pytest_opperf.results import ResultSet, RunResult

torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0)")

from torch import nn  # noqa: E402 (needs torch: after the importorskip)

from pytest_opperf.torch import ACCOUNTING_NOTE, profile, profiling  # noqa: E402 (needs torch: after the importorskip)

STEPS = 6


class Block(nn.Module):
    """conv -> batch norm -> relu, with an optional extra relu (the injected regression)."""

    def __init__(self, cin: int, cout: int, extra_relu: bool = False) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(cout)
        self.extra_relu = extra_relu

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn(self.conv(x)))
        return torch.relu(y) if self.extra_relu else y


def small_cnn(extra_relu: bool = False) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(Block(3, 4, extra_relu), nn.MaxPool2d(2), Block(4, 4, extra_relu),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 5))


def train(model: nn.Module, run: measure.Run | None = None, steps: int = STEPS, by: str = "op",
          mechanism: str = "auto") -> timers.Table:
    """``steps`` training steps (SGD with momentum) under profile(); the table."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(2, 3, 8, 8), torch.tensor([1, 3])
    with profile(by=by, mechanism=mechanism) as prof:
        for _ in range(steps):
            opt.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            if run is not None:
                run.step(examples=2)
    return prof.table


def measured(model: nn.Module, run_id: str = "suite::test_train", by: str = "op",
             mechanism: str = "auto") -> RunResult:
    run = measure.Run(run_id, "e2e", None, CPU_HOST, "events", "ExecutorRunTimer")
    with measure.measure_window(run):
        train(model, run, by=by, mechanism=mechanism)
    return run.result


# the two ways of recording on the CPU: torch's profiler (the default) and the dispatch mode
MECHANISMS = pytest.mark.parametrize("mechanism", ["profiler", "dispatch"])


# Per step of the small CNN: forward, backward and the optimizer's ops, as the
# dispatcher sees them below autograd (nn.Linear is aten::t + aten::addmm).
FORWARD = {"aten::convolution": 2, "aten::native_batch_norm": 2, "aten::relu": 2,
           "aten::max_pool2d_with_indices": 1, "aten::mean": 1, "aten::addmm": 1}
BACKWARD = {
    "aten::convolution_backward": 2,
    "aten::native_batch_norm_backward": 2,
    "aten::threshold_backward": 2,
    "aten::max_pool2d_with_indices_backward": 1,
    "aten::mm": 2,
}


@MECHANISMS
def test_stat_table_of_a_small_cnn_names_every_op_forward_and_backward(mechanism: str) -> None:
    with timers.recording() as table:
        train(small_cnn(), steps=1, mechanism=mechanism)
    for name, count in {**FORWARD, **BACKWARD}.items():
        assert name in table, f"{name} missing from {sorted(table)}"
        assert table[name].count == count, name
        assert table[name].kernel and table[name].parent is None
        assert table[name].total_ms > 0
    assert not [n for n in table if not n.startswith("aten::")]  # profiler:: markers are left out
    lines = timers.format_stat_lines(table)
    assert any(line.startswith("Stat=aten::convolution_backward ") for line in lines)


@MECHANISMS
def test_counts_are_per_step_and_every_step_agrees(mechanism: str) -> None:
    result = measured(small_cnn(), mechanism=mechanism)
    assert result.batches == STEPS
    for name, count in {**FORWARD, **BACKWARD}.items():
        assert result.counts[name] == count, name
    stat = next(s for s in result.stats if s.name == "aten::convolution")
    assert stat.count == 2 * STEPS and len(stat.samples_ms) == STEPS
    assert not result.notes or not any("varies" in n for n in result.notes)


def test_both_mechanisms_list_the_same_ops_with_the_same_counts_per_step() -> None:
    """The profiler's ops are the dispatch mode's, nothing else, each step alike."""
    by_profiler = measured(small_cnn(), mechanism="profiler")
    by_dispatch = measured(small_cnn(), mechanism="dispatch")
    # the dispatch mode alone sees the detach autograd makes of a tensor it saves (a relu's result)
    assert {**by_profiler.counts, "aten::detach": 0} == {**by_dispatch.counts, "aten::detach": 0}
    assert by_profiler.counts.get("aten::detach", 0) < by_dispatch.counts["aten::detach"]
    counts = {s.name: s.count for s in by_profiler.stats if s.name != "aten::detach"}
    assert counts == {s.name: s.count for s in by_dispatch.stats if s.name != "aten::detach"}


@MECHANISMS
def test_executor_time_is_the_time_inside_top_level_ops(mechanism: str) -> None:
    result = measured(small_cnn(), mechanism=mechanism)
    top = sum(s.total_ms for s in result.stats if s.kernel and s.parent is None)
    assert result.executor_stat is None
    assert result.executor_ms == pytest.approx(top) and result.kernel_ms == pytest.approx(top)
    assert result.python_share == pytest.approx(1 - top / (result.wall_s * 1e3))
    assert ACCOUNTING_NOTE in result.notes
    assert not any("sum of top-level stats" in n for n in result.notes)


@MECHANISMS
def test_ops_nest_under_open_regions_and_are_not_counted_twice(mechanism: str) -> None:
    x = torch.randn(4)
    with timers.recording() as table, profile(mechanism=mechanism):
        with timers.timer("forward"):
            torch.relu(x)
        with timers.timer("block", kernel=True):
            torch.relu(x)
    # a plain region is the op's parent; a kernel region also qualifies its name
    assert (table["aten::relu"].parent, table["aten::relu"].count) == ("forward", 1)
    assert (table["block/aten::relu"].parent, table["block/aten::relu"].count) == ("block", 1)
    assert not table["forward"].kernel
    # kernel time: the top-level kernel stats, the relu inside "block" only through it
    assert table.kernel_ms() == pytest.approx(
        table["block"].total_ms + table["aten::relu"].total_ms
    )


# --- regression injection: the gate catches an extra op by count, a slow op by time -----

# a fake clock is the quiet, dedicated machine on which time against a stored baseline may gate
THRESHOLDS = parse_thresholds({"regression": {"max_slowdown": 0.5, "counts": "exact",
                                              "time": "gate"}})


@pytest.mark.parametrize(("mechanism", "extra"), [
    ("profiler", {"count:aten::relu", "count:aten::threshold_backward"}),
    # the relu, its backward, and the detach the dispatch mode sees of the result autograd saves
    ("dispatch", {"count:aten::relu", "count:aten::threshold_backward", "count:aten::detach"})])
def test_an_extra_relu_per_block_is_caught_by_the_exact_count_gate(
    mechanism: str, extra: set
) -> None:
    base = ResultSet(runs=[measured(small_cnn(), mechanism=mechanism)])
    same = evaluate(ResultSet(runs=[measured(small_cnn(), mechanism=mechanism)]), THRESHOLDS, base)
    assert not [v for v in same.violations if v.metric.startswith("count:")]
    verdict = evaluate(
        ResultSet(runs=[measured(small_cnn(extra_relu=True), mechanism=mechanism)]),
        THRESHOLDS,
        base,
    )
    counts = {v.metric: v for v in verdict.violations if v.metric.startswith("count:")}
    assert set(counts) == extra
    assert (counts["count:aten::relu"].value, counts["count:aten::relu"].baseline) == (4, 2)
    assert not verdict.passed


class FakeClock:
    """perf_counter_ns for profile(): 1 ns per read, plus what the work op adds."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        self.now += 1
        return self.now


CLOCK = FakeClock()
COST_NS = {"value": 0}


@torch.library.custom_op("opperf_test::work", mutates_args=())
def work(x: torch.Tensor) -> torch.Tensor:
    CLOCK.now += COST_NS["value"]  # the op's cost, on the fake clock
    return x.clone()


@work.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def _work_run(monkeypatch: pytest.MonkeyPatch, cost_ns: int) -> RunResult:
    monkeypatch.setattr(profiling, "perf_counter_ns", CLOCK)
    COST_NS["value"] = cost_ns
    x = torch.ones(3)
    run = measure.Run("suite::test_work", "e2e", None, CPU_HOST, "events", "ExecutorRunTimer")
    with (
        measure.measure_window(run),
        profile(mechanism="dispatch"),
    ):  # the op's time is the fake clock's
        for _ in range(10):
            torch.relu(work(x))
            run.step(examples=1)
    return run.result


def test_a_slowed_op_is_caught_by_time_on_a_fake_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    base = _work_run(monkeypatch, cost_ns=2_000_000)  # 2 ms per call
    same = _work_run(monkeypatch, cost_ns=2_000_000)
    slow = _work_run(monkeypatch, cost_ns=6_000_000)  # 3x
    stat = next(s for s in base.stats if s.name == "opperf_test::work")
    assert stat.count == 10 and stat.total_ms == pytest.approx(10 * 2.000001)
    assert not [
        v
        for v in evaluate(ResultSet(runs=[same]), THRESHOLDS, ResultSet(runs=[base])).violations
        if v.metric.startswith("step_ms:")
    ]
    verdict = evaluate(ResultSet(runs=[slow]), THRESHOLDS, ResultSet(runs=[base]))
    slowed = [v for v in verdict.violations if v.metric.startswith("step_ms:")]
    assert [v.metric for v in slowed] == ["step_ms:opperf_test::work"]
    assert slowed[0].value == pytest.approx(6.000001) and slowed[0].baseline == pytest.approx(
        2.000001
    )


# --- autograd's threads -------------------------------------------------------------------

LEVELS = 80  # torch's engine hands reentrant backward deeper than 60 to a pool of threads


class Reentrant(torch.autograd.Function):
    """Each backward runs a backward of its own (reentrant), ``depth`` levels deep."""

    threads: ClassVar[set[int]] = set()

    @staticmethod
    def forward(ctx, x: torch.Tensor, depth: int) -> torch.Tensor:
        ctx.depth = depth
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        Reentrant.threads.add(threading.get_ident())
        (x,) = ctx.saved_tensors
        if ctx.depth > 0:
            with torch.enable_grad():
                inner = x.detach().requires_grad_()
                torch.autograd.backward(Reentrant.apply(inner, ctx.depth - 1).sum())
        return torch.relu(grad) * 2, None


@MECHANISMS
def test_nothing_is_dropped_from_autograd_threads(mechanism: str) -> None:
    Reentrant.threads = set()
    x = torch.randn(4, requires_grad=True)
    with timers.recording() as table, timers.timer("step"), profile(mechanism=mechanism):
        Reentrant.apply(x, LEVELS).sum().backward()
    assert len(Reentrant.threads - {threading.get_ident()}) >= 1, "the engine used no other thread"
    # one relu per backward level, on whichever thread ran it
    relu = [s for s in table.values() if s.name == "aten::relu"]
    assert len(relu) == 1 and relu[0].count == LEVELS + 1
    assert relu[0].parent == "step"  # filed inside the region open on the recording thread
    # a multiplication per level forward (x * 2) and one per level backward
    assert table["aten::mul"].count == 2 * (LEVELS + 1)


def test_a_timer_on_an_autograd_thread_alone_would_be_dropped() -> None:
    """Why profile() files other threads' ops itself: timers record per thread."""
    seen = []

    def elsewhere() -> None:
        with timers.timer("aten::relu", kernel=True):
            seen.append(timers.current())

    with timers.recording() as table:
        t = threading.Thread(target=elsewhere)
        t.start()
        t.join()
    assert seen == [None] and "aten::relu" not in table


# --- grouping by module ---------------------------------------------------------------------

@MECHANISMS
def test_by_module_groups_op_time_by_module_class_nested_as_modules_nest(mechanism: str) -> None:
    result = measured(small_cnn(), by="module", mechanism=mechanism)
    names = {s.name: s for s in result.stats}
    assert names["Sequential"].parent is None
    assert names["Sequential/Block"].parent == "Sequential"
    assert names["Sequential/Block/Conv2d"].parent == "Sequential/Block"
    assert result.counts["Sequential/Block/Conv2d"] == 2 and result.counts["Sequential/Linear"] == 1
    assert result.counts["Sequential"] == 1
    # backward ops go to the module whose forward made their autograd node
    assert result.counts["Conv2d.backward"] == 2
    assert result.counts["BatchNorm2d.backward"] == 2
    assert "aten::convolution" not in names and "aten::convolution_backward" not in names
    block = names["Sequential/Block"]
    inner = sum(s.total_ms for s in result.stats if s.parent == "Sequential/Block")
    assert block.total_ms >= inner  # a module's time holds its submodules'


def test_by_module_both_mechanisms_give_the_same_calls_and_counts() -> None:
    by_profiler = measured(small_cnn(), by="module", mechanism="profiler")
    by_dispatch = measured(small_cnn(), by="module", mechanism="dispatch")
    assert {s.name: s.parent for s in by_profiler.stats} == {
        s.name: s.parent for s in by_dispatch.stats
    }
    # the dispatch mode alone sees the detach of a saved relu result, in forward and in ReluBackward
    seen_by_dispatch_alone = {"aten::detach": 2, "Block.backward": 2}
    assert {
        n: c + seen_by_dispatch_alone.get(n, 0) for n, c in by_profiler.counts.items()
    } == by_dispatch.counts
    blocks = [s for s in by_profiler.stats if s.name == "Sequential/Block"]
    assert blocks[0].count == 2 * STEPS and len(blocks[0].samples_ms) == STEPS


# --- edges ----------------------------------------------------------------------------------

def test_profile_without_a_recording_records_nothing() -> None:
    with profile() as prof:
        torch.relu(torch.ones(2))
    assert prof.table is None and prof.timing == "off"


def test_profile_rejects_an_unknown_grouping() -> None:
    with (
        pytest.raises(ValueError, match=r"by must be one of op\|module, got 'layer'"),
        profile(by="layer"),
    ):
        pass


def test_profile_on_the_cpu_times_with_the_host_clock() -> None:
    with timers.recording() as table, profile() as prof:
        torch.relu(torch.ones(2))
    assert prof.timing == "host" and table["aten::relu"].clock == "host"
    assert prof.mechanism == "profiler"  # the default on the host clock


def test_profile_inside_profile_is_refused_rather_than_counting_twice() -> None:
    with timers.recording() as table, profile():
        with pytest.raises(RuntimeError, match=r"already being profiled"), profile():
            pass
        torch.relu(torch.ones(2))
    assert table["aten::relu"].count == 1
    with timers.recording() as again, profile():  # the guard ends with its profile
        torch.relu(torch.ones(2))
    assert again["aten::relu"].count == 1


# --- the CUDA bookkeeping, on fake events (no GPU here) ------------------------------------

class FakeEvent:
    """torch.cuda.Event stand-in: each record() is one tick later; a tick is 0.5 ms."""

    tick = 0

    def __init__(self, enable_timing: bool = False) -> None:
        self.t = None

    def record(self) -> None:
        FakeEvent.tick += 1
        self.t = FakeEvent.tick

    def elapsed_time(self, end: FakeEvent) -> float:
        return (end.t - self.t) * 0.5


class NoDeviceClock:
    """A device clock for the window, so that profile() times with events."""

    def mark(self):
        return None

    def elapsed_ns(self, start, end):
        return 0

    def synchronize(self):
        pass

    def recycle(self):
        pass


def test_on_cuda_each_op_gets_its_event_pair_resolved_once_per_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pytest_opperf.device import DeviceInfo

    syncs = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: syncs.append(1))
    monkeypatch.setattr(profiling, "_on_cuda", lambda value: isinstance(value, torch.Tensor))
    gpu = DeviceInfo(name="cuda:0", is_gpu=True, clock=NoDeviceClock())
    run = measure.Run("suite::test_gpu", "e2e", None, gpu, "events", "ExecutorRunTimer")
    x = torch.ones(3)
    with measure.measure_window(run), profile() as prof:
        for _ in range(4):
            torch.relu(x)
            torch.add(x, x)
            torch.relu(x)
            run.step(examples=1)
    assert prof.timing == "events"
    assert len(syncs) == 4  # one per step, none per op
    relu = next(s for s in run.result.stats if s.name == "aten::relu")
    assert (relu.clock, relu.count, relu.total_ms) == ("device", 8, pytest.approx(8 * 0.5))
    assert relu.samples_ms == pytest.approx(
        [1.0] * 4
    )  # each step's two relus, resolved at its step()
    assert run.result.kernel_ms == pytest.approx(12 * 0.5)


def test_with_sync_timing_the_device_is_synchronised_around_every_op(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pytest_opperf.device import DeviceInfo

    syncs = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: syncs.append(1))
    gpu = DeviceInfo(name="cuda:0", is_gpu=True, clock=NoDeviceClock())
    run = measure.Run("suite::test_gpu", "e2e", None, gpu, "sync", "ExecutorRunTimer")
    with measure.measure_window(run), profile() as prof:
        torch.relu(torch.ones(3))
        run.step(examples=1)
    assert prof.timing == "sync" and len(syncs) == 2 * 2  # torch.ones and torch.relu
    assert next(s for s in run.result.stats if s.name == "aten::relu").clock == "host"


# --- nested=True: the ops each op calls, under it -----------------------------------------

@MECHANISMS
def test_nested_lists_what_each_op_calls_under_it_and_counts_nothing_twice(mechanism: str) -> None:
    with timers.recording() as flat:
        train(small_cnn(), steps=1, mechanism=mechanism)
    with timers.recording() as table:
        opt_model = small_cnn()
        opt = torch.optim.SGD(opt_model.parameters(), lr=0.01, momentum=0.9)
        x, y = torch.randn(2, 3, 8, 8), torch.tensor([1, 3])
        with profile(nested=True, mechanism=mechanism):
            nn.functional.cross_entropy(opt_model(x), y).backward()
            opt.step()
    # the top level is the flat profile's
    assert {n: s.count for n, s in table.items() if s.parent is None} == \
        {n: s.count for n, s in flat.items() if s.parent is None}
    inner = table["aten::convolution/aten::_convolution"]
    assert (inner.parent, inner.count, inner.kernel) == ("aten::convolution", 2, True)
    assert table["aten::relu/aten::clamp_min"].parent == "aten::relu"
    # each call is timed inside its caller's time: children never add up to more
    for stat in table.values():
        children = [s for s in table.values() if s.parent == stat.name]
        assert sum(c.total_ns for c in children) <= stat.total_ns, stat.name
    assert table.kernel_ms() == pytest.approx(
        sum(s.total_ms for s in table.values() if s.parent is None)
    )


@MECHANISMS
def test_nested_files_the_calls_made_on_autograd_threads_too(mechanism: str) -> None:
    x = torch.randn(4, requires_grad=True)
    with timers.recording() as table, profile(nested=True, mechanism=mechanism):
        Reentrant.apply(x, LEVELS).sum().backward()
    assert table["aten::relu"].count == LEVELS + 1
    assert table["aten::relu/aten::clamp_min"].count == LEVELS + 1


def test_nested_needs_grouping_by_op() -> None:
    with pytest.raises(ValueError, match=r"nested=True .* needs by='op', got by='module'"), \
            profile(by="module", nested=True):
        pass


# --- mechanism="profiler": building the stats from torch's profiler events -------------------

from pytest_opperf.torch.recorded import MARK, Event, Mark, RegionLog, file_samples, op_samples  # noqa: E402

KINDS = {"aten::conv2d": "transparent", "aten::convolution": "op", "aten::_convolution": "op",
         "aten::empty": "op", "aten::relu": "op", "aten::add_": "op"}


def _kind(name: str) -> str:
    return KINDS.get(name, "none")  # ranges: autograd nodes, record_function, markers


def test_op_samples_lists_top_level_ops_per_thread_through_composites_and_ranges() -> None:
    events = [
        Event("aten::conv2d", 10, 100, 1),  # composite: transparent
        Event("aten::convolution", 12, 98, 1),
        Event("aten::_convolution", 14, 90, 1),
        Event("aten::empty", 20, 22, 1),
        Event(
            "autograd::engine::evaluate_function: ReluBackward0", 5, 60, 2
        ),  # a range on another thread
        Event(
            "aten::relu", 10, 50, 2
        ),  # the same time as the convolution: its own thread's top level
        Event("Optimizer.step#SGD.step", 200, 300, 1),
        Event("aten::add_", 210, 220, 1),
        Event(MARK, 0, 1, 1),
    ]
    flat = sorted(op_samples(events, nested=False, kind=_kind))
    assert flat == [
        ("aten::add_", 210, 10, 1),
        ("aten::convolution", 12, 86, 1),
        ("aten::relu", 10, 40, 2),
    ]
    nested = sorted(op_samples(events, nested=True, kind=_kind))
    assert nested == sorted(flat + [("aten::convolution/aten::_convolution", 14, 76, 1),
                                    ("aten::convolution/aten::_convolution/aten::empty", 20, 2, 1)])


def test_an_op_that_starts_where_another_ends_is_its_sibling() -> None:
    events = [Event("aten::relu", 10, 20, 1), Event("aten::relu", 20, 30, 1)]
    assert op_samples(events, nested=True, kind=_kind) == [
        ("aten::relu", 10, 10, 1),
        ("aten::relu", 20, 10, 1),
    ]


OFFSET = 1_700_000_000_000_000_000  # the profiler's clock (Unix time) minus perf_counter_ns, here


def _marks(*points: tuple[int, int | None]) -> tuple[list[Mark], list[int]]:
    """Markers made at perf_counter_ns ``t`` (between t - 1 and t + 1) ending step ``step``."""
    return [Mark(t - 1, t + 1, step) for t, step in points], [t + OFFSET for t, _ in points]


def test_ops_are_assigned_to_steps_by_their_start_on_the_aligned_clock() -> None:
    table = timers.Table()
    # window opens at 1000; steps end at 2000, 3000 (step 0, 1); window closes at 4000
    marks, starts = _marks((1000, None), (2000, 0), (3000, 1), (4000, None))
    regions = RegionLog()
    regions.times, regions.states = [0], [(None, None, 0)]
    at = [
        (500, 5),
        (1500, 10),
        (1990, 20),
        (2010, 30),
        (2500, 40),
        (2600, 50),
        (3500, 70),
        (4500, 80),
    ]
    samples = [("aten::relu", OFFSET + t, ns, 1) for t, ns in at]
    per_step = file_samples(table, samples, marks, starts, regions, steps=2)
    # before the window (500) and after it (4500): left out; after the last step (3500): totals only
    assert (
        table["aten::relu"].count == 6
        and table["aten::relu"].total_ns == 10 + 20 + 30 + 40 + 50 + 70
    )
    assert per_step == {"aten::relu": ([2, 3], [30, 120])}


def test_each_marker_aligns_the_clocks_for_the_ops_after_it() -> None:
    """The offset between the clocks moves; each op is placed with the last marker before it."""
    table = timers.Table()
    marks = [Mark(999, 1001, None), Mark(1999, 2001, 0), Mark(2999, 3001, None)]
    starts = [
        OFFSET + 1000,
        OFFSET + 2000 + 300,
        OFFSET + 3000 + 300,
    ]  # the profiler's clock gained 300 ns
    regions = RegionLog()
    # the recording thread: region "a" open over 2100..2200 (perf_counter_ns), "b" over 2300..2400
    regions.times = [0, 2100, 2200, 2300, 2400]
    regions.states = [
        (None, None, 0),
        ("a", None, 1),
        (None, None, 0),
        ("b", "b", 1),
        (None, None, 0),
    ]
    # an op at perf 2350 is stamped 2650 by the profiler: in "b" (placed with the first
    # marker's offset it would be in no region)
    per_step = file_samples(
        table, [("aten::relu", OFFSET + 2350 + 300, 7, 2)], marks, starts, regions, steps=1
    )
    assert table["b/aten::relu"].parent == "b" and "aten::relu" not in table
    assert per_step == {}  # after the only step


def test_nested_ops_go_under_the_stat_their_op_was_filed_as() -> None:
    table = timers.Table()
    marks, starts = _marks((0, None), (1000, 0), (2000, None))
    regions = RegionLog()
    regions.times, regions.states = [0, 100], [(None, None, 0), ("block", "block", 1)]
    samples = [("aten::convolution", OFFSET + 200, 50, 1),
               ("aten::convolution/aten::_convolution", OFFSET + 210, 40, 1)]
    per_step = file_samples(table, samples, marks, starts, regions, steps=1)
    assert table["block/aten::convolution"].parent == "block"
    inner = table["block/aten::convolution/aten::_convolution"]
    assert (inner.parent, inner.count, inner.total_ns) == ("block/aten::convolution", 1, 40)
    assert per_step["block/aten::convolution/aten::_convolution"] == ([1], [40])


def test_ops_of_the_traced_step_become_trace_events_nested_under_their_regions() -> None:
    table = timers.Table()
    marks, starts = _marks((0, None), (1000, 0), (2000, 1), (3000, None))
    regions = RegionLog()
    regions.times, regions.states = [0, 1100], [(None, None, 0), ("forward", None, 1)]
    samples = [
        ("aten::relu", OFFSET + 500, 10, 1),
        ("aten::addmm", OFFSET + 1200, 50, 1),
        ("aten::addmm/aten::copy_", OFFSET + 1210, 5, 1),
        ("aten::relu", OFFSET + 1990, 20, 1),
    ]
    events: list = []
    file_samples(
        table, samples, marks, starts, regions, steps=2, trace=(1000, 2000), trace_events=events
    )
    # the traced step is 1000..2000: its ops, at their times from its start, one level below
    # their region
    assert events == [
        ("aten::addmm", 200, 50, 1),
        ("aten::copy_", 210, 5, 2),
    ]  # the relu at 1990 ends past it


def test_a_run_traced_under_the_profiler_has_its_ops_in_the_trace() -> None:
    run = measure.Run(
        "suite::test_trace", "e2e", None, CPU_HOST, "events", "ExecutorRunTimer", trace=True
    )
    x = torch.ones(3)
    with measure.measure_window(run), profile():
        for _ in range(3):
            with timers.timer("forward"):
                torch.relu(x)
            run.step()
    trace = run.result.trace
    assert trace["step"] == 2
    names = [
        (name, depth) for name, _start, _ns, depth in sorted(trace["events"], key=lambda e: e[1])
    ]
    assert names == [("forward", 0), ("aten::relu", 1)]
    assert all(
        0 <= start and start + ns <= trace["dur_ns"] for _n, start, ns, _d in trace["events"]
    )


def test_a_marker_missing_from_the_events_is_an_error_not_a_guess() -> None:
    marks, starts = _marks((0, None), (1000, 0), (2000, None))
    with pytest.raises(ValueError, match=r"2 marker events read for 3 markers made"):
        file_samples(timers.Table(), [], marks, starts[:2], RegionLog(), steps=1)


def test_the_profiler_files_only_the_ops_inside_profile_and_its_steps_exactly() -> None:
    """profile() opened after a step and closed before the window: the ops between are not its."""
    x = torch.ones(3)
    run = measure.Run("suite::test_part", "e2e", None, CPU_HOST, "events", "ExecutorRunTimer")
    with measure.measure_window(run):
        torch.relu(x)
        run.step(examples=1)  # step 0: before profile()
        with profile() as prof:
            for i in range(3):  # steps 1..3: i + 1 relus each
                for _ in range(i + 1):
                    torch.relu(x)
                run.step(examples=1)
            torch.relu(x)  # after the last step: in the totals only
        torch.relu(x)  # after profile(): not recorded
        assert "aten::relu" not in run._table  # nothing is read inside the window
    assert prof.mechanism == "profiler"
    relu = next(s for s in run.result.stats if s.name == "aten::relu")
    assert relu.count == 1 + 2 + 3 + 1
    assert run._step_counts["aten::relu"] == [0, 1, 2, 3]
    assert (
        len(relu.samples_ms) == 4
        and relu.samples_ms[0] == 0.0
        and all(t > 0 for t in relu.samples_ms[1:])
    )


def test_two_profiles_in_one_window_each_file_their_own_ops() -> None:
    x = torch.ones(3)
    run = measure.Run("suite::test_two", "e2e", None, CPU_HOST, "events", "ExecutorRunTimer")
    with measure.measure_window(run):
        with profile():
            torch.relu(x)
            run.step()
        with profile():  # reads the first one's events before torch's profiler starts again
            torch.relu(x)
            torch.relu(x)
            run.step()
    assert run._step_counts["aten::relu"] == [1, 2]
    assert next(s for s in run.result.stats if s.name == "aten::relu").count == 3


def test_a_window_left_by_an_exception_stops_torchs_profiler() -> None:
    run = measure.Run("suite::test_fail", "e2e", None, CPU_HOST, "events", "ExecutorRunTimer")
    with pytest.raises(ZeroDivisionError), measure.measure_window(run):
        with profile():
            torch.relu(torch.ones(3))
        raise ZeroDivisionError("inside")
    assert not torch.autograd._profiler_enabled()
    with pytest.raises(KeyError), timers.recording(), profile():
        raise KeyError("inside")
    assert not torch.autograd._profiler_enabled()


def test_profile_inside_torchs_own_profiler_asks_for_the_dispatch_mode() -> None:
    with (
        torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]),
        timers.recording() as table,
    ):
        with (
            pytest.raises(
                RuntimeError, match=r"torch's profiler is already running.*mechanism='dispatch'"
            ),
            profile(),
        ):
            pass
        with profile(mechanism="dispatch"):
            torch.relu(torch.ones(2))
    assert table["aten::relu"].count == 1


def test_the_profiler_mechanism_refuses_what_only_the_dispatch_mode_does() -> None:
    with pytest.raises(
        ValueError, match=r"mechanism must be one of auto\|profiler\|dispatch, got 'kineto'"
    ):
        with profile(mechanism="kineto"):
            pass
    from pytest_opperf.device import DeviceInfo

    gpu = DeviceInfo(name="cuda:0", is_gpu=True, clock=NoDeviceClock())
    with pytest.raises(ValueError, match=r"times on the host; a window timed with events on CUDA"):
        run = measure.Run("suite::test_gpu", "e2e", None, gpu, "events", "ExecutorRunTimer")
        import unittest.mock

        with unittest.mock.patch.object(torch.cuda, "is_available", lambda: True), \
                measure.measure_window(run), profile(mechanism="profiler"):
            pass


def test_only_cuda_takes_the_dispatch_mode_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    with timers.recording(), profile(by="module") as prof:
        pass
    assert prof.mechanism == "profiler"
    from pytest_opperf.device import DeviceInfo

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    gpu = DeviceInfo(name="cuda:0", is_gpu=True, clock=NoDeviceClock())
    run = measure.Run("suite::test_gpu", "e2e", None, gpu, "events", "ExecutorRunTimer")
    with measure.measure_window(run), profile() as prof:
        pass
    assert (prof.timing, prof.mechanism) == ("events", "dispatch")


def test_module_samples_give_backward_ops_to_the_module_whose_forward_made_their_node() -> None:
    from pytest_opperf.torch.recorded import BACKWARD_RANGE, ModuleCall, file_module_samples

    main, pool = 1, 2
    events = [
        Event(
            "aten::convolution", OFFSET + 110, OFFSET + 150, main, seq=7
        ),  # in Conv2d, inside Block
        Event("aten::relu", OFFSET + 160, OFFSET + 170, main, seq=8),  # in Block itself
        Event("aten::add_", OFFSET + 400, OFFSET + 405, main),  # outside every module
        Event(
            BACKWARD_RANGE + "ConvolutionBackward0",
            OFFSET + 500,
            OFFSET + 600,
            pool,
            seq=7,
            fwd_thread=main,
        ),
        Event("aten::convolution_backward", OFFSET + 510, OFFSET + 590, pool),
        Event(
            BACKWARD_RANGE + "ReluBackward0",
            OFFSET + 610,
            OFFSET + 630,
            main,
            seq=8,
            fwd_thread=main,
        ),
        Event("aten::threshold_backward", OFFSET + 615, OFFSET + 625, main),
        Event(
            BACKWARD_RANGE + "ReluBackward0",
            OFFSET + 640,
            OFFSET + 660,
            pool,
            seq=8,
            fwd_thread=pool,
        ),
        Event(
            "aten::threshold_backward", OFFSET + 645, OFFSET + 655, pool
        ),  # another thread's node 8
    ]
    kinds = {**KINDS, "aten::convolution_backward": "op", "aten::threshold_backward": "op"}
    nodes: list = []
    samples = op_samples(events, False, kind=lambda n: kinds.get(n, "none"), nodes=nodes)
    calls = [
        ModuleCall("Block/Conv2d", "Conv2d", 1, 100, 155),
        ModuleCall("Block", "Block", None, 90, 180),
    ]
    marks, starts = _marks((0, None), (1000, 0), (2000, None))
    regions = RegionLog()
    regions.times, regions.states = [0], [(None, None, 0)]
    table = timers.Table()
    per_step = file_module_samples(table, samples, nodes, calls, marks, starts, regions, 1, main)
    totals = {n: (s.parent, s.count, s.total_ns) for n, s in table.items()}
    assert totals == {
        "Block": (None, 1, 40 + 10),  # its own relu and its Conv2d's convolution
        "Block/Conv2d": ("Block", 1, 40),
        "aten::add_": (None, 1, 5),
        "Conv2d.backward": (None, 1, 80),
        "Block.backward": (None, 1, 10),
        "aten::threshold_backward": (None, 1, 10),  # node 8 of the pool thread: made by no module
    }
    assert per_step["Block"] == ([1], [50])


# --- what profile() cannot file is said, not dropped -----------------------------------------


def test_ops_on_a_user_thread_pool_are_noted_with_their_share_of_the_window() -> None:
    """A thread pool's aten ops are neither the window's thread's nor autograd's: they are not
    kernel stats (they would overlap the window's own time), but a note counts them."""
    from concurrent.futures import ThreadPoolExecutor

    x = torch.randn(64, 64)
    run = measure.Run("suite::test_pool", "e2e", None, CPU_HOST, "events", "ExecutorRunTimer")
    with ThreadPoolExecutor(2) as pool, measure.measure_window(run), profile():
        for _ in range(3):
            list(pool.map(lambda _: torch.mm(x, x).relu(), range(4)))
            torch.add(x, x)  # one op on the window's own thread
            run.step(examples=1)
    result = run.result
    assert result is not None
    assert "aten::add" in {s.name for s in result.stats}
    assert "aten::mm" not in {s.name for s in result.stats}  # not filed as the window's
    notes = [n for n in result.notes if "other than the window's" in n]
    assert len(notes) == 1, result.notes
    assert notes[0].startswith("torch: 24 aten op(s) ran on ")  # 12 mm + 12 relu
    assert "aten::mm x12" in notes[0] and "aten::relu x12" in notes[0]
    assert "of the window's wall time" in notes[0] and "counts as untimed" in notes[0]


def test_a_compiled_region_is_noted_with_the_time_no_aten_op_explains() -> None:
    """torch.compile's kernels are not aten ops: a compiled model's time would show as 0 %
    kernels and 100 % untimed with nothing said. A backend that computes outside the
    dispatcher (numpy) stands for compiled kernels; dynamo's region is what the note reads."""
    import numpy as np

    def numpy_backend(gm, example_inputs):  # a "compiled kernel": no aten op runs inside
        def run_compiled(*args):
            return (torch.from_numpy(np.tanh(args[0].numpy() @ args[0].numpy().T)),)
        return run_compiled

    @torch.compile(backend=numpy_backend, fullgraph=True)
    def compiled(x):
        return torch.tanh(x @ x.T)

    x = torch.randn(128, 128)
    compiled(x)  # compile outside the window
    run = measure.Run("suite::test_compiled", "e2e", None, CPU_HOST, "events",
                      "ExecutorRunTimer")
    with measure.measure_window(run), profile():
        for _ in range(3):
            compiled(x)
            run.step(examples=1)
    result = run.result
    assert result is not None
    notes = [n for n in result.notes if "torch.compile region" in n]
    assert len(notes) == 1, result.notes
    assert notes[0].startswith("torch: 3 torch.compile region(s) (forward and backward) ran ")
    assert "ran compiled kernels, which are not aten ops" in notes[0]
    assert "of the window's wall time" in notes[0]


def test_unseen_notes_count_other_threads_and_compiled_time_on_synthetic_events() -> None:
    from pytest_opperf.torch.recorded import Event, unseen_notes

    other = [("aten::mm", 150, 2_000_000, 7), ("aten::mm", 160, 2_000_000, 8),
             ("aten::relu", 170, 1_000_000, 7), ("aten::mm", 10, 5_000_000, 7)]  # last: before
    compiled = [Event("Torch-Compiled Region: 0/0", 200, 10_000_200, 1),
                Event("Torch-Compiled Region: 0/0", 300, 400, 1),  # inside the first: once
                Event("autograd::engine::evaluate_function: CompiledFunctionBackward",
                      20_000_000, 24_000_000, 1)]
    filed = [("aten::addmm", 1_000, 3_000_000, 1), ("aten::addmm/aten::mm", 1_000, 2_000_000, 1),
             ("aten::add", 30_000_000, 1_000_000, 1)]  # outside every region
    notes = unseen_notes(other, compiled, filed, (100, 40_000_000), 0.1)
    assert notes == [
        "torch: 3 aten op(s) ran on 2 thread(s) other than the window's and autograd's (a thread "
        "pool, a data loader) and are not kernel stats (aten::mm x2, aten::relu x1): 5.0 ms of "
        "op time (5.0% of the window's wall time); the window's thread waited for them or ran "
        "beside them, and that time counts as untimed, not as kernels",
        "torch: 2 torch.compile region(s) (forward and backward) ran 14.0 ms (14.0% of the "
        "window's wall time), 3.0 ms of it in aten ops; the other 11.0 ms (11.0% of the window's "
        "wall time) ran compiled kernels, which are not aten ops: it counts as untimed, not as "
        "kernels",
    ]
    assert unseen_notes([], [], filed, (100, 40_000_000), 0.1) == []
