"""``profile()``: every aten operator that runs in a measured window becomes a kernel stat.

What it lists, how it times and groups, and what each mechanism costs are written out in
docs/adapters.md and docs/reference/api.md. Two mechanisms
(``profile(mechanism=...)``): ``"profiler"``, the default on the host clock, is
:mod:`pytest_opperf.torch.recorded`; ``"dispatch"``, the default on CUDA (the only one that reads
CUDA events), is this module's ``TorchDispatchMode``.

The dispatch mode: torch calls it for every operator that reaches the dispatcher's Python key
(below autograd, after ``CompositeImplicitAutograd`` decomposition); each op is timed around its
call and filed in the window's :class:`pytest_opperf.timers.Table` under its schema name without
the overload. The mode belongs to the thread that entered it, and torch's autograd engine carries
it to the threads it runs backward on (its device threads, and the pool it uses for deeply
reentrant backward): those ops are filed through :meth:`Table.record`, under a lock, as if they had
run inside the region open on the recording thread. In a window measured on a GPU each op on CUDA
tensors is bracketed by two CUDA events on the current stream, read at the next ``run.step()``
(one synchronisation per step, through ``Table.on_flush``); with ``--opperf-timing=sync`` the
device is synchronised around every op instead and the host clock reads device time.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from time import perf_counter_ns
from typing import Any

import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from .. import measure, timers
from .recorded import SKIPPED_NAMESPACES, ForwardHooks

__all__ = ["ACCOUNTING_NOTE", "GROUPINGS", "MECHANISMS", "TorchProfile", "profile"]

ACCOUNTING_NOTE = ("torch: executor time is the time inside top-level aten operators; untimed is "
                   "what runs around them (nn.Module calls, hooks, optimizer loops, data handling)")
GROUPINGS = ("op", "module")
MECHANISMS = ("auto", "profiler", "dispatch")
_TAG = "opperf.module"  # key of an autograd node's metadata: the module whose forward made it


@dataclass(frozen=True)
class TorchProfile:
    """What :func:`profile` yields: where it records and how it times."""

    table: timers.Table | None  # None when nothing records
    by: str  # op | module
    timing: str  # host | events | sync, or off when nothing records
    mechanism: str = "off"  # profiler | dispatch, or off when nothing records


def _op_name(func: Any) -> str:
    """``aten::add`` for ``aten::add.Tensor``; empty for ops that are not work."""
    name = func._schema.name
    return "" if name.split("::", 1)[0] in SKIPPED_NAMESPACES else name


def _on_cuda(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return value.is_cuda
    if isinstance(value, (tuple, list)) and value and isinstance(value[0], torch.Tensor):
        return value[0].is_cuda
    return False


class _Events:
    """CUDA event pairs per op, resolved at the table's flush (one sync per step)."""

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock
        self._free: list[Any] = []
        self.pending: list[tuple[timers.Stat, Any, Any]] = []

    def take(self) -> Any:
        with self._lock:
            event = self._free.pop() if self._free else None
        if event is None:
            event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def give(self, event: Any) -> None:
        with self._lock:
            self._free.append(event)

    def resolve(self) -> None:
        with self._lock:
            pending, self.pending = self.pending, []
        if not pending:
            return
        torch.cuda.synchronize()
        for stat, begin, end in pending:
            stat.add_device(int(begin.elapsed_time(end) * 1e6))
        with self._lock:
            for _, begin, end in pending:
                self._free += (begin, end)


