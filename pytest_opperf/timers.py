"""Instrumentation API: named, nestable timed regions aggregated into Stat tables.

Frameworks time their work with ``with timers.timer("conv2d"): ...``. Nothing is measured unless a
:func:`recording` is open on the calling thread; then every region closed on that thread is added to
the recording's :class:`Table`, one :class:`Stat` per region name. A stat's ``parent`` is the region
it was inside when it was first seen (the reference report's indented ``Im2ColTimer`` under
``conv2d``), and it keeps that parent when later entries of the region happen elsewhere; parents and
children are kept apart, never summed into each other, so nothing is counted twice. A region opened
with ``kernel=True`` is operator work (the others are framework overhead timers, such as
``ExecutorRunTimer``); a region inside a kernel region is qualified by it (``conv2d/GemmTimer``,
``conv2d_grad/GemmTimer``), so each kernel's children add up to no more than the kernel. The naming
rules are in docs/timers.md; what is not recorded but counted
(:func:`other_thread_regions`, ``Table.misnested``) and the cost of a region are in
docs/timers.md. What a finished table means (kernel time, display order) is read from its
:class:`~pytest_opperf.stattree.StatTree`.

Clocks: the host clock is ``time.perf_counter_ns``. A recording may be given a :class:`DeviceClock`
(CUDA events on a GPU); kernel regions then also get device time, read lazily by :meth:`Table.flush`
after one synchronisation, so timing adds no per-region device sync. With ``sync=True`` the clock is
instead synchronised around every kernel region, so host times are true device times (slow, for
comparison with per-op-synchronised profiles).

When nothing records, ``timer()`` returns a shared no-op whose ``__enter__``/``__exit__`` are C
functions; hot loops should call :func:`current` once and skip their timing code entirely when it is
``None``, as the reference framework's executor does.

This module must not import pytest: frameworks import it at run time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from time import perf_counter_ns
from typing import Any, Protocol

from .stattree import StatTree, short_name

__all__ = ["DeviceClock", "Stat", "Table", "current", "format_stat_lines", "other_thread_regions",
           "recording", "timer"]


class DeviceClock(Protocol):
    """Marks points on a device's work queue and reads the time between them."""

    def mark(self) -> Any:
        """Record a marker (a CUDA event) behind the work queued so far."""

    def elapsed_ns(self, start: Any, end: Any) -> int:
        """Nanoseconds between two markers; called only after :meth:`synchronize`."""

    def synchronize(self) -> None:
        """Wait until all queued work, markers included, has finished."""

    def recycle(self) -> None:
        """Every marker made so far has been read and may be reused."""


_NO_MIN = 1 << 62


class Stat:
    """Aggregated timings of one region name (the reference report's ``Stat=`` row): the
    ``*_ms`` figures read the device clock when the region has device samples, else the host
    clock (``clock`` says which); ``host_total_ms`` is always the host's."""

    __slots__ = ("name", "parent", "kernel", "count", "total_ns", "min_ns", "max_ns",
                 "device_count", "device_total_ns", "device_min_ns", "device_max_ns")

    def __init__(self, name: str, parent: str | None = None, kernel: bool = False) -> None:
        self.name = name
        self.parent = parent
        self.kernel = kernel
        self.count = 0
        self.total_ns = 0
        self.min_ns = _NO_MIN  # so the first sample always becomes the minimum
        self.max_ns = 0
        self.device_count = 0
        self.device_total_ns = 0
        self.device_min_ns = 0
        self.device_max_ns = 0

    def add(self, ns: int) -> None:
        """Add one host-clock sample."""
        if ns < self.min_ns:
            self.min_ns = ns
        if ns > self.max_ns:
            self.max_ns = ns
        self.count += 1
        self.total_ns += ns

    def add_device(self, ns: int) -> None:
        """Add one device-clock sample (its host sample is added separately)."""
        if self.device_count == 0 or ns < self.device_min_ns:
            self.device_min_ns = ns
        if ns > self.device_max_ns:
            self.device_max_ns = ns
        self.device_count += 1
        self.device_total_ns += ns

    @property
    def clock(self) -> str:
        return "device" if self.device_count else "host"

    @property
    def total_ms(self) -> float:
        return (self.device_total_ns if self.device_count else self.total_ns) / 1e6

    @property
    def avg_ms(self) -> float:
        return self.total_ms / self.count if self.count else 0.0

    @property
    def min_ms(self) -> float:
        if self.device_count:
            return self.device_min_ns / 1e6
        return self.min_ns / 1e6 if self.count else 0.0

    @property
    def max_ms(self) -> float:
        return (self.device_max_ns if self.device_count else self.max_ns) / 1e6

    @property
    def host_total_ms(self) -> float:
        return self.total_ns / 1e6

    def __repr__(self) -> str:
        return (f"Stat({self.name!r}, parent={self.parent!r}, count={self.count}, "
                f"total_ms={self.total_ms:.3f}, clock={self.clock!r})")


