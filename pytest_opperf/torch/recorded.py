"""``profile()``'s default mechanism: torch's own profiler records, the stats are built afterwards.

While the window runs, torch's profiler (kineto, CPU activity only, nothing but names and times)
keeps an event for every operator that enters the dispatcher, on every thread its state reaches (the
recording thread and the threads autograd runs backward on, its reentrant pool included): about 0.4
us per event, with no Python on the op's path. Reading the events costs far more (stopping the
profiler about 2.6 us per event, reading them about 0.5 us, then this module's Python), so it is
done when the measured window has closed, after its wall clock stopped
(:meth:`pytest_opperf.measure.Run.defer`), or at the end of ``profile()`` where no window measures.

Building the stats (:func:`op_samples`, :func:`file_samples`, :func:`file_module_samples`; pure,
tested on synthetic events) follows docs/adapters.md: which events are ops
(:func:`op_kind`), the step an op belongs to, ``by="module"``'s attribution. Steps, regions and the
clocks' alignment are :mod:`pytest_opperf.recorded`'s (shared with Paddle's); here:

* Modules: global forward hooks log each module call on the recording thread
  (``perf_counter_ns``); the autograd node an op made is known by the profiler's sequence number on
  its thread, and the engine's range for that node (``autograd::engine::evaluate_function: ...``)
  carries the same sequence number and forward thread.
* Clocks: torch's profiler stamps events with Unix time, from the TSC.
"""

from __future__ import annotations

import bisect
import threading
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from time import perf_counter_ns
from typing import Any, NamedTuple

import torch
from torch._C._profiler import ProfilerActivity, _ExperimentalConfig, _RecordFunctionFast
from torch.autograd.profiler import ProfilerConfig, ProfilerState

from .. import measure, recorded, timers
from ..hookspec import OpPerfWarning
from ..recorded import MARK, Mark, RegionLog, file_samples

__all__ = ["Event", "Mark", "ModuleCall", "ModuleLog", "TorchRecorder", "RegionLog",
           "file_module_samples", "file_samples", "op_kind", "op_samples", "unseen_notes"]

COMPILED_RANGE = "Torch-Compiled Region"  # torch.compile's range around a compiled graph's call
COMPILED_BACKWARD = "CompiledFunctionBackward"  # the autograd node of a compiled graph's backward
BACKWARD_RANGE = "autograd::engine::evaluate_function: "  # autograd's engine opens one per node
OP, TRANSPARENT, NOT_AN_OP = "op", "transparent", "none"
SKIPPED_NAMESPACES = frozenset({"profiler"})  # record_function's ops mark ranges, do no work


class Event(NamedTuple):  # a tuple: one is made per event read, and a dataclass costs twice as much
    """One profiler event: its name, start and end on the profiler's clock, its thread; for
    ``by="module"`` its sequence number (the autograd node an op made, or the node a backward
    range runs; -1 for none) and, for a backward range, the thread that ran the node's forward."""

    name: str
    start: int
    end: int
    thread: int
    seq: int = -1
    fwd_thread: int = 0


_KINDS: dict[str, str] = {}


def op_kind(name: str) -> str:
    """``op`` for a dispatcher operator that runs kernels, ``transparent`` for one that is
    ``CompositeImplicitAutograd`` in every overload, ``none`` for anything else (ranges)."""
    kind = _KINDS.get(name)
    if kind is None:
        kind = _KINDS[name] = _op_kind(name)
    return kind


def _op_kind(name: str) -> str:
    if "::" not in name or " " in name or name.split("::", 1)[0] in SKIPPED_NAMESPACES:
        return NOT_AN_OP
    try:
        found = torch._C._jit_get_operation(name)
    except RuntimeError:
        return NOT_AN_OP
    if found is None or found[1] is None:
        return NOT_AN_OP
    implicit = []
    for overload in found[1]:
        if "out" in overload:
            continue  # out= variants are never what a model calls, and are explicit
        try:
            implicit.append(torch._C._dispatch_has_kernel_for_dispatch_key(
                f"{name}.{overload}" if overload else name, "CompositeImplicitAutograd"))
        except RuntimeError:
            continue  # TorchScript-only overloads (aten::to.prim_Device) are not dispatcher ops
    return TRANSPARENT if implicit and all(implicit) else OP