class _OpMode(TorchDispatchMode):
    """Times each op and files it in ``table`` (any thread the mode reaches)."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # Otherwise torch wraps __torch_dispatch__ in torch._disable_dynamo, which
        # costs more per op than all of this mode's own work; profile() is for eager code.
        return False

    def __init__(self, table: timers.Table, events: _Events | None, sync: bool) -> None:
        super().__init__()
        self.table = table
        self.lock = threading.Lock()
        self.events = events
        self.sync = sync
        self.names: dict[Any, str] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        # The hot path of every op: kept flat (no method calls but the op and record).
        name = self.names.get(func)
        if name is None:
            name = self.names[func] = _op_name(func)
        if not name:
            return func(*args, **(kwargs or {}))
        if self.events is not None or self.sync:
            return self.timed(func, name, args, kwargs or {})
        call = func._op  # the C++ op itself, without OpOverload.__call__'s Python frame
        start = perf_counter_ns()
        out = call(*args, **kwargs) if kwargs else call(*args)
        self.table.record(name, start, perf_counter_ns() - start, True)  # thread-safe
        return out

    def timed(self, func: Any, name: str, args: tuple, kwargs: dict,
              calls: list | None = None) -> Any:
        """Run one op and file it as ``name``, with device time where there is a device;
        ``calls``, filled while it runs, are the ops it called (``nested=True``)."""
        if self.events is None:
            if self.sync:
                torch.cuda.synchronize()
            start = perf_counter_ns()
            out = func(*args, **kwargs)
            if self.sync:
                torch.cuda.synchronize()
            stat = self.table.record(name, start, perf_counter_ns() - start, True)
            if calls:
                self.file(stat, calls)
            return out
        events = self.events
        begin = events.take()
        start = perf_counter_ns()
        out = func(*args, **kwargs)
        ns = perf_counter_ns() - start
        on_device = _on_cuda(out) or bool(args) and _on_cuda(args[0])
        end = events.take() if on_device else None
        stat = self.table.record(name, start, ns, True)
        with self.lock:
            if end is None:
                stat.add_device(ns)  # an op on the host: its host time is its time
            else:
                events.pending.append((stat, begin, end))
        if end is None:
            events.give(begin)
        if calls:
            self.file(stat, calls)  # host times: the calls' device time is inside the op's
        return out

    def file(self, stat: timers.Stat, calls: list) -> None:
        raise AssertionError("only the nested mode has calls to file")


class _Call:
    """An op open on this thread, under ``nested=True``: its calls are filed when it ends."""

    __slots__ = ("calls", "func", "name")

    def __init__(self, func: Any, name: str) -> None:
        self.func, self.name = func, name
        self.calls: list[tuple[str, int, list]] = []  # (name, ns, its own calls)


class _Stack(threading.local):
    def __init__(self) -> None:
        self.calls: list[_Call] = []


# the dispatch keys an op runs on below the Python key (its backend's kernels)
_BELOW_PYTHON = torch._C._dispatch_keyset_full_after(torch._C.DispatchKey.Python)


def _tensor_positions(func: Any) -> tuple[int, ...]:
    """The positions of ``func``'s arguments typed ``Tensor``."""
    return tuple(i for i, a in enumerate(func._schema.arguments)
                 if isinstance(a.type, torch._C.TensorType))


def _keys(args: tuple, tensors: tuple[int, ...]) -> Any:
    """The dispatch keys of an op's first tensor argument (in a list too), or ``None``
    when it has none, or when a ``Tensor`` argument was given a number (``x * 2``):
    redispatching does not convert numbers to tensors, as a call does."""
    for i in tensors:
        if i < len(args) and not isinstance(args[i], torch.Tensor):
            return None
    for arg in args:
        if isinstance(arg, torch.Tensor):
            return torch._C._dispatch_keys(arg)
        if isinstance(arg, (list, tuple)) and arg and isinstance(arg[0], torch.Tensor):
            return torch._C._dispatch_keys(arg[0])
    return None


class _NestedOpMode(_OpMode):
    """Also the ops each op calls through the dispatcher, filed under it.

    The op is run with this mode pushed again, below the Python key (its backend kernel), so the ops
    its kernel calls come back here as its children. An op already open on this thread (a kernel
    redispatching to itself), an op without tensor arguments, and one given a number for a tensor
    argument, runs as in the flat mode: its inside is not listed. Children are filed when their
    top-level op ends, qualified by their parents' names (``aten::convolution/aten::_convolution``).
    """

    def __init__(self, table: timers.Table, events: _Events | None, sync: bool) -> None:
        super().__init__(table, events, sync)
        self.stack = _Stack()
        self.tensors: dict[Any, tuple[int, ...]] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        name = self.names.get(func)
        if name is None:
            name = self.names[func] = _op_name(func)
        if not name:
            return func(*args, **kwargs)
        calls = self.stack.calls
        tensors = self.tensors.get(func)
        if tensors is None:
            tensors = self.tensors[func] = _tensor_positions(func)
        keys = _keys(args, tensors)
        if not calls:
            if keys is None:
                return self.timed(func, name, args, kwargs)
            call = _Call(func, name)
            calls.append(call)
            try:
                return self.timed(_Redispatch(self, func, keys), name, args, kwargs, call.calls)
            finally:
                calls.pop()
        start = perf_counter_ns()
        if keys is None or any(open_call.func is func for open_call in calls):
            out = func(*args, **kwargs)
            calls[-1].calls.append((name, perf_counter_ns() - start, []))
            return out
        call = _Call(func, name)
        calls.append(call)
        try:
            with self:
                out = func.redispatch(keys & _BELOW_PYTHON, *args, **kwargs)
        finally:
            calls.pop()
        calls[-1].calls.append((name, perf_counter_ns() - start, call.calls))
        return out

    def file(self, stat: timers.Stat, calls: list) -> None:
        """File an op's calls under its stat (the caller holds no lock)."""
        with self.lock:
            todo = [(stat.name, calls)]
            while todo:
                parent, children = todo.pop()
                for name, ns, inner in children:
                    key = f"{parent}/{name}"
                    self.table.add(key, ns, parent=parent, kernel=True)
                    if inner:
                        todo.append((key, inner))