class _NullRegion:
    """The region handed out when nothing records: enter and exit are C calls."""

    __slots__ = ()
    # str.format of an empty string takes any arguments and returns "", which is
    # falsy, so exceptions propagate; being builtins they bind no self and run no
    # Python frame. This halves the cost of a Python-level no-op context manager.
    __enter__ = "".format
    __exit__ = "".format


_NULL = _NullRegion()


class _Region:
    """A named region of one table, reused for every entry of that name.

    The open region keeps its own start time and a link to the region it was
    opened in (its parent); re-entering a region that is still open (recursion)
    gets a fresh region object sharing the same stat (see :func:`timer`).
    """

    __slots__ = ("table", "name", "kernel", "stat", "stat_outer", "start", "outer")

    def __init__(self, table: Table, name: str, kernel: bool) -> None:
        self.table = table
        self.name = name
        self.kernel = kernel
        self.stat: Stat = None  # type: ignore[assignment]  # chosen on the first entry
        self.stat_outer: _Region | None = None  # the outer region self.stat was chosen for
        self.start: int | None = None
        self.outer: _Region | None = None

    def __enter__(self) -> _Region:
        table = self.table
        outer = self.outer = table.current
        if self.stat is None or outer is not self.stat_outer:
            # First entry, or opened inside another region than last time: the
            # stat depends on the kernel this region is inside, if any.
            self.stat = table._stat_in(self.name, outer, self.kernel)
            self.stat_outer = outer
        table.current = self
        self.start = perf_counter_ns()
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        end = perf_counter_ns()
        start: int = self.start  # type: ignore[assignment]  # set by __enter__
        self.start = None
        table = self.table
        table.current = self.outer if table.current is self else table._misnested_exit(self)
        ns = end - start
        stat = self.stat
        stat.count += 1
        stat.total_ns += ns
        if ns < stat.min_ns:
            stat.min_ns = ns
        if ns > stat.max_ns:
            stat.max_ns = ns
        if table._events is not None:
            table._event(self, start, ns)


class _ClockedRegion(_Region):
    """A kernel region of a table with a device clock: also marks the device."""

    __slots__ = ("mark",)

    def __enter__(self) -> _Region:
        table = self.table
        clock: DeviceClock = table.device_clock  # type: ignore[assignment]  # this class needs one
        if table.sync:
            clock.synchronize()
        else:
            self.mark = clock.mark()
        return _Region.__enter__(self)

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        table = self.table
        clock: DeviceClock = table.device_clock  # type: ignore[assignment]
        if table.sync:
            clock.synchronize()
        else:
            table._pending.append((self.stat, self.mark, clock.mark()))
        _Region.__exit__(self, exc_type, exc, tb)


class _AnnotatedRegion(_Region):
    """A region that also opens a profiler range (NVTX) of its name (around the clock's marks)."""

    __slots__ = ()

    def __enter__(self) -> _Region:
        self.table.annotate.push(self.name)
        return super().__enter__()

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        super().__exit__(exc_type, exc, tb)
        self.table.annotate.pop()


class _AnnotatedClockedRegion(_AnnotatedRegion, _ClockedRegion):
    __slots__ = ()


