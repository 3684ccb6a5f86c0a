"""Work counts: Python work per step, counted in a short pass after the timed window.

Time on a shared machine resolves a few per cent at best; an overhead regression (a dict copy per
op, a clone that is no longer cached) is far smaller. Counts of the work done are not moved by a
machine's noise: for the same code and the same library versions, every step of every run on
every machine executes the same Python. This module counts, per step, three numbers
(:data:`COUNTERS`):

* ``bytecodes``: Python bytecode instructions executed (``sys.settrace`` with opcode events);
* ``py_calls``: Python functions entered (``sys.setprofile`` ``call`` events, generator
  resumptions included);
* ``c_calls``: built-in (C) functions called from Python (``c_call`` events; calling a type, such
  as ``dict(x)``, is no C call event: the bytecodes still see it).

Why these, on every Python from 3.10: ``sys.settrace``/``sys.setprofile`` exist everywhere and give
exact event counts; ``sys.monitoring`` (3.12+) would be cheaper but would give other counts on other
Pythons, and counts are only compared between runs of the same Python anyway (a version mismatch
makes the comparison advisory). A traced bytecode costs about a microsecond: a step of the
reference framework's small workload (1.3 million bytecodes, 0.7 s) takes two to three times as
long counted, a Python-heavy step more; the tracing never runs in a timed window.

Each count goes to the innermost timed region open when the work was done (its *self* count: a
stat's own code, not the stats nested in it, so one change shows at one stat), or to
:data:`OUTSIDE` (the work outside every region, the Python share's counterpart). What is not
counted, so that the counts stay deterministic: work on other threads (tracing is per thread);
the instrumentation itself (:mod:`pytest_opperf.timers` and this module); thread synchronisation
(``threading``, ``queue``, ``concurrent.futures``: whether a wait happens depends on which thread
finishes first), and whatever these call; weak sets' callbacks (``_weakrefset``: an object that
another thread lets go of dies on whichever thread drops it last); the garbage collector's
callbacks (it is held off during a counted step, after a full collection).

The pass counts ``steps`` steps; the value kept for each count is its most common value over
them (the first step after the window may still fill a cache), and a count that varies is named in
a note.
"""

from __future__ import annotations

import _weakrefset
import builtins
import concurrent.futures
import gc
import math
import os
import platform
import queue
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from time import perf_counter_ns
from types import CodeType, FrameType, ModuleType
from typing import Any

from .. import timers
from ..core.stats import most_common
from .functions import FunctionCounts, bounded, decode, encode, merged, relative_file

__all__ = ["COUNTERS", "LABELS", "OUTSIDE", "Counter", "FunctionCounts", "WorkCounts", "compared",
           "library_versions"]

COUNTERS: tuple[str, ...] = ("bytecodes", "py_calls", "c_calls")
LABELS: dict[str, str] = {"bytecodes": "bytecodes", "py_calls": "Python calls",
                          "c_calls": "C calls", "instructions": "CPU instructions"}
OUTSIDE = "(outside)"  # the stat name of the work outside every timed region
# the libraries whose versions decide whether two runs' counts compare (those imported)
LIBRARIES: tuple[str, ...] = ("numpy", "torch", "paddle", "cupy", "transformers")


def library_versions() -> dict[str, str]:
    """What work counts depend on besides the code: Python's version, those of the imported
    libraries, and the CPUs this process may use (a framework may split its work by them, as the
    reference framework's kernels do)."""
    versions = {"python": platform.python_version(), "cpus": str(_cpus())}
    for name in LIBRARIES:
        module = sys.modules.get(name)
        version = getattr(module, "__version__", None) if module is not None else None
        if isinstance(version, str):
            versions[name] = version
    return versions