def op_samples(events: Iterable[Event], nested: bool, kind: Callable[[str], str] = op_kind,
               nodes: list | None = None) -> list[tuple[str, int, int, int]]:
    """The ops of ``events`` as ``(path, start, ns, thread)``: top-level ops by their name;
    with ``nested`` also the ops they call, ``parent/name``. Nesting is per thread, by
    interval (an event inside another's start..end was called by it). ``nodes``, when
    given, gets for each op ``((thread, seq) of the node it made or None, (fwd_thread, seq)
    of the backward range it runs in or None)``."""
    by_thread: dict[int, list[Event]] = {}
    for event in events:
        if event.name != MARK and (kind(event.name) != NOT_AN_OP
                                   or event.name.startswith(BACKWARD_RANGE)):
            by_thread.setdefault(event.thread, []).append(event)
    out = []
    for thread, evs in by_thread.items():
        evs.sort(key=lambda e: (e.start, -e.end))
        # per open event: (end, path of the innermost op open, the backward node being run)
        stack: list[tuple[int, str | None, tuple[int, int] | None]] = []
        for e in evs:
            while stack and stack[-1][0] <= e.start:
                stack.pop()
            enclosing, node = (stack[-1][1], stack[-1][2]) if stack else (None, None)
            path = enclosing
            if e.name.startswith(BACKWARD_RANGE):
                node = (e.fwd_thread, e.seq) if e.seq >= 0 else None
            elif kind(e.name) == OP:
                if enclosing is None or nested:
                    path = e.name if enclosing is None else f"{enclosing}/{e.name}"
                    out.append((path, e.start, e.end - e.start, thread))
                    if nodes is not None:
                        nodes.append(((thread, e.seq) if e.seq >= 0 else None, node))
                else:
                    path = enclosing  # a call inside an op: inside its time, not listed
            stack.append((e.end, path, node))
    return out


@dataclass(frozen=True)
class ModuleCall:
    """One ``nn.Module`` call on the recording thread: its stat name (``Sequential/Block``), its
    class, the index of the call it ran in (or ``None``), its start and end (perf_counter_ns)."""

    key: str
    cls: str
    outer: int | None
    start: int
    end: int