class Table(Mapping[str, Stat]):
    """The stats of one recording, by region name, in order of first entry.

    ``annotate`` (optional, e.g. :class:`pytest_opperf.gpu.nvtx_ranges.NvtxRanges`) gets
    ``push(name)``/``pop()`` around every region; without it regions cost nothing extra.
    """

    def __init__(self, device_clock: DeviceClock | None = None, sync: bool = False,
                 annotate: Any = None) -> None:
        self.device_clock = device_clock
        self.sync = sync
        self.annotate = annotate
        self._stats: dict[str, Stat] = {}
        self._timer_regions: dict[str, _Region] = {}
        self._kernel_regions: dict[str, _Region] = {}
        self.current: _Region | None = None  # the innermost open region
        self._pending: list[tuple[Stat, Any, Any]] = []
        self._events: list[tuple[str, int, int, int]] | None = None
        self.misnested = 0  # region exits out of order
        self.first_misnested: str | None = None  # the first of them, described
        self._record_lock = threading.Lock()  # record() may be called from other threads
        self._flush_callbacks: list[Callable[[], None]] = []

    def _misnested_exit(self, region: _Region) -> _Region | None:
        """Count an exit out of order; the region that is innermost once ``region`` is closed."""
        self.misnested += 1
        inner = self.current
        if self.first_misnested is None:
            self.first_misnested = (
                f"{region.name!r} closed while {inner.name!r} was still open inside it"
                if inner is not None else f"{region.name!r} closed after its outer region")
        node = inner
        while node is not None and node is not region:
            node = node.outer
        # closed inside the open chain: what it held is closed with it; off the chain: no change
        return region.outer if node is region else inner

    # Mapping interface
    def __getitem__(self, name: str) -> Stat:
        return self._stats[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._stats)

    def __len__(self) -> int:
        return len(self._stats)

    def _stat(self, name: str, parent: str | None, kernel: bool) -> Stat:
        stat = self._stats.get(name)
        if stat is None:
            stat = self._stats[name] = Stat(name, parent, kernel)
        return stat

    def _stat_in(self, name: str, outer: _Region | None, kernel: bool) -> Stat:
        """The stat of region ``name`` opened inside ``outer``: qualified by the
        nearest enclosing kernel region, if there is one."""
        parent = outer.stat.name if outer is not None else None
        enclosing = outer
        while enclosing is not None and not enclosing.kernel:
            enclosing = enclosing.outer
        key = name if enclosing is None else f"{enclosing.stat.name}/{name}"
        return self._stat(key, parent, kernel)

    def region(self, name: str, kernel: bool = False) -> _Region:
        """A region object for ``name``: the cached one unless it is open now."""
        regions = self._kernel_regions if kernel else self._timer_regions
        region = regions.get(name)
        if region is None or region.start is not None:
            clocked = kernel and self.device_clock is not None
            cls: type[_Region]
            if self.annotate is not None:
                cls = _AnnotatedClockedRegion if clocked else _AnnotatedRegion
            else:
                cls = _ClockedRegion if clocked else _Region
            fresh = cls(self, name, kernel)
            if region is None:
                regions[name] = fresh
            region = fresh
        return region

    def add(self, name: str, ns: int, parent: str | None = None, kernel: bool = False) -> Stat:
        """Add a host sample measured elsewhere (e.g. by a benchmark timer)."""
        stat = self._stat(name, parent, kernel)
        stat.add(ns)
        return stat

    def kernel_ms(self) -> float:
        """Kernel time (:attr:`StatTree.kernel_ms`; device time on a device clock)."""
        return StatTree.from_table(self).kernel_ms

    def _event(self, region: _Region, start: int, ns: int) -> None:
        depth, outer = 0, region.outer
        while outer is not None:
            depth, outer = depth + 1, outer.outer
        self._events.append((region.name, start, ns, depth))  # type: ignore[union-attr]

    def flush(self) -> None:
        """Synchronise the device clock and resolve pending device samples
        (after the callbacks given to :meth:`on_flush`)."""
        for callback in self._flush_callbacks:
            callback()
        if not self._pending:
            return
        clock = self.device_clock
        assert clock is not None  # pending marks only exist with a clock
        clock.synchronize()
        for stat, start, end in self._pending:
            stat.add_device(clock.elapsed_ns(start, end))
        self._pending.clear()
        clock.recycle()

    def record(self, name: str, start_ns: int, ns: int, kernel: bool = False) -> Stat:
        """Add a region timed outside this table's own regions, e.g. on another thread.

        The region started at ``start_ns`` (``perf_counter_ns``) and took ``ns`` host nanoseconds;
        it is filed as if it had closed inside the region open now on the recording thread (its
        parent, and its qualified name, as :func:`timer` would give), and kept as a trace event when
        tracing. Thread-safe: calls from several threads are serialised by the table's lock. Returns
        the stat, so the caller can add device samples to it.
        """
        with self._record_lock:
            outer = self.current
            # outside every region the stat is the one of that name (what _stat_in gives)
            stat = self._stats.get(name) if outer is None else None
            if stat is None:
                stat = self._stat_in(name, outer, kernel)
            stat.count += 1  # Stat.add, inlined: this runs once per op of a profiled framework
            stat.total_ns += ns
            if ns < stat.min_ns:
                stat.min_ns = ns
            if ns > stat.max_ns:
                stat.max_ns = ns
            if self._events is not None:
                depth = 0
                while outer is not None:
                    depth, outer = depth + 1, outer.outer
                self._events.append((name, start_ns, ns, depth))
        return stat

    def on_flush(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` at the start of every :meth:`flush` (each ``run.step()``
        and the end of the recording): a source of device samples with markers of
        its own, such as another framework's CUDA events, resolves them there."""
        self._flush_callbacks.append(callback)

    def start_trace(self) -> None:
        """Keep every region closed from now on as an event (for a trace)."""
        self._events = []

    def stop_trace(self) -> list[tuple[str, int, int, int]]:
        """Stop keeping events; return them as (name, start_ns, dur_ns, depth)."""
        events, self._events = self._events or [], None
        return events


class _ThreadState(threading.local):
    table: Table | None = None


_state = _ThreadState()
# How many recordings are open across all threads: lets timer() skip the
# thread-local lookup in the common case where nothing records at all.
_open_recordings = 0
_open_lock = threading.Lock()
# Regions entered on a thread without a recording while another thread records:
# not recorded, but counted by name so the recording's report can say so.
_other_threads: dict[str, int] = {}


def other_thread_regions() -> dict[str, int]:
    """How often each region name was timed, unrecorded, on a thread without a
    recording while another thread had one open (a running total: compare two snapshots)."""
    return dict(_other_threads)


def timer(name: str, kernel: bool = False):
    """A context manager timing the enclosed code as region ``name``.

    ``kernel=True`` marks operator work: timed with the recording's device clock
    as well as the host clock, and counted in kernel time.
    """
    if not _open_recordings:
        return _NULL
    table = _state.table
    if table is None:
        _other_threads[name] = _other_threads.get(name, 0) + 1
        return _NULL
    region = (table._kernel_regions if kernel else table._timer_regions).get(name)
    if region is None or region.start is not None:
        return table.region(name, kernel)
    return region


def current() -> Table | None:
    """The table recording on this thread, or ``None``."""
    return _state.table if _open_recordings else None


@contextmanager
def recording(device_clock: DeviceClock | None = None, sync: bool = False,
              annotate: Any = None) -> Iterator[Table]:
    """Record every region closed on this thread into a fresh :class:`Table`.

    Recordings nest: an inner one takes over until it ends. On exit pending
    device samples are resolved (one synchronisation). ``annotate``: see :class:`Table`.
    """
    global _open_recordings
    table = Table(device_clock, sync, annotate)
    outer = _state.table
    with _open_lock:
        _open_recordings += 1
    _state.table = table
    try:
        yield table
    finally:
        _state.table = outer
        with _open_lock:
            _open_recordings -= 1
        table.flush()


def format_stat_lines(table: Mapping[str, Stat]) -> list[str]:
    """The table as the reference report's ``Stat=`` lines (unit: ms).

    Stats are listed by total time, descending; a nested stat follows its
    parent, indented by four spaces per level.
    """
    return [f"{'    ' * depth}Stat={short_name(s.name) if depth else s.name:<22}  "
            f"total={s.total_ms:<10.6g} avg={s.avg_ms:<10.3f} max={s.max_ms:<10.3f} "
            f"min={s.min_ms:<10.3f} count={s.count}"
            for depth, s in StatTree.from_table(table).ordered()]
