"""Measured windows: wall clock, a timers recording and per-step samples, turned into RunResults.

``measure_window`` is what ``opperf.measure()`` opens. Each ``run.step()`` snapshots every stat's
(count, total) and keeps the difference from the last snapshot, so each stat gets one sample per
step and a per-step count. The first step also holds whatever ran before it in the window (model
building, startup); the gate treats it as warm-up when there are at least two steps.

:func:`op_run` turns a per-op benchmark's round samples into a run of kind ``op`` (or ``overhead``).
No pytest import: this is plain bookkeeping.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from time import perf_counter_ns
from typing import Any

from . import timers
from .core.port import Window
from .core.stats import most_common
from .device import DeviceInfo
from .results import RunResult, StatResult, warmup_rule
from .stattree import Shares, StatTree
from .workcounts import workcount

__all__ = ["CountingRun", "CountingPassTimeout", "Run", "active_run", "counting_window",
           "in_window", "measure_window", "op_run", "MAX_OP_SAMPLES"]

# Per-op benchmarks may run 10^5 rounds; an evenly spaced subset keeps files small
# and still gives the rank test far more samples than it needs.
MAX_OP_SAMPLES = 500


class CountingRun:
    """The run handed out without ``--opperf``: ``step()`` only counts."""

    def __init__(self) -> None:
        self.examples = 0
        self.batches = 0
        self.result: RunResult | None = None

    def step(self, examples: int = 0) -> None:
        self.examples += examples
        self.batches += 1

    def add_work(self, stat: str, flops: float = 0.0, bytes: float = 0.0) -> None:
        pass

    def counting_pass(self, step: Callable[[], object], steps: int | None = None) -> None:
        """Nothing to count without ``--opperf``: ``step`` is not called."""


class CountingPassTimeout(BaseException):
    """Raised inside a counted step whose pass ran past its time limit (a BaseException, so that
    the framework's ``except Exception`` does not take it for its own)."""


class Run:
    """The handle of one measured window; the suite calls :meth:`step` per batch. ``window``:
    what the session's role gives the window (:class:`pytest_opperf.core.port.Window`)."""

    def __init__(self, run_id: str, kind: str, config: Mapping[str, Any] | None, device: DeviceInfo,
                 timing: str, executor_stat: str, trace: bool = False,
                 window: Window | None = None, test: str | None = None) -> None:
        window = window or Window()
        self.id = run_id
        self.test = run_id if test is None else test  # the node id of the test that opened it
        self.kind = kind
        self.config = dict(config or {})
        self.device = device
        self.timing = timing
        self.executor_stat = executor_stat
        self.examples = 0
        self.batches = 0
        self.result: RunResult | None = None
        self._trace = trace
        self._trace_done = False
        self._trace_events: dict[str, Any] | None = None
        self._trace_start_ns = 0
        self._table: timers.Table | None = None
        self._start_ns = 0
        self._last_ns = 0
        self._last: dict[str, tuple[int, float]] = {}
        self._step_totals: dict[str, list[float]] = {}
        self._step_counts: dict[str, list[int]] = {}
        self._step_ms: list[float] = []
        self._step_examples: list[int] = []
        self._work: dict[str, list[float]] = {}
        self.count_warnings: list[str] = []  # per-step counts that vary: the plugin warns
        self.annotate = window.annotate  # profiler ranges (NVTX) around regions and steps, or None
        self._kernels_note: str | None = None  # set by kernels_are_executor()
        self._framework_executor: tuple[str, str] | None = None  # set by executor_stat_is()
        self._deferred: list[Callable[[bool], None]] = []  # set by defer()
        # A/B: called after each step (device synchronised); the time it takes is not the window's
        self._after_step = window.after_step
        self._paused_ns = 0
        self._notes: list[str] = []  # set by add_note()
        self.wall_s: float | None = None  # set when the window closes, before deferred callbacks
        self.count_steps = window.count_steps  # steps of the counting pass (0: none)
        self.count_timeout_s = window.count_timeout_s
        self.count_root = window.count_root  # the checkout the counted functions' files are under
        self._counter = window.counter  # the valgrind child: callgrind counts the pass instead
        self._after_count = window.after_count  # --opperf-instructions: after the pass
        self._counted = False
        self._count_clock: Callable[[], int] = perf_counter_ns  # the pass's clock (ns; tests)

    # --- used by suites --------------------------------------------------------

    def step(self, examples: int = 0) -> None:
        """End one step (one batch of ``examples``): take per-step samples and counts."""
        table = self._table
        if table is None:
            raise RuntimeError(f"run {self.id!r}: step() called outside its measure() window")
        if isinstance(examples, bool) or not isinstance(examples, int) or examples < 0:
            raise ValueError(f"run {self.id!r}: step(examples=...) expects an int >= 0, "
                             f"given {examples!r}")
        table.flush()  # one device sync per step resolves the step's kernel times
        now = perf_counter_ns()
        self._end_trace_step(now)
        steps = len(self._step_ms)
        last = self._last
        for name, stat in table.items():
            count, total = stat.count, stat.total_ms
            prev_count, prev_total = last.get(name, (0, 0.0))
            if name not in self._step_totals:  # first seen now: zero for the steps before
                self._step_totals[name] = [0.0] * steps
                self._step_counts[name] = [0] * steps
            self._step_totals[name].append(total - prev_total)
            self._step_counts[name].append(count - prev_count)
            last[name] = (count, total)
        self._step_ms.append((now - self._last_ns) / 1e6)
        self._step_examples.append(examples)
        self.examples += examples
        self.batches += 1
        self._last_ns = now
        if self._after_step is not None:
            self._after_step(self)
            resumed = perf_counter_ns()
            self._paused_ns += resumed - now
            self._last_ns = resumed
        self._begin_trace_step()
        if self.annotate is not None:
            self.annotate.start_step(self.batches + 1)

    def add_work(self, stat: str, flops: float = 0.0, bytes: float = 0.0) -> None:
        """Add FLOPs and bytes moved by ``stat`` in this step (for GFLOP/s in the report)."""
        for key, value in (("flops", flops), ("bytes", bytes)):
            if (isinstance(value, bool) or not isinstance(value, (int, float))
                    or not math.isfinite(value) or value < 0):
                raise ValueError(f"run {self.id!r}: add_work({stat!r}, {key}=...) expects a finite "
                                 f"number >= 0, given {value!r}")
        work = self._work.setdefault(stat, [0.0, 0.0])
        work[0] += flops
        work[1] += bytes

    def counting_pass(self, step: Callable[[], object], steps: int | None = None) -> None:
        """The counting pass, after the window has closed: call ``step()`` (one training step,
        as in the window) ``steps`` times (default: ``--opperf-count-steps``; 0: no pass) and
        count the Python work of each (:mod:`pytest_opperf.workcounts.workcount`) into
        ``result.work``.

        The pass is timed by nothing, so the window's timing is never perturbed. A step that
        raises, one that removes or replaces the tracer or profiler, or a pass that runs past
        ``--opperf-count-timeout`` (inside a step too), ends the pass: the run keeps
        its timed results, gets no work counts, and a ``note:`` line says why (the exception is
        not raised into the test)."""
        if self.result is None:
            raise RuntimeError(f"run {self.id!r}: counting_pass() runs after the measure() window "
                               "has closed (its timing must not see the counting), not inside it")
        if self._counted:
            raise RuntimeError(f"run {self.id!r}: counting_pass() was already called: one pass "
                               "per run")
        if steps is None:
            steps = self.count_steps
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise ValueError(f"run {self.id!r}: counting_pass(steps=...) expects an int >= 0, "
                             f"given {steps!r}")
        if not callable(step):
            raise TypeError(f"run {self.id!r}: counting_pass(step) expects a callable, given "
                            f"{step!r}")
        self._counted = True
        if steps == 0:
            return
        if self._counter is not None:  # the valgrind child of --opperf-instructions: callgrind
            self._counter(self, step, steps)
            return
        result = self.result
        start = self._count_clock()
        deadline = start + int(self.count_timeout_s * 1e9)
        per_step: list[dict[str, list[int]]] = []
        functions: list[dict[str, list[workcount.FunctionCounts]]] = []
        with timers.recording() as table:  # the window's regions, recorded apart from its stats
            counter = workcount.Counter(table, deadline, CountingPassTimeout, self._count_clock)
            try:
                for _ in range(steps):
                    counter.start()
                    try:
                        step()
                    finally:
                        counter.stop()
                    if counter.timed_out:  # the step caught the timeout, or ended past it
                        raise CountingPassTimeout
                    if counter.tampered is not None:  # its counts are partial: none at all
                        result.notes.append(f"counting pass: no work counts, step "
                                            f"{len(per_step) + 1} of {steps} changed the "
                                            f"tracing the counts come from: {counter.tampered}")
                        return
                    per_step.append(counter.take(self.count_root))
                    functions.append(counter.functions)
            except CountingPassTimeout:
                result.notes.append(f"counting pass: no work counts, it ran past the "
                                    f"{self.count_timeout_s:g} s limit (--opperf-count-timeout) "
                                    f"in step {len(per_step) + 1} of {steps}")
                return
            except Exception as exc:  # the step's own failure: the timed results stand
                text = " ".join(f"{type(exc).__name__}: {exc}".split())
                result.notes.append(f"counting pass: no work counts, step {len(per_step) + 1} of "
                                    f"{steps} raised {text[:300]}")
                return
        work = workcount.WorkCounts.of_steps(per_step, (self._count_clock() - start) / 1e9,
                                             functions)
        if work.varies:
            shown = "; ".join(work.varies[:3]) + ("; ..." if len(work.varies) > 3 else "")
            result.notes.append(f"work counts vary across the {steps} counted steps (the most "
                                f"common kept): {shown}")
        result.work = work
        if self._after_count is not None:
            self._after_count(self, step, steps)

    def kernels_are_executor(self, note: str) -> None:
        """Take executor time to be kernel time (the time inside top-level operators),
        for frameworks that run ops without an executor (PyTorch); ``note`` says so
        in the report. An executor stat, when the run has one, still takes precedence."""
        self._kernels_note = note

    def executor_stat_is(self, name: str, note: str) -> None:
        """Take stat ``name`` as executor time when the run has it (a framework profiler's executor
        event: Paddle's ``StandaloneExecutor::run``), with ``note`` in the report; the run's own
        executor stat (``ExecutorRunTimer``), when it has one, still takes precedence."""
        self._framework_executor = (name, note)

    def defer(self, callback: Callable[[bool], None]) -> None:
        """Call ``callback(True)`` when the window closes, after its wall clock stopped and
        before its result is built: a recorder read after the window (torch's profiler)
        files its stats then, and their per-step samples with :meth:`add_step_samples`.
        A window left by an exception calls ``callback(False)`` (stop, keep nothing)."""
        self._deferred.append(callback)

    def add_note(self, note: str) -> None:
        """A ``note:`` line of the run's report: instrumentation saying what it did, or what it
        could not see (each text once)."""
        if note not in self._notes:
            self._notes.append(note)

    def add_step_samples(self, name: str, counts: list[int], totals_ms: list[float]) -> None:
        """Add per-step counts and totals of stat ``name``, one per step taken so far, as
        :meth:`step` would have taken them (for stats filed after the steps, see :meth:`defer`)."""
        steps = len(self._step_ms)
        if len(counts) != steps or len(totals_ms) != steps:
            given = f"given {len(counts)} counts and {len(totals_ms)} totals"
            raise ValueError(f"run {self.id!r}: add_step_samples({name!r}) expects {steps} "
                             f"per-step values, {given}")
        have_counts = self._step_counts.setdefault(name, [0] * steps)
        have_totals = self._step_totals.setdefault(name, [0.0] * steps)
        for i in range(steps):
            have_counts[i] += counts[i]
            have_totals[i] += totals_ms[i]
        stat = self._table.get(name) if self._table is not None else None
        if stat is not None:  # a later step() takes only what is added after this
            self._last[name] = (stat.count, stat.total_ms)

    def _run_deferred(self, closed: bool) -> None:
        deferred, self._deferred = self._deferred, []
        for callback in deferred:
            callback(closed)

    # --- window ----------------------------------------------------------------

    def _open(self, table: timers.Table) -> None:
        self._table = table
        self._other_threads = timers.other_thread_regions()
        self._start_ns = self._last_ns = perf_counter_ns()
        self._begin_trace_step()
        if self.annotate is not None:
            self.annotate.start_step(1)

    def _begin_trace_step(self) -> None:
        # The trace keeps the first step after warm-up (or the only one there is).
        if self._trace and not self._trace_done and self._table is not None:
            self._table.start_trace()
            self._trace_start_ns = perf_counter_ns()

    def _end_trace_step(self, now: int) -> None:
        if not self._trace or self._trace_done or self._table is None:
            return
        events = self._table.stop_trace()
        start = self._trace_start_ns
        self._trace_events = {"step": len(self._step_ms) + 1, "dur_ns": now - start, "events": [
            (name, t - start, dur, depth) for name, t, dur, depth in events]}
        self._trace_done = len(self._step_ms) >= 1  # a second step replaces the warm-up step

    def _close(self) -> RunResult:
        table = self._table
        assert table is not None
        table.flush()
        end = perf_counter_ns()
        if self._trace and not self._trace_done and not self._step_ms:
            self._end_trace_step(end)  # no steps: the trace is the whole window
        elif self._trace and not self._trace_done:
            table.stop_trace()  # an unfinished step after the warm-up one: keep the warm-up step
        self.wall_s = (end - self._start_ns - self._paused_ns) / 1e9
        self._run_deferred(True)
        self._table = None
        self.result = self._result(table, self.wall_s)
        return self.result

    def _unrecorded_notes(self, table: timers.Table) -> list[str]:
        """What the recording could not hold: regions on other threads, exits out of order."""
        notes = []
        before = getattr(self, "_other_threads", {})
        other = {name: n - before.get(name, 0) for name, n in timers.other_thread_regions().items()
                 if n > before.get(name, 0)}
        if other:
            named = ", ".join(f"{name} x{n}" for name, n in sorted(other.items())[:5])
            more = ", ..." if len(other) > 5 else ""
            notes.append(f"{sum(other.values())} region(s) timed on other threads while this "
                         "window was open are not recorded (only the window's own thread is): "
                         f"{named}{more}")
        if table.misnested:
            notes.append(f"{table.misnested} region exit(s) out of order (first: "
                         f"{table.first_misnested}); stats first seen after it may have the wrong "
                         "parent")
        return notes

    def _counts(self, notes: list[str]) -> dict[str, int]:
        if not self._step_ms:
            return {}
        first = warmup_rule(len(self._step_ms))  # the steps that are warm-up
        counts = {}
        for name, per_step in self._step_counts.items():
            warm = per_step[first:]
            value, agree = most_common(warm)
            if not agree:
                note = (f"per-step count of {name} varies ({min(warm)}..{max(warm)}) "
                        f"across steps after warm-up; recorded the most common, {value}")
                notes.append(note)
                self.count_warnings.append(note)
            if value:
                counts[name] = value
        return counts

    def _result(self, table: timers.Table, wall_s: float) -> RunResult:
        notes: list[str] = []
        steps = bool(self._step_ms)
        samples = {name: self._step_totals.get(name, []) for name in table} if steps else None
        tree = StatTree.from_table(table, samples, self._work)
        executor_name = self.executor_stat if tree.get(self.executor_stat) is not None else None
        framework = self._framework_executor
        if executor_name is None and framework is not None and tree.get(framework[0]) is not None:
            executor_name = framework[0]
            executor_ms = tree.executor_ms(executor_name)
            notes.append(framework[1])
        elif executor_name is None and self._kernels_note is not None:
            executor_ms = tree.kernel_ms
            notes.append(self._kernels_note)
        else:
            executor_ms = tree.executor_ms(executor_name)
            if executor_name is None and len(table):
                notes.append(f"no {self.executor_stat} stat: executor time is the sum of "
                             "top-level stats")
        kernel_ms = tree.kernel_ms
        shares = Shares.of(wall_s * 1e3, executor_ms, kernel_ms)
        if not steps and len(table):
            notes.append("no run.step() calls: counts and samples are not available")
        notes += self._notes
        notes += self._unrecorded_notes(table)
        counts = self._counts(notes)
        return RunResult(
            id=self.id, kind=self.kind, config=self.config, device=self.device.name,
            timing=self.device.timing_label(self.timing), wall_s=wall_s, examples=self.examples,
            batches=self.batches, examples_per_sec=self.examples / wall_s if wall_s > 0 else 0.0,
            sec_per_batch=wall_s / self.batches if self.batches else 0.0,
            python_share=shares.python, stats=tree, counts=counts,
            framework_share=shares.framework, kernel_share=shares.kernel,
            executor_stat=executor_name, executor_ms=executor_ms, kernel_ms=kernel_ms,
            step_ms=list(self._step_ms), step_examples=list(self._step_examples), notes=notes,
            trace=self._trace_events)


class _ActiveRun(threading.local):
    run: Run | None = None
    counting: int = 0  # open windows that only count (opperf.measure() without --opperf)


_active = _ActiveRun()


def active_run() -> Run | None:
    """The run whose measured window is open on this thread (the innermost), or ``None``:
    lets instrumentation that opens inside a window (``pytest_opperf.torch.profile``)
    tell the run how to account for its time."""
    return _active.run


def run_of(table: timers.Table) -> Run | None:
    """The run whose measured window is open on this thread and records into ``table``, or
    ``None`` (no window, or ``table`` is an inner ``timers.recording()``): for instrumentation
    that files into the table it is given (``pytest_opperf.torch.profile``)."""
    run = _active.run
    return run if run is not None and run._table is table else None


def in_window() -> bool:
    """Whether a window is open on this thread: a measured one, or one that only counts."""
    return _active.run is not None or _active.counting > 0


@contextmanager
def counting_window() -> Iterator[CountingRun]:
    """The window ``opperf.measure()`` opens without ``--opperf``: a :class:`CountingRun`;
    instrumentation inside it (``pytest_opperf.paddle.profile``) does nothing."""
    _active.counting += 1
    try:
        yield CountingRun()
    finally:
        _active.counting -= 1


@contextmanager
def measure_window(run: Run) -> Iterator[Run]:
    """Open ``run``'s window: a recording on this thread plus the wall clock.

    The result is built only when the window closes normally; a window left
    by an exception records nothing (its test fails anyway).
    """
    device = run.device
    outer = _active.run
    sync = run.timing == "sync"
    with timers.recording(device_clock=device.clock, sync=sync, annotate=run.annotate) as table:
        run._open(table)
        _active.run = run
        try:
            yield run
        except BaseException:
            run._run_deferred(False)
            run._table = None
            if run._trace and not run._trace_done:
                table.stop_trace()
            raise
        finally:
            if run.annotate is not None:
                run.annotate.end_step()
            _active.run = outer
        run._close()


def _thin(values: list[float], limit: int) -> list[float]:
    """At most ``limit`` evenly spaced values, first and last included."""
    if len(values) <= limit:
        return list(values)
    step = (len(values) - 1) / (limit - 1)
    return [values[round(i * step)] for i in range(limit)]


def op_run(run_id: str, stat: str, round_s: list[float], iterations: int, device: DeviceInfo,
           timing: str, kind: str = "op", config: Mapping[str, Any] | None = None,
           flops: float | None = None, bytes: float | None = None) -> RunResult:
    """A run from a per-op benchmark: ``round_s`` are per-call seconds of each round
    (pytest-benchmark's round time divided by its iterations); ``timing`` is how
    the rounds were timed (events, sync or host); ``flops``/``bytes`` are per call."""
    if not round_s:
        raise ValueError(f"op run {run_id!r}: no benchmark rounds")
    calls = len(round_s) * iterations
    per_call_ms = [t * 1e3 for t in round_s]
    total_ms = sum(per_call_ms) * iterations
    notes = []
    if len(per_call_ms) > MAX_OP_SAMPLES:
        notes.append(f"{len(per_call_ms)} rounds; {MAX_OP_SAMPLES} evenly spaced samples kept")
    s = StatResult(
        name=stat, parent=None, count=calls, total_ms=total_ms, avg_ms=total_ms / calls,
        min_ms=min(per_call_ms), max_ms=max(per_call_ms),
        samples_ms=_thin(per_call_ms, MAX_OP_SAMPLES), kernel=True,
        clock="device" if timing == "events" else "host",
        flops=flops * calls if flops is not None else None,
        bytes=bytes * calls if bytes is not None else None)
    wall_s = total_ms / 1e3
    return RunResult(
        id=run_id, kind=kind, config=dict(config or {}), device=device.name,
        timing=timing, wall_s=wall_s, examples=calls, batches=len(round_s),
        examples_per_sec=calls / wall_s if wall_s > 0 else 0.0, sec_per_batch=wall_s / len(round_s),
        python_share=0.0, stats=StatTree([s]), counts={}, framework_share=0.0,
        kernel_share=1.0 if wall_s > 0 else 0.0, executor_stat=None, executor_ms=total_ms,
        kernel_ms=total_ms, notes=notes)
