"""The device a session measures on, as a framework describes it to the plugin.

The plugin knows nothing of frameworks; a suite's ``conftest.py`` answers the
``pytest_opperf_select_device`` hook with a :class:`DeviceInfo`. Without an
answer the session runs on :data:`CPU_HOST`: the host clock and no device.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from time import perf_counter
from typing import Any

from .timers import DeviceClock

__all__ = ["CPU_HOST", "DeviceInfo", "EventPoolClock", "EventTimer", "SyncTimer", "benchmark_timer",
           "device_class"]


def device_class(model: str) -> str:
    """``NVIDIA H200`` -> ``nvidia-h200``: the baseline file's hardware name."""
    return re.sub(r"[^a-z0-9]+", "-", model.lower()).strip("-")


class EventPoolClock:
    """A :class:`pytest_opperf.timers.DeviceClock` on a framework's CUDA events (current stream),
    kept in a pool: ``cuda`` is the framework's CUDA module, with ``Event(enable_timing=True)`` (an
    event with ``record()`` and ``elapsed_time(other)`` in ms) and ``synchronize()`` (torch's
    ``torch.cuda``, Paddle's ``paddle.device.cuda``)."""

    def __init__(self, cuda: Any) -> None:
        self._cuda = cuda
        self._free: list[Any] = []
        self._used: list[Any] = []

    def mark(self) -> Any:
        event = self._free.pop() if self._free else self._cuda.Event(enable_timing=True)
        event.record()
        self._used.append(event)
        return event

    def elapsed_ns(self, start: Any, end: Any) -> int:
        return int(start.elapsed_time(end) * 1e6)

    def synchronize(self) -> None:
        self._cuda.synchronize()

    def recycle(self) -> None:
        self._free += self._used
        self._used = []


@dataclass(frozen=True)
class DeviceInfo:
    """Where the suites run and how to time work there.

    ``clock`` (CUDA events, say) gives kernel regions device time; ``synchronize`` waits for the
    device, for per-op benchmarks in ``sync`` timing. ``device_class`` names the hardware for
    baseline files (``<device_class>-<workload>.json``); ``note`` is shown in the report (e.g. "no
    GPU: fell back to CPU").
    """

    name: str = "cpu"
    is_gpu: bool = False
    clock: DeviceClock | None = None
    synchronize: Callable[[], None] | None = None
    note: str = ""
    device_class: str = "cpu"
    gpu_model: str | None = None
    driver: str | None = None
    cuda: str | None = None
    # GPU additions: a maker of further clocks, each with its own pool of markers (per-op
    # benchmarks inside a measured window must not recycle its unread markers); an L2 flush for
    # cold-cache per-op timing (--opperf-l2-flush); the PCI bus id, by which gpu_env finds it.
    new_clock: Callable[[], DeviceClock] | None = None
    flush_cache: Callable[[], None] | None = None
    pci_bus_id: str | None = None

    def timing_label(self, timing: str) -> str:
        """What the JSON calls the timing of measured windows: ``host`` without a device clock
        (kernel regions are then timed, and synchronised, only through the clock)."""
        return timing if self.is_gpu and self.clock is not None else "host"


CPU_HOST = DeviceInfo()


class SyncTimer:
    """A pytest-benchmark timer: host seconds, read after the device is idle.

    pytest-benchmark reads its timer before and after each round, so a round is bracketed by two
    synchronisations and measures the device work queued in it, not only its launches.
    """

    timing = "sync"

    def __init__(self, synchronize: Callable[[], None]) -> None:
        self._synchronize = synchronize
        self.__name__ = "opperf_sync_timer"  # pytest-benchmark prints timers by name

    def __call__(self) -> float:
        self._synchronize()
        return perf_counter()


class EventTimer:
    """A pytest-benchmark timer on the device clock (CUDA events).

    Each call marks the queue, waits, and adds the device time since the previous call's closing
    mark, so the value only advances by device time spent between calls: a round reads as the device
    span of its work. The closing mark is made after recycling, so the pool never hands it out while
    it is still to be read.
    """

    timing = "events"

    def __init__(self, clock: DeviceClock) -> None:
        self._clock = clock
        self._open = clock.mark()
        self._ns = 0
        self.__name__ = "opperf_event_timer"

    def __call__(self) -> float:
        clock = self._clock
        end = clock.mark()
        clock.synchronize()
        self._ns += clock.elapsed_ns(self._open, end)
        clock.recycle()
        self._open = clock.mark()
        return self._ns / 1e9


def benchmark_timer(device: DeviceInfo, timing: str) -> Callable[[], float] | None:
    """The timer per-op benchmarks use on ``device``; ``None`` keeps pytest-benchmark's own."""
    if not device.is_gpu:
        return None
    if timing == "events" and device.clock is not None:
        return EventTimer(device.new_clock() if device.new_clock is not None else device.clock)
    if device.synchronize is not None:
        return SyncTimer(device.synchronize)
    if device.clock is not None:
        return SyncTimer(device.clock.synchronize)
    return None
