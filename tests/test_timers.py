"""Tests of the instrumentation API: counts, nesting, clocks, threads, cost-free off state."""

from __future__ import annotations

import threading
import time

import pytest

from pytest_opperf import timers
from pytest_opperf.stattree import StatTree, short_name


def busy(ms: float) -> None:
    end = time.perf_counter() + ms / 1000
    while time.perf_counter() < end:
        pass


def test_nothing_is_recorded_without_a_recording():
    with timers.timer("conv2d", kernel=True):
        pass
    assert timers.current() is None
    with timers.recording() as table:
        pass
    assert len(table) == 0


class FakeHostClock:
    """Stands in for perf_counter_ns: each region lasts the next planned duration."""

    def __init__(self, durations_ms):
        self.now = 0
        self.durations = iter(durations_ms)
        self.entered = False

    def __call__(self):
        if self.entered:
            self.now += int(next(self.durations) * 1e6)
        self.entered = not self.entered
        return self.now


def test_counts_totals_min_max(monkeypatch):
    monkeypatch.setattr(timers, "perf_counter_ns", FakeHostClock([1, 3, 2]))
    with timers.recording() as table:
        for _ in range(3):
            with timers.timer("relu", kernel=True):
                pass
    s = table["relu"]
    assert s.count == 3
    assert s.kernel and s.parent is None
    assert (s.total_ms, s.min_ms, s.max_ms, s.avg_ms) == (6.0, 1.0, 3.0, 2.0)
    assert s.clock == "host"


def test_real_clock_measures_at_least_the_time_spent():
    with timers.recording() as table:
        with timers.timer("relu", kernel=True):
            busy(2)
    assert 2.0 <= table["relu"].total_ms < 1000


def test_nested_regions_record_parents_and_are_not_counted_twice():
    with timers.recording() as table:
        for _ in range(2):
            with timers.timer("ExecutorRunTimer"):
                with timers.timer("CreateOpTimer"):
                    pass
                with timers.timer("conv2d", kernel=True):
                    with timers.timer("Im2ColTimer", kernel=True):
                        busy(1)
                    with timers.timer("GemmTimer", kernel=True):
                        busy(2)
                with timers.timer("relu", kernel=True):
                    busy(1)
    assert table["conv2d"].parent == "ExecutorRunTimer"
    assert table["conv2d/Im2ColTimer"].parent == "conv2d"
    assert table["conv2d/GemmTimer"].parent == "conv2d"
    assert table["ExecutorRunTimer"].parent is None
    # Kernel time is conv2d + relu: the nested Im2Col/Gemm are inside conv2d already.
    assert table.kernel_ms() == pytest.approx(table["conv2d"].total_ms + table["relu"].total_ms)
    tree = StatTree.from_table(table)
    assert tree.kernel_ancestor("conv2d/GemmTimer") is tree.get("conv2d")
    assert tree.kernel_ancestor("conv2d") is None
    assert (
        table["conv2d"].total_ms
        >= table["conv2d/Im2ColTimer"].total_ms + table["conv2d/GemmTimer"].total_ms
    )


def test_a_region_inside_two_kernels_gives_a_stat_under_each(monkeypatch):
    # conv2d: GEMM 1 ms; conv2d_grad: GEMM 2 ms + 2 ms; each op adds 1 ms of its own
    ticks = iter(int(ms * 1e6) for ms in [0, 0, 0, 1, 2, 2, 2, 4, 4, 6, 7, 7])
    monkeypatch.setattr(timers, "perf_counter_ns", lambda: next(ticks))
    with timers.recording() as table:
        with timers.timer("ExecutorRunTimer"):
            with timers.timer("conv2d", kernel=True):
                with timers.timer("GemmTimer", kernel=True):
                    pass
            with timers.timer("conv2d_grad", kernel=True):
                for _ in range(2):
                    with timers.timer("GemmTimer", kernel=True):
                        pass
    assert sorted(table) == ["ExecutorRunTimer", "conv2d", "conv2d/GemmTimer", "conv2d_grad",
                             "conv2d_grad/GemmTimer"]
    fwd, bwd = table["conv2d/GemmTimer"], table["conv2d_grad/GemmTimer"]
    assert (fwd.parent, fwd.count, fwd.total_ms) == ("conv2d", 1, 1.0)
    assert (bwd.parent, bwd.count, bwd.total_ms) == ("conv2d_grad", 2, 4.0)
    assert table["conv2d"].total_ms == 2.0 and table["conv2d_grad"].total_ms == 5.0
    assert [(d, short_name(s.name)) for d, s in StatTree.from_table(table).ordered()] == [
        (0, "ExecutorRunTimer"),
        (0, "conv2d_grad"),
        (1, "GemmTimer"),
        (0, "conv2d"),
        (1, "GemmTimer"),
    ]
    assert table["ExecutorRunTimer"].total_ms >= table.kernel_ms()