@dataclass
class WorkCounts:
    """A run's work counts per step: ``stats`` maps a stat name (or :data:`OUTSIDE`) to its self
    counts by counter name; ``steps`` is how many steps the pass counted, ``pass_s`` its wall
    time, ``versions`` what :func:`library_versions` gave; ``varies`` names the counts that
    differed between the counted steps. ``instructions`` (CPU instructions per step, under
    valgrind) and ``instructions_cpu`` (the CPU they were counted on) are set by
    ``--opperf-instructions``."""

    stats: dict[str, dict[str, int]]
    steps: int
    pass_s: float
    versions: dict[str, str] = field(default_factory=dict)
    varies: list[str] = field(default_factory=list)
    instructions: int | None = None
    instructions_cpu: str | None = None
    # each stat's counts split by Python function, bounded (:mod:`.functions`); None: not kept
    functions: dict[str, list[FunctionCounts]] | None = None

    def total(self, counter: str) -> int:
        """One counter over the whole step (every stat's self count and the outside)."""
        return sum(counts.get(counter, 0) for counts in self.stats.values())

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"steps": self.steps, "pass_s": self.pass_s,
                             "versions": dict(self.versions),
                             "stats": {k: dict(v) for k, v in self.stats.items()}}
        if self.varies:
            d["varies"] = list(self.varies)
        if self.instructions is not None:
            d["instructions"] = self.instructions
            d["instructions_cpu"] = self.instructions_cpu
        if self.functions is not None:
            d["functions"] = encode(self.functions)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str) -> WorkCounts:
        """Parse the ``work`` object of a results file (raises ValueError naming ``where``)."""
        def fail(problem: str) -> ValueError:
            return ValueError(f"{where}: work: {problem}")

        if not isinstance(d, Mapping):
            raise fail("must be an object")
        unknown = set(d) - {"steps", "pass_s", "versions", "stats", "varies", "instructions",
                            "instructions_cpu", "functions"}
        if unknown:
            raise fail(f"unknown field {sorted(unknown)[0]!r}")
        steps, pass_s = d.get("steps"), d.get("pass_s")
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise fail(f"steps must be an int >= 1, got {steps!r}")
        if (isinstance(pass_s, bool) or not isinstance(pass_s, (int, float))
                or not math.isfinite(pass_s) or pass_s < 0):
            raise fail(f"pass_s must be a number >= 0, got {pass_s!r}")
        versions = d.get("versions", {})
        if not isinstance(versions, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in versions.items()):
            raise fail("versions must map names to version strings")
        stats = d.get("stats")
        if not isinstance(stats, Mapping):
            raise fail("stats must be an object")
        parsed: dict[str, dict[str, int]] = {}
        for name, counts in stats.items():
            if not isinstance(counts, Mapping) or not counts:
                raise fail(f"stats[{name!r}] must be an object of counts")
            for counter, n in counts.items():
                if counter not in COUNTERS:
                    raise fail(f"stats[{name!r}]: unknown counter {counter!r}")
                if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                    raise fail(f"stats[{name!r}][{counter!r}] must be an int >= 0, got {n!r}")
            parsed[str(name)] = {str(k): int(v) for k, v in counts.items()}
        varies = d.get("varies", [])
        if not isinstance(varies, list) or not all(isinstance(v, str) for v in varies):
            raise fail("varies must be a list of strings")
        instructions = d.get("instructions")
        if instructions is not None and (isinstance(instructions, bool)
                                         or not isinstance(instructions, int) or instructions < 0):
            raise fail(f"instructions must be an int >= 0, got {instructions!r}")
        cpu = d.get("instructions_cpu")
        if cpu is not None and not isinstance(cpu, str):
            raise fail(f"instructions_cpu must be a string, got {cpu!r}")
        functions = None if d.get("functions") is None else decode(d["functions"], where)
        return cls(parsed, steps, float(pass_s), dict(versions), list(varies), instructions, cpu,
                   functions)

    @classmethod
    def of_steps(cls, per_step: list[dict[str, list[int]]], pass_s: float,
                 functions: list[dict[str, list[FunctionCounts]]] | None = None) -> WorkCounts:
        """The pass's counts from each step's self counts (stat -> one int per counter): the most
        common value of each count over the steps; those that differ are named in ``varies``.
        With ``functions`` (each step's counts by stat and function, :meth:`Counter.functions`),
        a stat's functions are those of the last step that gave the kept counts, bounded
        (:func:`.functions.bounded`)."""
        names = sorted({name for step in per_step for name in step}, key=_outside_last)
        stats: dict[str, dict[str, int]] = {}
        varies = []
        for name in names:
            counts = {}
            for i, counter in enumerate(COUNTERS):
                values = [step.get(name, [0] * len(COUNTERS))[i] for step in per_step]
                value, agree = most_common(values)
                if not agree:
                    varies.append(f"{LABELS[counter]} of {name} ({min(values)}..{max(values)})")
                if value:
                    counts[counter] = value
            if counts:
                stats[name] = counts
        kept = None if functions is None else _step_functions(per_step, functions, stats)
        return cls(stats, len(per_step), pass_s, library_versions(), varies, functions=kept)


