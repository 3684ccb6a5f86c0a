"""DeviceInfo timing labels and the pytest-benchmark timers for GPU devices, on a fake clock."""

import pytest

from pytest_opperf.device import CPU_HOST, DeviceInfo, EventTimer, SyncTimer, benchmark_timer


class FakeClock:
    """Device time advances only through ``advance``; markers read it."""

    def __init__(self):
        self.now = 0
        self.pool_events = []

    def advance(self, ns):
        self.now += ns

    def mark(self):
        return self.now

    def elapsed_ns(self, start, end):
        return end - start

    def synchronize(self):
        pass

    def recycle(self):
        self.pool_events.append("recycled")


def test_timing_labels():
    clock = FakeClock()
    assert CPU_HOST.timing_label("events") == "host"
    gpu = DeviceInfo(name="cuda:0", is_gpu=True, clock=clock)
    assert (gpu.timing_label("events"), gpu.timing_label("sync")) == ("events", "sync")
    assert DeviceInfo(is_gpu=True, synchronize=lambda: None).timing_label("events") == "host"


def test_benchmark_timer_choice():
    clock = FakeClock()
    sync = lambda: None  # noqa: E731
    assert benchmark_timer(CPU_HOST, "events") is None  # pytest-benchmark's own timer on the CPU
    assert isinstance(benchmark_timer(DeviceInfo(is_gpu=True, clock=clock), "events"), EventTimer)
    assert isinstance(
        benchmark_timer(DeviceInfo(is_gpu=True, clock=clock, synchronize=sync), "sync"), SyncTimer
    )
    assert isinstance(
        benchmark_timer(DeviceInfo(is_gpu=True, synchronize=sync), "events"), SyncTimer
    )
    assert isinstance(benchmark_timer(DeviceInfo(is_gpu=True, clock=clock), "sync"), SyncTimer)
    assert benchmark_timer(DeviceInfo(is_gpu=True), "events") is None


def test_event_timer_counts_device_time_between_calls_only():
    clock = FakeClock()
    timer = EventTimer(clock)
    clock.advance(5_000)  # before the first read: in the timer's value, in no round
    start = timer()
    clock.advance(2_000_000)  # the round's device work
    end = timer()
    assert end - start == pytest.approx(0.002, abs=1e-12)
    clock.advance(7_000)
    assert timer() - end == pytest.approx(7e-6, abs=1e-12)
    assert clock.pool_events == ["recycled"] * 3  # markers are returned to the pool after each read


def test_sync_timer_synchronises_before_reading():
    calls = []
    timer = SyncTimer(lambda: calls.append("sync"))
    a = timer()
    b = timer()
    assert calls == ["sync", "sync"] and b >= a