class _Redispatch:
    """Calls ``func`` below the Python key with the mode pushed again (see _NestedOpMode)."""

    __slots__ = ("func", "keys", "mode")

    def __init__(self, mode: _NestedOpMode, func: Any, keys: Any) -> None:
        self.mode, self.func, self.keys = mode, func, keys

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self.mode:
            return self.func.redispatch(self.keys & _BELOW_PYTHON, *args, **kwargs)


class _Frame:
    """One module call open on the recording thread."""

    __slots__ = ("begin", "cls", "inputs", "key", "ns")

    def __init__(self, key: str, cls: str, begin: Any, inputs: set) -> None:
        self.key, self.cls, self.ns, self.begin, self.inputs = key, cls, 0, begin, inputs


class _ModuleMode(_OpMode, ForwardHooks):
    """Groups op time by the ``nn.Module`` class whose call ran it."""

    def __init__(self, table: timers.Table, events: _Events | None, sync: bool) -> None:
        super().__init__(table, events, sync)
        self.thread = threading.get_ident()
        self.frames: list[_Frame] = []
        stat = table.current.stat if table.current is not None else None
        self.parent = stat.name if stat is not None else None
        self.handles: list[Any] = []

    # --- hooks on every module's forward (the recording thread only) ----------------

    def _pre(self, mod: Any, args: Any) -> None:
        if threading.get_ident() != self.thread:
            return
        cls = type(mod).__name__
        key = f"{self.frames[-1].key}/{cls}" if self.frames else cls
        inputs = {t.grad_fn for t in pytree.tree_leaves(args) if isinstance(t, torch.Tensor)
                  and t.grad_fn}
        begin = self.events.take() if self.events is not None else None
        self.frames.append(_Frame(key, cls, begin, inputs))

    def _post(self, mod: Any, args: Any, output: Any) -> None:
        if threading.get_ident() != self.thread or not self.frames:
            return
        end = self.events.take() if self.events is not None else None
        frame = self.frames.pop()
        self._tag(output, frame)
        parent = self.frames[-1].key if self.frames else self.parent
        with self.lock:
            stat = self.table.add(frame.key, frame.ns, parent=parent, kernel=True)
            if self.events is not None:
                self.events.pending.append((stat, frame.begin, end))
        if self.frames:
            self.frames[-1].ns += frame.ns

    def _tag(self, output: Any, frame: _Frame) -> None:
        """Mark the autograd nodes this call made (inner calls marked theirs first)."""
        todo = [t.grad_fn for t in pytree.tree_leaves(output) if isinstance(t, torch.Tensor)]
        while todo:
            node = todo.pop()
            if node is None or node in frame.inputs or type(node).__name__ == "AccumulateGrad":
                continue
            # torch types Node.metadata as a method; on the nodes it is a dict
            metadata: dict[str, str] = node.metadata  # type: ignore[assignment]
            if _TAG in metadata:
                continue
            metadata[_TAG] = frame.cls
            todo.extend(n for n, _ in node.next_functions)

    # --- ops ----------------------------------------------------------------------

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        frames = self.frames
        if not frames or threading.get_ident() != self.thread:
            name = self.names.get(func)
            if name is None:
                name = self.names[func] = _op_name(func)
            if not name:
                return func(*args, **(kwargs or {}))
            return self.timed(func, self.stat_name(name), args, kwargs or {})
        if self.sync:
            torch.cuda.synchronize()
        start = perf_counter_ns()
        out = func(*args, **(kwargs or {}))
        if self.sync:
            torch.cuda.synchronize()
        frames[-1].ns += perf_counter_ns() - start
        return out

    def stat_name(self, name: str) -> str:
        node = torch._C._current_autograd_node()
        if node is not None:
            cls = node.metadata.get(_TAG)  # type: ignore[attr-defined]  # a dict, typed as a method
            if cls is not None:
                return f"{cls}.backward"
        return name