def _step_functions(per_step: list[dict[str, list[int]]],
                    functions: list[dict[str, list[FunctionCounts]]],
                    stats: dict[str, dict[str, int]]) -> dict[str, list[FunctionCounts]]:
    """Each stat's functions, bounded, from the last step whose counts of it are the kept ones
    (sums of the rows: the rows of a step that gave other counts would not add up to them)."""
    out = {}
    for name, counts in stats.items():
        want = [counts.get(c, 0) for c in COUNTERS]
        for step, rows in zip(reversed(per_step), reversed(functions), strict=True):
            if step.get(name) == want and name in rows:
                out[name] = bounded(rows[name])
                break
    return out


def compared(base: WorkCounts, new: WorkCounts) -> Iterator[tuple[str, str, int, int]]:
    """Every count either side has: ``(stat, counter, base value, new value)``, a count one side
    lacks being 0 there; stats in name order, counters in :data:`COUNTERS` order."""
    for stat in sorted(set(base.stats) | set(new.stats)):
        was, now = base.stats.get(stat, {}), new.stats.get(stat, {})
        for counter in COUNTERS:
            if counter in was or counter in now:
                yield stat, counter, was.get(counter, 0), now.get(counter, 0)


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _outside_last(name: str) -> tuple[bool, str]:
    return name == OUTSIDE, name


def _skipped_files() -> tuple[frozenset[str], tuple[str, ...]]:
    files = {os.path.normcase(os.path.abspath(f)) for f in
             (timers.__file__, __file__, threading.__file__, queue.__file__, _weakrefset.__file__)}
    return frozenset(files), (os.path.dirname(os.path.abspath(concurrent.futures.__file__)),)


_CHECK_EVERY = 1 << 14  # bytecodes between two looks at the clock
# the built-ins that replace or remove this thread's tracer or profiler (seen as C calls)
_TAMPERING: tuple[Any, ...] = tuple(f for f in (
    sys.settrace, sys.setprofile, getattr(sys, "_settraceallthreads", None),
    getattr(sys, "_setprofileallthreads", None)) if f is not None)