def test_display_order_indents_only_under_kernels(monkeypatch):
    # enter ExecutorRunTimer, relu (1 ms), conv2d > GemmTimer (4 ms), exits
    ticks = iter(int(ms * 1e6) for ms in [0, 0, 1, 1, 1, 5, 5, 5])
    monkeypatch.setattr(timers, "perf_counter_ns", lambda: next(ticks))
    with timers.recording() as table:
        with timers.timer("ExecutorRunTimer"):
            with timers.timer("relu", kernel=True):
                pass
            with timers.timer("conv2d", kernel=True):
                with timers.timer("GemmTimer", kernel=True):
                    pass
    order = [(depth, s.name) for depth, s in StatTree.from_table(table).ordered()]
    assert order == [(0, "ExecutorRunTimer"), (0, "conv2d"), (1, "conv2d/GemmTimer"), (0, "relu")]
    lines = timers.format_stat_lines(table)
    assert lines[0].startswith("Stat=ExecutorRunTimer")
    assert lines[2].startswith("    Stat=GemmTimer")
    assert "count=1" in lines[3]


def test_recursive_region_keeps_its_outer_start():
    with timers.recording() as table:
        with timers.timer("sum", kernel=True):
            busy(1)
            with timers.timer("sum", kernel=True):
                busy(1)
    outer, inner = table["sum"], table["sum/sum"]  # a kernel inside a kernel is qualified by it
    assert (outer.count, inner.count, inner.parent) == (1, 1, "sum")
    assert (
        outer.total_ms >= inner.total_ms + 1.0
    )  # the outer one includes the inner one and 1 ms more


def test_exceptions_propagate_and_are_timed():
    with timers.recording() as table:
        with pytest.raises(KeyError):
            with timers.timer("fetch", kernel=True):
                raise KeyError("x")
        with pytest.raises(KeyError):
            with timers.timer("never-recorded-off-path"):
                pass
            raise KeyError("y")
    assert table["fetch"].count == 1
    with pytest.raises(ValueError):  # the shared no-op must not swallow exceptions
        with timers.timer("off"):
            raise ValueError("z")


def test_recordings_are_per_thread_and_nest():
    seen = {}

    def other():
        with timers.timer("other-thread"):
            pass
        seen["current"] = timers.current()

    with timers.recording() as outer:
        with timers.timer("a"):
            pass
        t = threading.Thread(target=other)
        t.start()
        t.join()
        with timers.recording() as inner:
            with timers.timer("b"):
                pass
        with timers.timer("c"):
            pass
        assert timers.current() is outer
    assert seen["current"] is None
    assert list(outer) == ["a", "c"]
    assert list(inner) == ["b"]
    assert timers.current() is None


class FakeClock:
    """A device clock whose 'device' takes a fixed 5 ms per kernel region."""

    def __init__(self):
        self.t = 0
        self.syncs = 0
        self.recycled = 0

    def mark(self):
        self.t += 1
        return self.t

    def elapsed_ns(self, start, end):
        assert self.syncs, "read before synchronize"
        return 5_000_000

    def synchronize(self):
        self.syncs += 1

    def recycle(self):
        self.recycled += 1


def test_device_clock_is_read_once_per_flush_not_per_region():
    clock = FakeClock()
    with timers.recording(device_clock=clock) as table:
        for _ in range(3):
            with timers.timer("conv2d", kernel=True):
                pass
            with timers.timer("CreateOpTimer"):
                pass
        assert clock.syncs == 0  # no per-region synchronisation in events mode
        assert table["conv2d"].device_count == 0
        table.flush()
        assert clock.syncs == 1 and clock.recycled == 1
    s = table["conv2d"]
    assert s.clock == "device" and s.count == 3 and s.device_count == 3
    assert s.total_ms == pytest.approx(15.0) and s.min_ms == pytest.approx(5.0)
    assert s.host_total_ms < 5  # the host only launched
    assert table["CreateOpTimer"].clock == "host"


def test_sync_mode_synchronises_around_every_kernel_region():
    clock = FakeClock()
    with timers.recording(device_clock=clock, sync=True) as table:
        for _ in range(4):
            with timers.timer("conv2d", kernel=True):
                pass
            with timers.timer("CreateOpTimer"):
                pass
    assert clock.syncs == 8
    assert table["conv2d"].clock == "host"


def test_trace_keeps_events_with_depth_only_while_tracing():
    with timers.recording() as table:
        with timers.timer("before"):
            pass
        table.start_trace()
        with timers.timer("ExecutorRunTimer"):
            with timers.timer("conv2d", kernel=True):
                pass
        events = table.stop_trace()
        with timers.timer("after"):
            pass
    assert [(name, depth) for name, _, _, depth in events] == [
        ("conv2d", 1),
        ("ExecutorRunTimer", 0),
    ]
    (_, s_in, d_in, _), (_, s_out, d_out, _) = events
    assert s_out <= s_in and s_in + d_in <= s_out + d_out


def test_added_samples():
    with timers.recording() as table:
        table.add("bench", 2_000_000)
        table.add("bench", 4_000_000)
    assert table["bench"].count == 2 and table["bench"].avg_ms == pytest.approx(3.0)
