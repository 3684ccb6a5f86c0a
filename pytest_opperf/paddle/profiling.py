"""``profile()``: every Paddle operator that runs in a measured window becomes a kernel stat.

Paddle's own profiler records while the window runs: its host tracer keeps an event for every
operator the static executor or dygraph runs, forward, backward and optimizer, on every thread,
with no Python on the op's path. The events are read, and filed as stats, when the window has
closed, after its wall clock stopped (:mod:`pytest_opperf.recorded`, shared with torch); which
events are ops and their names are :mod:`pytest_opperf.paddle.events`'. What it lists and what it
costs are in docs/adapters.md and docs/reference/api.md.

Accounting: the static executor's run (``StandaloneExecutor::run``) is the report's
``ExecutorRunTimer``, so the Python share is what runs outside it. A window with no executor run
(dygraph) takes the time inside top-level ops as executor time, as torch's ``profile()`` does.
The static executor runs its ops on a pool of threads by default, where op times overlap (their
sum was 1.37x the executor's time on ResNet-50); ``profile()`` makes it run them one after another
on the window's thread (``FLAGS_new_executor_serial_run``) for its duration, and says so.
"""

from __future__ import annotations

import gc
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .. import measure, recorded, timers
from ..hookspec import OpPerfPaddleWarning
from .events import EXECUTOR, samples_of
from .support import import_paddle, version_problem

__all__ = ["DYGRAPH_NOTE", "EXECUTOR", "EXECUTOR_NOTE", "PaddleProfile", "profile"]

SERIAL_FLAG = "FLAGS_new_executor_serial_run"
EXECUTOR_NOTE = (f"paddle: executor time is {EXECUTOR} (the static executor's run, as "
                 "ExecutorRunTimer); Python is what runs outside it")
DYGRAPH_NOTE = ("paddle: executor time is the time inside top-level Paddle operators (no static "
                "executor ran); untimed is what runs around them (Python, layers, data handling)")
SERIAL_NOTE = (f"paddle: the static executor ran its ops one after another on the window's thread "
               f"({SERIAL_FLAG}, set by profile()), so that op times add up to its time")
THREADED_NOTE = ("paddle: profile(serial=False): the static executor ran ops on its threads at "
                 "once; their times overlap and may add up to more than the executor's")
HOST_CLOCK_NOTE = ("paddle: op times are host times (on a GPU, the launch, not the device's work): "
                   "profile() reads Paddle's host tracer")
SECOND_PROFILER = ("pytest_opperf.paddle.profile(): another Paddle profiler is alive (a "
                   "paddle.profiler.Profiler object, or a profile() inside profile()); Paddle "
                   "allows one at a time: stop and delete it first")


@dataclass(frozen=True)
class PaddleProfile:
    """What :func:`profile` yields: where it records, and how."""

    table: timers.Table | None  # None when nothing records
    timing: str  # host, or off when nothing records
    serial: bool = True