def file_module_samples(table: timers.Table, samples: Sequence[tuple[str, int, int, int]],
                        nodes: Sequence, calls: Sequence[ModuleCall], marks: Sequence[Mark],
                        mark_starts: Sequence[int], regions: RegionLog, steps: int,
                        main_thread: int) -> dict[str, tuple[list[int], list[int]]]:
    """``by="module"``: file ``samples`` (top-level ops, with their ``nodes`` from
    :func:`op_samples`) as module calls into ``table``; return per-step (counts, ns).

    ``calls`` are in the order they ended (inner calls first). An op on the recording
    thread whose middle lies inside a call adds its time to the innermost call (and so to
    the calls around it), and the autograd node it made belongs to that call's class; an op
    run by such a node in backward is a sample of ``<Class>.backward``; other ops keep their
    names. Each call is one sample, in the step its start falls in.
    """
    offsets, step_at, step_starts = recorded.alignment(marks, mark_starts)
    first, last = mark_starts[0], mark_starts[-1]
    by_start = sorted(range(len(calls)), key=lambda i: calls[i].start)
    starts = [calls[i].start for i in by_start]

    def innermost(at: int) -> int | None:
        k = bisect.bisect_right(starts, at) - 1
        c = by_start[k] if k >= 0 else None
        while c is not None and calls[c].end < at:
            c = calls[c].outer
        return c

    per_step: dict[str, tuple[list[int], list[int]]] = {}

    def add(name: str, ns: int, parent: str | None, stamp: int) -> None:  # stamp: profiler's clock
        table.add(name, ns, parent=parent, kernel=True)
        j = bisect.bisect_left(step_starts, stamp)
        if j < len(step_at) and step_at[j][1] < steps:
            counts, totals = per_step.setdefault(name, ([0] * steps, [0] * steps))
            counts[step_at[j][1]] += 1
            totals[step_at[j][1]] += ns

    mark_mids = [(m.before + m.after) // 2 for m in marks]
    call_ns = [0] * len(calls)
    node_cls: dict[tuple[int, int], str] = {}
    outside = []
    for (path, start, ns, thread), (made, runs) in zip(samples, nodes, strict=True):
        if not first <= start <= last:
            continue
        offset = offsets[bisect.bisect_right(mark_starts, start) - 1]
        # by the op's middle: the two clocks' alignment is off by microseconds, an op is longer
        c = innermost(start + ns // 2 - offset) if thread == main_thread else None
        if c is None:
            outside.append((path, start, ns, offset, runs))
            continue
        call_ns[c] += ns
        if made is not None:
            node_cls[made] = calls[c].cls
    for i, call in enumerate(calls):  # inner calls first: each call's time holds its inner calls'
        if call.outer is not None:
            call_ns[call.outer] += call_ns[i]
    events = [(call.start, 0, i) for i, call in enumerate(calls)] + \
        [(start - offset, 1, k) for k, (_p, start, _ns, offset, _r) in enumerate(outside)]
    for at, what, i in sorted(events):  # filed in the order they began
        if what == 0:
            call = calls[i]
            parent = calls[call.outer].key if call.outer is not None else regions.at(at)[0]
            offset = offsets[max(bisect.bisect_right(mark_mids, at) - 1, 0)]
            add(call.key, call_ns[i], parent, at + offset)
        else:
            path, start, ns, _offset, runs = outside[i]
            cls = node_cls.get(runs) if runs is not None else None
            name = f"{cls}.backward" if cls is not None else path
            parent, qualifier, _depth = regions.at(at)
            add(f"{qualifier}/{name}" if qualifier is not None else name, ns, parent, start)
    return per_step


def _outermost(events: Iterable[Event]) -> list[Event]:
    """The events not inside another of them on the same thread."""
    out: list[Event] = []
    for e in sorted(events, key=lambda e: (e.thread, e.start, -e.end)):
        if out and out[-1].thread == e.thread and e.end <= out[-1].end:
            continue
        out.append(e)
    return out


def _ms(ns: int) -> str:
    return f"{ns / 1e6:.1f} ms"


def unseen_notes(other_ops: Sequence[tuple[str, int, int, int]],
                 compiled: Sequence[Event], filed: Sequence[tuple[str, int, int, int]],
                 window: tuple[int, int], wall_s: float | None) -> list[str]:
    """The ``note:`` lines for what the window held that ``profile()`` does not file as kernel
    stats, each with its share of the window's wall time (``wall_s``; unknown: ``None``):

    * ``other_ops`` (top-level ops, as :func:`op_samples` gives them) ran on threads other than the
      window's and autograd's (a thread pool, a data loader): the time the window's thread spent
      waiting for them, or beside them, counts as untimed;
    * ``compiled`` regions (``torch.compile``'s ranges, its backward nodes' ranges) run compiled
      kernels that are not aten ops: their time outside the ``filed`` top-level ops inside them
      counts as untimed.

    ``window``: (first, last) on the profiler's clock; what started outside it is left out."""
    first, last = window

    def share(ns: int) -> str:
        return f" ({ns / 1e9 / wall_s:.1%} of the window's wall time)" if wall_s else ""

    notes = []
    ops = [o for o in other_ops if first <= o[1] <= last]
    if ops:
        threads = len({o[3] for o in ops})
        ns = sum(o[2] for o in ops)
        counts: dict[str, int] = {}
        for name, *_ in ops:
            counts[name] = counts.get(name, 0) + 1
        top = ", ".join(f"{n} x{c}" for n, c in sorted(counts.items(), key=lambda kv: -kv[1])[:3])
        notes.append(
            f"torch: {len(ops)} aten op(s) ran on {threads} thread(s) other than the window's and "
            f"autograd's (a thread pool, a data loader) and are not kernel stats ({top}): "
            f"{_ms(ns)} of op time{share(ns)}; the window's thread waited for them or ran beside "
            "them, and that time counts as untimed, not as kernels")
    regions = [r for r in _outermost(compiled) if first <= r.start <= last]
    if regions:
        ns = sum(r.end - r.start for r in regions)
        by_thread: dict[int, list[Event]] = {}
        for r in regions:
            by_thread.setdefault(r.thread, []).append(r)
        inside = 0
        for path, start, op_ns, thread in filed:
            if "/" in path:
                continue  # a nested op: inside its top-level op's time
            for r in by_thread.get(thread, ()):
                if r.start <= start < r.end:
                    inside += min(op_ns, r.end - start)
                    break
        unexplained = max(0, ns - inside)
        notes.append(
            f"torch: {len(regions)} torch.compile region(s) (forward and backward) ran "
            f"{_ms(ns)}{share(ns)}, {_ms(inside)} of it in aten ops; the other "
            f"{_ms(unexplained)}{share(unexplained)} ran compiled kernels, which are not aten "
            "ops: it counts as untimed, not as kernels")
    return notes


class ForwardHooks:
    """Global forward pre- and post-hooks on every ``nn.Module`` while installed;
    subclasses define ``_pre(mod, args)`` and ``_post(mod, args, output)``."""

    handles: list[Any]

    def _pre(self, mod: Any, args: Any) -> None:
        raise NotImplementedError

    def _post(self, mod: Any, args: Any, output: Any) -> None:
        raise NotImplementedError

    def install(self) -> None:
        from torch.nn.modules import module

        self.handles = [module.register_module_forward_pre_hook(self._pre),
                        module.register_module_forward_hook(self._post)]

    def remove(self) -> None:
        for handle in getattr(self, "handles", ()):
            handle.remove()
        self.handles = []


class ModuleLog(ForwardHooks):
    """Forward hooks on every module: the calls made on the recording thread."""

    def __init__(self) -> None:
        self.thread = threading.get_ident()
        self.calls: list[ModuleCall] = []
        self.frames: list[tuple[str, str, int, list[int]]] = []  # open: key, class, start, inner
        self.handles: list[Any] = []

    def _pre(self, mod: Any, args: Any) -> None:
        if threading.get_ident() != self.thread:
            return
        cls = type(mod).__name__
        key = f"{self.frames[-1][0]}/{cls}" if self.frames else cls
        self.frames.append((key, cls, perf_counter_ns(), []))

    def _post(self, mod: Any, args: Any, output: Any) -> None:
        end = perf_counter_ns()
        if threading.get_ident() != self.thread or not self.frames:
            return
        key, cls, start, inner = self.frames.pop()
        index = len(self.calls)
        self.calls.append(ModuleCall(key, cls, None, start, end))
        for i in inner:
            c = self.calls[i]
            self.calls[i] = ModuleCall(c.key, c.cls, index, c.start, c.end)
        if self.frames:
            self.frames[-1][3].append(index)


class TorchRecorder(recorded.ProfilerRecorder):
    """torch's profiler over one ``profile()`` window of ``table``; :meth:`finish` files the ops."""

    def __init__(self, table: timers.Table, nested: bool, run: measure.Run | None,
                 by: str = "op") -> None:
        super().__init__(table, run)
        self.nested = nested
        self.modules = ModuleLog() if by == "module" else None

    def make_event(self, name: str) -> None:
        with _RecordFunctionFast(name):
            pass

    def start_profiler(self) -> None:
        if torch.autograd._profiler_enabled():
            raise RuntimeError("profile(): torch's profiler is already running on this thread; use "
                               "profile(mechanism='dispatch') inside torch.profiler.profile()")
        # every thread: the ops of threads that are neither the window's nor autograd's are
        # not filed, but counted in a note (nothing is dropped silently)
        config = ProfilerConfig(ProfilerState.KINETO, False, False, False, False, False,
                                _ExperimentalConfig(profile_all_threads=True))
        torch.autograd._prepare_profiler(config, {ProfilerActivity.CPU})
        torch.autograd._enable_profiler(config, {ProfilerActivity.CPU})

    def on_started(self) -> None:
        if self.modules is not None:
            self.modules.install()

    def on_closing(self) -> None:
        if self.modules is not None:
            self.modules.remove()

    def stop_profiler(self) -> Any:
        return torch.autograd._disable_profiler()

    def read_profile(self, result: Any, steps: int) -> dict[str, tuple[list[int], list[int]]]:
        events, mark_starts, main_thread = [], [], 0
        engine_threads: set[int] = set()  # threads autograd's engine ran backward on
        compiled: list[Event] = []
        modules = self.modules
        kinds = _KINDS
        for e in result.events():
            name = e.name()
            kind = kinds.get(name) or op_kind(name)
            if name == MARK:
                mark_starts.append(e.start_ns())
                main_thread = e.start_thread_id()
                continue
            if name.startswith(BACKWARD_RANGE):
                engine_threads.add(e.start_thread_id())
            if name.startswith(COMPILED_RANGE) or name == BACKWARD_RANGE + COMPILED_BACKWARD:
                compiled.append(Event(name, e.start_ns(), e.end_ns(), e.start_thread_id()))
            if modules is not None and (kind != NOT_AN_OP or name.startswith(BACKWARD_RANGE)):
                events.append(Event(name, e.start_ns(), e.end_ns(), e.start_thread_id(),
                                    e.sequence_nr(), e.fwd_thread_id()))
            elif kind != NOT_AN_OP:
                events.append(Event(name, e.start_ns(), e.end_ns(), e.start_thread_id()))
        mark_starts.sort()
        ours = engine_threads | {main_thread}
        other = [e for e in events if e.thread not in ours]
        events = [e for e in events if e.thread in ours]
        if modules is not None:
            nodes: list = []
            samples = op_samples(events, False, nodes=nodes)
            per_step = file_module_samples(self.table, samples, nodes, modules.calls, self.marks,
                                           mark_starts, self.regions, steps, main_thread)
        else:
            samples = op_samples(events, self.nested)
            trace, trace_events = self.trace()
            per_step = file_samples(self.table, samples, self.marks, mark_starts, self.regions,
                                    steps, trace, trace_events)
        self._note_unseen(other, compiled, samples, mark_starts)
        return per_step

    def _note_unseen(self, other: list[Event], compiled: list[Event],
                     filed: Sequence[tuple[str, int, int, int]], mark_starts: list[int]) -> None:
        """Notes on the ops of other threads and the compiled regions (:func:`unseen_notes`):
        under the run, or as warnings where no run measures."""
        if not mark_starts or not (other or compiled):
            return
        window = (mark_starts[0], mark_starts[-1])
        wall_s = self.run.wall_s if self.run is not None else None
        for note in unseen_notes(op_samples(other, False), compiled, filed, window, wall_s):
            if self.run is not None:
                self.run.add_note(note)
            else:
                warnings.warn(note, OpPerfWarning, stacklevel=4)
