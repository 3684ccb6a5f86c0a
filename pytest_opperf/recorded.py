"""A framework's own profiler over a measured window, read after the window: the shared mechanics.

``pytest_opperf.torch.profile()`` (torch's profiler) and ``pytest_opperf.paddle.profile()``
(Paddle's host tracer) record the same way: the framework's profiler keeps an event per operator
while the window runs, and the events are read and filed as kernel stats once the window has
closed, after its wall clock stopped (:meth:`pytest_opperf.measure.Run.defer`), or at the end of
``profile()`` where no window measures. This module is that part, with no framework import:

* Steps: ``run.step()`` (the recording's flush) drops a marker event into the profiler's stream;
  ops that start after the last one are in the totals only, as live timing would have them.
* Regions: the recording thread's open region (``timers.timer``) is logged with ``perf_counter_ns``
  at every change (for the window the table's class is :class:`WatchedTable`, whose ``current``
  is a property that logs what it is set to); an op is filed inside the region open on the
  recording thread when it started, on whatever thread it ran, as
  :meth:`pytest_opperf.timers.Table.record` files it.
* Clocks: a profiler stamps events on its own clock; each marker is made between two
  ``perf_counter_ns`` reads, which gives the offset between the clocks at that marker (to well
  under a microsecond); a time is converted with the offset of the last marker before it.

:func:`file_samples` is pure (tested on synthetic samples); :class:`ProfilerRecorder` is the life
cycle a framework's recorder fills in (its public hooks: start, make an event, stop, read), and
:func:`read_after_window` hands a recorder to the run, to be read when its window closes.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from time import perf_counter_ns
from typing import Any

from . import measure, timers

__all__ = ["MARK", "WARM_UP", "Mark", "ProfilerRecorder", "RegionLog", "WatchedTable", "alignment",
           "file_samples", "read_after_window"]

MARK = "opperf::mark"  # the name of the marker events (never an operator)
WARM_UP = "opperf::warm_up"


@dataclass(frozen=True)
class Mark:
    """A marker event made between ``before`` and ``after`` (``perf_counter_ns``); ``step``:
    the step it ends (0-based), or ``None`` for the markers at the start and end of the window."""

    before: int
    after: int
    step: int | None


@dataclass
class RegionLog:
    """The recording thread's open region at every change: ``times`` (``perf_counter_ns``) and
    ``states``, each ``(parent, qualifier, depth)``: the stat an op would be filed under, the
    kernel stat that qualifies its name (or ``None``), and how many regions are open."""

    times: list[int] = field(default_factory=list)
    states: list[tuple[str | None, str | None, int]] = field(default_factory=list)

    def set(self, now: int, region: Any) -> None:
        parent = region.stat.name if region is not None else None
        enclosing, depth, outer = region, 0, region
        while outer is not None:
            depth, outer = depth + 1, outer.outer
        while enclosing is not None and not enclosing.kernel:
            enclosing = enclosing.outer
        self.times.append(now)
        self.states.append((parent, enclosing.stat.name if enclosing is not None else None, depth))

    def at(self, t: int) -> tuple[str | None, str | None, int]:
        i = bisect.bisect_right(self.times, t) - 1
        return self.states[i] if i >= 0 else (None, None, 0)


# A marker made in more than the narrowest marker's time plus this was interrupted (a garbage
# collection, a preemption): when its event was stamped within its span is unknown.
MARK_SLACK_NS = 20_000


def alignment(marks: Sequence[Mark], mark_starts: Sequence[int]
              ) -> tuple[list[int], list[tuple[int, int]], list[int]]:
    """From the markers made and their events read: each marker's clock offset (profiler time minus
    ``perf_counter_ns``), the (profiler time, step) of the step markers, and those times alone.

    A marker's offset is its event's time minus the middle of its span, except for a marker whose
    making was interrupted (its span more than :data:`MARK_SLACK_NS` above the narrowest's): it
    takes the offset of the nearest marker that was not. Its own middle could be milliseconds off
    (a collection of a big heap inside it), and every op of its step with it, filed outside the
    module call or region it ran in."""
    if len(marks) != len(mark_starts) or len(marks) < 2:
        raise ValueError(f"profile(): {len(mark_starts)} marker events read for {len(marks)} "
                         "markers made (at least the window's start and end are needed)")
    offsets = [start - (m.before + m.after) // 2 for m, start in zip(marks, mark_starts,
                                                                     strict=True)]
    spans = [m.after - m.before for m in marks]
    limit = min(spans) + MARK_SLACK_NS
    trusted = [i for i, span in enumerate(spans) if span <= limit]
    at = [marks[i].before for i in trusted]  # markers are made in order: sorted
    for i, m in enumerate(marks):
        if spans[i] > limit:
            k = bisect.bisect_left(at, m.before)
            near = min((j for j in (k - 1, k) if 0 <= j < len(trusted)),
                       key=lambda j: abs(at[j] - m.before))
            offsets[i] = offsets[trusted[near]]
    step_at = [(start, m.step) for m, start in zip(marks, mark_starts, strict=True)
               if m.step is not None]
    return offsets, step_at, [t for t, _ in step_at]


def file_samples(table: timers.Table, samples: Sequence[tuple[str, int, int, int]],
                 marks: Sequence[Mark], mark_starts: Sequence[int], regions: RegionLog, steps: int,
                 trace: tuple[int, int] | None = None, trace_events: list | None = None,
                 framework: Collection[str] = ()) -> dict[str, tuple[list[int], list[int]]]:
    """File ``samples`` ``(path, start, ns, thread)`` (``a/b``: ``b`` ran inside ``a``; start on
    the profiler's clock) into ``table``; return each stat's per-step (counts, host ns) for the
    first ``steps`` steps.

    ``marks`` and ``mark_starts`` (the marker events' starts on the profiler's clock) are in order;
    the first and last open and close the window, samples outside it are left out. A top-level
    sample goes in the region open on the recording thread at its start; a nested one under its
    enclosing sample's stat. Samples are kernel stats, except those whose own name is in
    ``framework`` (an executor's run, as ``ExecutorRunTimer``): a sample nested in a kernel is
    named after it (``conv2d/infer_meta``), one nested in a framework stat is not (``conv2d``,
    parent ``StandaloneExecutor::run``), as :func:`pytest_opperf.timers.timer` names regions.
    ``trace`` (start, end in ``perf_counter_ns``): the samples that ran inside it are appended to
    ``trace_events`` as the table's trace keeps regions, ``(name, start_ns, ns, depth)``.
    """
    offsets, step_at, step_starts = alignment(marks, mark_starts)
    first, last = mark_starts[0], mark_starts[-1]
    per_step: dict[str, tuple[list[int], list[int]]] = {}
    # path -> stat name, depth, and the kernel stat that qualifies what runs inside it
    filed: dict[str, tuple[str, int, str | None]] = {}
    parent: str | None
    for path, start, ns, _thread in sorted(samples, key=lambda s: s[1]):
        if not first <= start <= last:
            continue
        if "/" in path:  # ran inside another sample: under its stat
            parent_path, short = path.rsplit("/", 1)
            if parent_path not in filed:
                continue  # its enclosing sample started before the window
            parent, depth, qualifier = filed[parent_path]
            depth += 1
        else:
            short = path
            offset = offsets[bisect.bisect_right(mark_starts, start) - 1]
            parent, qualifier, depth = regions.at(start - offset)
        kernel = short not in framework
        name = f"{qualifier}/{short}" if qualifier is not None else short
        filed[path] = (name, depth, name if kernel else qualifier)
        table.add(name, ns, parent=parent, kernel=kernel)
        if trace is not None and trace_events is not None:
            at = start - offsets[bisect.bisect_right(mark_starts, start) - 1]
            if trace[0] <= at and at + ns <= trace[1]:
                trace_events.append((short, at - trace[0], ns, depth))
        j = bisect.bisect_left(step_starts, start)
        if j < len(step_at) and step_at[j][1] is not None and step_at[j][1] < steps:
            counts, totals = per_step.setdefault(name, ([0] * steps, [0] * steps))
            counts[step_at[j][1]] += 1
            totals[step_at[j][1]] += ns
    return per_step


class WatchedTable(timers.Table):
    """A table whose open region is logged at every change (for the ops read afterwards)."""

    @property
    def current(self) -> Any:
        return self.__dict__["current"]

    @current.setter
    def current(self, region: Any) -> None:
        self.__dict__["current"] = region
        log = self.__dict__.get("_opperf_regions")
        if log is not None:
            log.set(perf_counter_ns(), region)


class ProfilerRecorder:
    """A framework's profiler over one ``profile()`` block of ``table``; :meth:`finish` files its
    ops. Subclasses start and stop the profiler, drop a marker event into it and read it:
    :meth:`start_profiler`, :meth:`make_event`, :meth:`stop_profiler`, :meth:`read_profile`, and
    optionally :meth:`on_started` and :meth:`on_closing` around the block (the seams a framework's
    adapter fills in; the rest is this class's)."""

    def __init__(self, table: timers.Table, run: measure.Run | None) -> None:
        self.table, self.run = table, run
        self.marks: list[Mark] = []
        self.regions = RegionLog()
        self.closed = False
        self.finished = False
        self.left_by: str | None = None  # the exception that left the block (keep_on_error)
        self._lock = threading.Lock()

    # --- what a framework fills in ---------------------------------------------------

    def start_profiler(self) -> None:
        """Start the framework's profiler (raise when it cannot be)."""
        raise NotImplementedError

    def make_event(self, name: str) -> None:
        """Make one event named ``name`` (:data:`MARK`, :data:`WARM_UP`) in the profiler's
        stream, on this thread."""
        raise NotImplementedError

    def stop_profiler(self) -> Any:
        """Stop the profiler and return what it recorded (called once)."""
        raise NotImplementedError

    def read_profile(self, result: Any, steps: int) -> dict[str, tuple[list[int], list[int]]]:
        """File the ops of ``result`` into the table; per-step (counts, ns) of the first
        ``steps`` steps (:func:`file_samples` does most of it)."""
        raise NotImplementedError

    def on_started(self) -> None:
        """Called once the profiler and the markers are set up (e.g. to install hooks)."""

    def on_closing(self) -> None:
        """Called at the end of the ``profile()`` block (e.g. to remove hooks)."""

    # --- the life cycle -----------------------------------------------------------------

    def mark(self, step: int | None) -> None:
        before = perf_counter_ns()
        self.make_event(MARK)
        self.marks.append(Mark(before, perf_counter_ns(), step))

    def start(self) -> None:
        self.start_profiler()
        try:
            table = self.table
            # for the window the table is its subclass that logs each change of its open region
            table.__class__ = WatchedTable
            table.__dict__["_opperf_regions"] = self.regions
            self.regions.set(perf_counter_ns(), table.current)
            table.on_flush(self._on_flush)
            for _ in range(2):  # the first events made cost tens of microseconds: not a marker's
                self.make_event(WARM_UP)
            self.mark(None)
            self.on_started()
        except BaseException:
            self.abandon()
            raise

    def _on_flush(self) -> None:
        if not self.closed:  # a run.step(): the step being ended is the run's count of steps so far
            self.mark(self.run.batches if self.run is not None else None)

    def close(self) -> None:
        """The end of ``profile()``: later ops are not the window's (read in :meth:`finish`)."""
        self.on_closing()
        self.mark(None)
        self.closed = True
        table = self.table
        table.__dict__.pop("_opperf_regions", None)
        table.__class__ = timers.Table

    def stop(self) -> Any:
        with self._lock:
            if self.finished:
                return None
            self.finished = True
        if not self.closed:
            self.close()
        return self.stop_profiler()

    def finish(self, steps: int | None = None) -> None:
        """Stop the profiler, read its events and file the window's ops (and per-step samples
        into the run, for its first ``steps`` steps)."""
        result = self.stop()
        if result is None:
            return
        steps = steps if steps is not None else (self.run.batches if self.run is not None else 0)
        per_step = self.read_profile(result, steps)
        if self.run is not None:
            for name, (counts, totals) in per_step.items():
                self.run.add_step_samples(name, counts, [ns / 1e6 for ns in totals])

    def abandon(self) -> None:
        """Stop the profiler and keep nothing (the window was left by an exception)."""
        self.stop()

    def trace(self) -> tuple[tuple[int, int] | None, list | None]:
        """The step ``--opperf-trace`` keeps (start, end in ``perf_counter_ns``) and its events."""
        run = self.run
        traced = run._trace_events if run is not None else None
        if run is None or not traced:
            return None, None
        return (run._trace_start_ns, run._trace_start_ns + traced["dur_ns"]), traced["events"]


@contextmanager
def read_after_window(recorder: ProfilerRecorder, unread: dict[int, ProfilerRecorder],
                      keep_on_error: bool = False) -> Iterator[None]:
    """Run ``recorder`` over the block; its ops are filed when the run's window closes (after its
    wall clock stopped), or at the end of the block without a run. ``unread`` holds, by table, a
    recorder whose block has ended and whose window has not closed: an earlier ``profile()`` of
    the same window, read before the framework's profiler starts again.

    A block left by an exception stops the profiler and keeps nothing, unless ``keep_on_error``
    and a run measures: then what was recorded up to the exception is filed when the window
    closes (if the exception leaves the window too, nothing is kept), and
    ``recorder.left_by`` names the exception."""
    table, run = recorder.table, recorder.run
    earlier = unread.pop(id(table), None)
    if earlier is not None:
        earlier.finish()
    recorder.start()
    try:
        yield
    except BaseException as exc:
        if not keep_on_error or run is None:
            recorder.abandon()
            raise
        recorder.left_by = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        _read_when_closed(recorder, run, unread)
        raise
    if run is None:
        recorder.finish()
        return
    _read_when_closed(recorder, run, unread)


def _read_when_closed(recorder: ProfilerRecorder, run: measure.Run,
                      unread: dict[int, ProfilerRecorder]) -> None:
    table = recorder.table
    recorder.close()
    unread[id(table)] = recorder

    def read(closed: bool) -> None:
        if unread.get(id(table)) is recorder:
            del unread[id(table)]
        if closed:
            recorder.finish()
        else:
            recorder.abandon()

    run.defer(read)