@contextmanager
def profile(by: str = "op", nested: bool = False,
            mechanism: str = "auto") -> Iterator[TorchProfile]:
    """Time every aten op run inside as a kernel stat of the open recording.

    Use it inside ``opperf.measure()`` (``with opperf.measure() as run, profile(): ...``) or
    ``timers.recording()``. In a measured window the run's executor time becomes the time inside
    top-level ops, and its report says so. ``by="module"`` groups by ``nn.Module`` class instead of
    by op. Where nothing records on this thread (``opperf.measure()`` without ``--opperf``), it does
    nothing, as ``timers.timer`` does, and yields a :class:`TorchProfile` with ``table=None`` and
    ``timing="off"``. ``nested=True`` also lists what each op calls through the dispatcher, under it
    (``aten::convolution/aten::_convolution``); the top-level ops and their times stay the same.

    ``mechanism``: ``"profiler"`` records with torch's own profiler and builds the stats after the
    window (:mod:`pytest_opperf.torch.recorded`; about 0.3 us per op); ``"dispatch"`` times each op
    live in a ``TorchDispatchMode`` (about 4 us per op; ``nested=True`` about 2.5 times that), the
    only one that reads CUDA events. ``"auto"`` (the default) takes the profiler on the host clock,
    the dispatch mode in a window timed on CUDA.
    """
    if by not in GROUPINGS:
        raise ValueError(f"profile: by must be one of {'|'.join(GROUPINGS)}, got {by!r}")
    if mechanism not in MECHANISMS:
        raise ValueError(f"profile: mechanism must be one of {'|'.join(MECHANISMS)}, got "
                         f"{mechanism!r}")
    if nested and by != "op":
        raise ValueError("profile: nested=True lists ops inside ops; it needs by='op', got "
                         f"by={by!r}")
    table = timers.current()
    if table is None:  # as timers.timer(): nothing records (opperf.measure() without --opperf)
        yield TorchProfile(None, by, "off")
        return
    with _profiled_lock:
        if id(table) in _profiled:
            # two modes on one table would file every op twice
            raise RuntimeError("profile(): this recording is already being profiled (profile() "
                               "inside profile())")
        _profiled.add(id(table))
    try:
        with _profiling(table, by, nested, mechanism) as prof:
            yield prof
    finally:
        with _profiled_lock:
            _profiled.discard(id(table))


_profiled: set[int] = set()  # the tables a profile() is open on
_profiled_lock = threading.Lock()
# profiler recordings whose profile() has ended, read when their window closes; by table
_unread: dict[int, Any] = {}


@contextmanager
def _profiling(table: timers.Table, by: str, nested: bool,
               mechanism: str) -> Iterator[TorchProfile]:
    run = measure.run_of(table)  # None in an inner timers.recording(): not the run's window
    unread = _unread.pop(id(table), None)
    if unread is not None:  # an earlier profile() of this window: read before torch restarts
        unread.finish()
    if run is not None:
        run.kernels_are_executor(ACCOUNTING_NOTE)
    # Device time where the window measures on a GPU (its recording has a device clock); a CPU
    # session on a CUDA machine keeps the host clock and never touches CUDA.
    cuda = table.device_clock is not None and torch.cuda.is_available()
    sync = cuda and table.sync
    timing = "sync" if sync else "events" if cuda else "host"
    if mechanism == "auto":
        mechanism = "profiler" if timing == "host" else "dispatch"
    elif mechanism == "profiler" and timing != "host":
        raise ValueError("profile: mechanism='profiler' times on the host; a window timed with "
                         f"{timing} on CUDA needs mechanism='dispatch'")
    if mechanism == "profiler":
        with _recorded(table, nested, run, by):
            yield TorchProfile(table, by, timing, mechanism)
        return
    mode = (_ModuleMode if by == "module" else _NestedOpMode if nested
            else _OpMode)(table, None, sync)
    if timing == "events":
        mode.events = _Events(mode.lock)
        table.on_flush(mode.events.resolve)
    if isinstance(mode, _ModuleMode):
        mode.install()
    try:
        with mode:
            yield TorchProfile(table, by, timing, mechanism)
    finally:
        if isinstance(mode, _ModuleMode):
            mode.remove()
        if mode.events is not None:
            mode.events.resolve()


@contextmanager
def _recorded(table: timers.Table, nested: bool, run: measure.Run | None,
              by: str) -> Iterator[None]:
    """torch's profiler over the block; its ops filed when the run's window closes
    (after its wall clock stopped), or at the end of the block without a run."""
    from ..recorded import read_after_window
    from .recorded import TorchRecorder

    with read_after_window(TorchRecorder(table, nested, run, by), _unread):
        yield