class Counter:
    """Counts the Python work of this thread into the open regions of ``table`` (a recording of
    :mod:`pytest_opperf.timers`), step by step: :meth:`start` and :meth:`stop` around each step,
    then :meth:`take` for its self counts. Past ``deadline_ns`` (``perf_counter_ns``) a counted
    bytecode raises ``timeout`` in the counted code, and ``timed_out`` is set (the tracing ends:
    a trace function that raises is removed). A step that removes or replaces the tracer or
    the profiler (``sys.settrace``, ``sys.setprofile``, their all-threads forms, another tool's
    C tracer) sets ``tampered``: its counts are partial. ``clock`` reads the time in ns."""

    def __init__(self, table: timers.Table, deadline_ns: int | None = None,
                 timeout: type[BaseException] = TimeoutError,
                 clock: Callable[[], int] = perf_counter_ns) -> None:
        self.table = table
        self.deadline_ns = deadline_ns
        self.timeout = timeout
        self.clock = clock
        self.timed_out = False  # set when the deadline passed in a counted step
        self.tampered: str | None = None  # how the step changed the tracing, if it did
        # the counts of the function running now, in the region open now: [bytecodes, py_calls,
        # c_calls, its C calls by callee]
        self._current: list[list[Any]] = [_new_bucket()]
        self._opcode = self._make_opcode()
        self._depth = 0  # skipped frames open now: nothing they call is counted
        self._saved: tuple[Any, Any, bool] | None = None
        # per stat name, the buckets of its functions by code (None: no Python frame)
        self._counts: dict[str, dict[CodeType | None, list[Any]]] = {}
        self._funcs: dict[CodeType | None, list[Any]] = {}  # the open region's
        self._skip: dict[CodeType, bool] = {}
        self._files, self._dirs = _skipped_files()
        self._functions: dict[str, list[FunctionCounts]] = {}  # set by take()

    def _skipped(self, code: CodeType) -> bool:
        skip = self._skip.get(code)
        if skip is None:
            path = os.path.normcase(os.path.abspath(code.co_filename))
            skip = self._skip[code] = path in self._files or path.startswith(self._dirs)
        return skip

    def _region(self) -> None:
        """Take the region open now as the one counted into."""
        region = self.table.current
        name = region.stat.name if region is not None else OUTSIDE
        funcs = self._counts.get(name)
        if funcs is None:
            funcs = self._counts[name] = {}
        self._funcs = funcs

    def _bucket(self, code: CodeType | None) -> list[Any]:
        """The counts of ``code``'s function in the region open now."""
        bucket = self._funcs.get(code)
        if bucket is None:
            bucket = self._funcs[code] = _new_bucket()
        return bucket

    def _profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            if self._depth:
                if self._skipped(frame.f_code):
                    self._depth += 1
                return
            bucket = self._funcs.get(frame.f_code)
            if bucket is None:
                if self._skipped(frame.f_code):
                    self._depth += 1  # what it calls is not counted either
                    return
                bucket = self._bucket(frame.f_code)
            bucket[1] += 1
            self._current[0] = bucket
        elif event == "return":
            back = frame.f_back
            if self._depth:
                if self._skipped(frame.f_code):
                    self._depth -= 1
                    if not self._depth:  # back from the timers' code: the region may have changed
                        self._region()
                        self._current[0] = self._bucket(back.f_code if back else None)
                        self._check_tracing()
                return
            code = back.f_code if back is not None else None
            bucket = self._funcs.get(code)
            self._current[0] = bucket if bucket is not None else self._bucket(code)
        elif event == "c_call":
            if arg in _TAMPERING and frame.f_code not in _OWN_CODE:
                self._tampered(f"it called {_name_of(arg)}()")
            if not self._depth and not self._skipped(frame.f_code):
                bucket = self._current[0]
                bucket[2] += 1
                name = getattr(arg, "__qualname__", None) or type(arg).__name__
                owner = getattr(arg, "__self__", None)
                if type(owner) is ModuleType and owner is not builtins:
                    name = f"{owner.__name__}.{name}"
                callees = bucket[3]
                callees[name] = callees.get(name, 0) + 1

    def _tampered(self, how: str) -> None:
        if self.tampered is None:
            self.tampered = how

    def _check_tracing(self) -> None:
        """Note a tracer or profiler that is no longer this counter's."""
        if sys.gettrace() != self._trace:  # (a bound method: equal, not the same object)
            self._tampered("the tracer was removed or replaced (sys.gettrace())")
        elif sys.getprofile() != self._profile:
            self._tampered("the profiler was removed or replaced (sys.getprofile())")

    def _trace(self, frame: FrameType, event: str, arg: Any) -> Any:
        # (a new frame's trace event comes before its profile event: a frame called from
        # skipped code finds the depth raised already)
        if self._depth or self._skipped(frame.f_code):
            return None
        frame.f_trace_opcodes = True
        return self._opcode

    def _make_opcode(self) -> Any:
        """The per-bytecode trace function: a closure over two one-item lists (the counts of
        the region open now, the bytecodes left until the clock is read), the cheapest to call."""
        current, left = self._current, [_CHECK_EVERY]

        def opcode(frame: FrameType, event: str, arg: Any) -> Any:
            if event == "opcode":
                current[0][0] += 1
                left[0] -= 1
                if left[0] <= 0:
                    left[0] = _CHECK_EVERY
                    self._check_deadline()
            return opcode

        return opcode

    def _check_deadline(self) -> None:
        if self.deadline_ns is not None and self.clock() > self.deadline_ns:
            self.timed_out = True
            raise self.timeout("the counting pass ran past its time limit")

    def start(self) -> None:
        """Count from here on (this thread): after a full garbage collection, with the collector
        held off; the tracing and profiling functions in place are kept to be restored."""
        self._saved = (sys.gettrace(), sys.getprofile(), gc.isenabled())
        self.tampered = None
        self._depth = 0
        self._region()
        caller = sys._getframe(1)  # what runs once this returns
        self._current[0] = self._bucket(caller.f_code)
        gc.collect()
        gc.disable()
        sys.setprofile(self._profile)
        sys.settrace(self._trace)

    def stop(self) -> None:
        """Stop counting; restore what :meth:`start` found. A step whose tracer or profiler is
        not this counter's any more sets ``tampered``; one that ended past the deadline sets
        ``timed_out`` (a step spent in C code reads no clock in between)."""
        if self._saved is not None:
            self._check_tracing()
            if self.deadline_ns is not None and self.clock() > self.deadline_ns:
                self.timed_out = True
        sys.settrace(None)
        sys.setprofile(None)
        if self._saved is not None:
            trace, profile, gc_was = self._saved
            self._saved = None
            sys.settrace(trace)
            sys.setprofile(profile)
            if gc_was:
                gc.enable()

    def take(self, root: str | None = None) -> dict[str, list[int]]:
        """The self counts since the last take, by stat name (:data:`OUTSIDE` for none); the
        same split by function in ``functions`` (:func:`.functions.bounded` not applied yet),
        their files relative to ``root`` (:func:`.functions.relative_file`)."""
        counts, self._counts = self._counts, {}
        self._funcs = {}
        root = os.getcwd() if root is None else root
        lib_dirs = [p for p in sys.path if p and os.path.isabs(p)]
        names: dict[CodeType | None, tuple[str, int, str]] = {}
        out: dict[str, list[int]] = {}
        self._functions = {}
        for stat, funcs in counts.items():
            total = [sum(b[i] for b in funcs.values()) for i in range(len(COUNTERS))]
            if not any(total):
                continue
            out[stat] = total
            rows = []
            for code, b in funcs.items():
                if not (b[0] or b[1] or b[2]):
                    continue
                key = names.get(code)
                if key is None:
                    key = names[code] = _function_key(code, root, lib_dirs)
                rows.append(FunctionCounts(*key, b[0], b[1], b[2], b[3]))
            self._functions[stat] = merged(rows)
        return out

    @property
    def functions(self) -> dict[str, list[FunctionCounts]]:
        """The last :meth:`take`'s counts by stat, split by function (unbounded)."""
        return self._functions


# the counter's own calls that set or end the tracing are no tampering
_OWN_CODE = frozenset((Counter.start.__code__, Counter.stop.__code__))


def _new_bucket() -> list[Any]:
    return [0, 0, 0, {}]


def _function_key(code: CodeType | None, root: str | None,
                  lib_dirs: list[str]) -> tuple[str, int, str]:
    if code is None:
        return "", 0, "(no Python frame)"
    return (relative_file(code.co_filename, root, lib_dirs), code.co_firstlineno,
            getattr(code, "co_qualname", code.co_name))


def _name_of(function: Any) -> str:
    name = getattr(function, "__name__", repr(function))
    return f"sys.{name}" if getattr(sys, name, None) is function else name