class PaddleRecorder(recorded.ProfilerRecorder):
    """Paddle's profiler (host tracer) over one ``profile()`` block of ``table``."""

    def __init__(self, table: timers.Table, run: measure.Run | None, nested: bool,
                 serial: bool) -> None:
        super().__init__(table, run)
        self.nested, self.serial = nested, serial
        self.paddle = import_paddle()
        core = self.paddle.base.core
        self._record_event = core._RecordEvent
        self._user_defined = core.TracerEventType.PythonUserDefined
        self._profiler: Any = None
        self._serial_before: bool | None = None

    def start_profiler(self) -> None:
        core = self.paddle.base.core
        options = core.ProfilerOptions()
        options.trace_switch = 1  # the host tracer: CPU events only
        profiler = core._Profiler.create(options, [])
        if profiler is None:  # Paddle's one profiler is taken
            raise RuntimeError(SECOND_PROFILER)
        profiler.prepare()
        profiler.start()
        self._profiler = profiler
        if self.serial:
            self._serial_before = bool(self.paddle.get_flags([SERIAL_FLAG])[SERIAL_FLAG])
            self.paddle.set_flags({SERIAL_FLAG: True})

    def make_event(self, name: str) -> None:
        self._record_event(name, self._user_defined).end()

    def on_closing(self) -> None:
        if self._serial_before is not None:
            self.paddle.set_flags({SERIAL_FLAG: self._serial_before})
            self._serial_before = None

    def stop_profiler(self) -> Any:
        # Paddle's one profiler is free once its object is deleted
        profiler, self._profiler = self._profiler, None
        self.on_closing()
        return profiler.stop() if profiler is not None else None

    def read_profile(self, result: Any, steps: int) -> dict[str, tuple[list[int], list[int]]]:
        # Reading makes a pybind object per event attribute read: with the cyclic garbage
        # collector on, its collections over a test process's heap cost about 8x the reading
        collecting = gc.isenabled()
        gc.disable()
        try:
            read = samples_of(result.get_data(), self.nested)
            trace, trace_events = self.trace()
            per_step = recorded.file_samples(self.table, read.samples, self.marks,
                                             read.mark_starts, self.regions, steps, trace,
                                             trace_events, framework=(EXECUTOR,))
        finally:
            if collecting:
                gc.enable()
        run = self.run
        if run is not None:
            if read.executor_runs:
                run.add_note(SERIAL_NOTE if self.serial else THREADED_NOTE)
            if read.other_threads:
                named = ", ".join(f"{name} x{n}" for name, n in
                                  sorted(read.other_threads.items(), key=lambda kv: -kv[1])[:5])
                more = ", ..." if len(read.other_threads) > 5 else ""
                run.add_note(f"paddle: {sum(read.other_threads.values())} op(s) ran on other "
                             "threads than the window's, filed inside the executor run (or "
                             f"region) open when they started: {named}{more}")
            if self.left_by is not None:
                run.add_note(f"paddle: profile() was left by {self.left_by}; the ops recorded up "
                             "to it are filed")
        return per_step


# profile() blocks ended, read when their window closes
_unread: dict[int, recorded.ProfilerRecorder] = {}


@contextmanager
def profile(nested: bool = False, serial: bool = True) -> Iterator[PaddleProfile]:
    """Time every Paddle operator run inside as a kernel stat of the open window.

    Use it inside ``opperf.measure()`` (``with opperf.measure() as run, profile(): ...``) or
    ``timers.recording()``, in static graph or dygraph. Ops are named as Paddle's kernels
    (``conv2d``, ``conv2d_grad``, ``momentum``), nested under the executor's run
    (``StandaloneExecutor::run``) and the regions open when they ran; per-step counts come from
    ``run.step()``. In ``opperf.measure()`` without ``--opperf`` it does nothing and yields a
    :class:`PaddleProfile` with ``table=None``; outside every window it is an error.
    ``nested=True`` also lists what runs inside each op (``conv2d/infer_meta``,
    ``conv2d/kernel_launch``); ``serial=False`` leaves the static executor's threads as they
    are (op times then overlap).
    """
    table = timers.current()
    if table is None:
        if not measure.in_window():
            raise RuntimeError("pytest_opperf.paddle.profile(): no opperf.measure() window (or "
                               "timers.recording()) is open on this thread, so nothing would "
                               "record its ops: use `with opperf.measure() as run, profile():`")
        yield PaddleProfile(None, "off", serial)  # measure() without --opperf: nothing records
        return
    paddle = import_paddle()
    run = measure.run_of(table)  # None in an inner timers.recording(): not the run's window
    problem = version_problem(paddle.__version__)
    if problem is not None:
        warnings.warn(OpPerfPaddleWarning(problem), stacklevel=3)
        if run is not None:
            run.add_note(f"warning: {problem}")
    if run is not None:
        run.executor_stat_is(EXECUTOR, EXECUTOR_NOTE)
        run.kernels_are_executor(DYGRAPH_NOTE)
        if table.device_clock is not None:
            run.add_note(HOST_CLOCK_NOTE)
    recorder = PaddleRecorder(table, run, nested, serial)
    with recorded.read_after_window(recorder, _unread, keep_on_error=True):
        yield PaddleProfile(table, "host", serial)
