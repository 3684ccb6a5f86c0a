"""The stat tree: one run's stats as an immutable, validated tree, the model every reader uses.

Built from a live :class:`pytest_opperf.timers.Table` or a results file's stats and checked
once (names unique, every parent a stat of the tree, no cycle), it answers what the report,
the gate, the trace and the reference framework's benchmark ask: kernel ancestors, display
order, executor membership, kernel time, trace categories. :class:`Shares` splits wall time.
Standard library only: ``reference_framework`` may import it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

__all__ = ["SORT_KEYS", "Shares", "StatResult", "StatTree", "StatTreeError", "short_name"]


class LiveStat(Protocol):
    """What the tree reads of a live stat (:class:`pytest_opperf.timers.Stat`), so that this
    module needs no import of the timers that import it."""

    @property
    def parent(self) -> str | None: ...
    @property
    def count(self) -> int: ...
    @property
    def kernel(self) -> bool: ...
    @property
    def clock(self) -> str: ...
    @property
    def total_ms(self) -> float: ...
    @property
    def avg_ms(self) -> float: ...
    @property
    def min_ms(self) -> float: ...
    @property
    def max_ms(self) -> float: ...
    @property
    def host_total_ms(self) -> float: ...


class StatTreeError(ValueError):
    """Stats that do not form a tree; the message names the stat."""


@dataclass(frozen=True, slots=True)
class StatResult:
    """One stat of a run (docs/reference/results.md): ``samples_ms`` are per-step totals (e2e)
    or per-call times of each round (op runs); ``flops``/``bytes`` are work over the run."""

    name: str
    parent: str | None
    count: int
    total_ms: float
    avg_ms: float
    min_ms: float
    max_ms: float
    samples_ms: Sequence[float] | None = None  # read from a file: an array('d'), 8 bytes each
    kernel: bool = False
    clock: str = "host"
    flops: float | None = None
    bytes: float | None = None
    host_ms: float | None = None  # a device-clock stat's host (enqueue) total, beside its span

    def to_dict(self) -> dict[str, Any]:
        optional = ("samples_ms", "flops", "bytes", "host_ms")
        d = {k: v for k, v in asdict(self).items() if v is not None or k not in optional}
        if d.get("samples_ms"):
            # 5 significant digits: beyond the timers' resolution, a third of a float's repr
            d["samples_ms"] = [float(f"{x:.5g}") for x in d["samples_ms"]]
        return d


SORT_KEYS: dict[str, Callable[[StatResult], Any]] = {  # the --opperf-sort choices
    "total": lambda s: -s.total_ms, "avg": lambda s: -s.avg_ms, "max": lambda s: -s.max_ms,
    "min": lambda s: -s.min_ms, "count": lambda s: -s.count, "name": lambda s: s.name}


def short_name(name: str) -> str:
    """A stat's name without the kernel qualifying it: ``conv2d/GemmTimer`` -> ``GemmTimer``."""
    return name.rsplit("/", 1)[-1]


_NONE: dict[str, StatResult] = {}  # never written to
_SCAN = 8  # a tree of at most this many stats finds a name by a scan, and keeps no index


class StatTree(tuple[StatResult, ...]):
    """A run's stats in recording order (an immutable tuple), validated when built.

    A file of many runs holds many trees, most of one or a few stats: such a tree keeps no
    instance dictionary (its lookups scan the tuple, and the class's empty mappings stand for
    the kernel parents it does not have), so that it costs little more than the tuple."""

    _by_name: dict[str, StatResult] = _NONE  # an index only for trees of more than _SCAN stats
    _kernel_parent: dict[str, StatResult] = _NONE  # only the stats that have a kernel ancestor

    def __new__(cls, stats: Iterable[StatResult] = ()) -> StatTree:
        self = super().__new__(cls, stats)
        by_name: dict[str, StatResult] = {}
        for s in self:
            if s.name in by_name:
                raise StatTreeError(f"stat {s.name!r} appears twice")
            by_name[s.name] = s
        rooted: set[str] = set()  # stats whose chain is known to end at a root
        for s in self:
            chain, parent = [s.name], s.parent
            while parent is not None and parent not in rooted:
                if parent not in by_name:
                    raise StatTreeError(f"stat {chain[-1]!r} has the parent {parent!r}, "
                                        "which is not a stat of the run")
                if parent in chain:
                    cycle = " -> ".join(map(repr, [*chain, parent]))
                    raise StatTreeError(f"stat parents form a cycle: {cycle}")
                chain.append(parent)
                parent = by_name[parent].parent
            rooted.update(chain)
        kernel_parent = {}
        for s in self:
            node = by_name.get(s.parent) if s.parent is not None else None
            while node is not None and not node.kernel:
                node = by_name[node.parent] if node.parent is not None else None
            if node is not None:
                kernel_parent[s.name] = node
        if len(self) > _SCAN:
            self._by_name = by_name
        if kernel_parent:
            self._kernel_parent = kernel_parent
        return self

    @classmethod
    def from_table(cls, table: Mapping[str, LiveStat],
                   samples: Mapping[str, list[float]] | None = None,
                   work: Mapping[str, list[float]] | None = None) -> StatTree:
        """The tree of a live :class:`~pytest_opperf.timers.Table`, with per-step ``samples``
        and ``work`` (``[flops, bytes]``) by stat name where the run has them."""
        samples, work = samples or {}, work or {}
        return cls(StatResult(
            name, s.parent, s.count, s.total_ms, s.avg_ms, s.min_ms, s.max_ms,
            samples_ms=list(samples[name]) if name in samples else None, kernel=s.kernel,
            clock=s.clock, flops=work[name][0] if name in work else None,
            bytes=work[name][1] if name in work else None,
            host_ms=s.host_total_ms if s.clock == "device" else None) for name, s in table.items())

    def get(self, name: str) -> StatResult | None:
        if len(self) > _SCAN:
            return self._by_name.get(name)
        for s in self:
            if s.name == name:
                return s
        return None

    def _stat(self, name: str) -> StatResult:
        stat = self.get(name)
        if stat is None:
            raise KeyError(name)
        return stat

    @property
    def roots(self) -> list[StatResult]:
        """The top-level stats (no parent)."""
        return [s for s in self if s.parent is None]

    def kernel_ancestor(self, name: str) -> StatResult | None:
        """The nearest kernel stat above stat ``name``, or ``None``."""
        self._stat(name)
        return self._kernel_parent.get(name)

    def in_executor(self, name: str, executor_stat: str | None) -> bool:
        """Whether the executor ran stat ``name``: ``executor_stat`` is on its parent chain, or,
        without one (executor time is the sum of the top-level stats), it is a top-level stat."""
        parent = self._stat(name).parent
        if not executor_stat:
            return parent is None
        while parent is not None and parent != executor_stat:
            parent = self._stat(parent).parent
        return parent is not None

    @property
    def kernel_roots(self) -> list[StatResult]:
        """The kernel stats without a kernel ancestor: the kernel time is their total."""
        return [s for s in self if s.kernel and s.name not in self._kernel_parent]

    @property
    def kernel_ms(self) -> float:
        return sum(s.total_ms for s in self.kernel_roots)

    def executor_ms(self, executor_stat: str | None) -> float:
        """The total of ``executor_stat``, or without that stat the sum of the top-level stats."""
        stat = self.get(executor_stat) if executor_stat else None
        return stat.total_ms if stat is not None else sum(s.total_ms for s in self.roots)

    def executor_samples(self, executor_stat: str | None) -> Sequence[float] | None:
        """Per-step executor time: ``executor_stat``'s samples, or without it the step-by-step
        sum of the top-level stats' samples; ``None`` when a stat has none."""
        if executor_stat is not None:
            stat = self.get(executor_stat)
            return stat.samples_ms if stat is not None else None
        roots = self.roots
        tops = [s.samples_ms for s in roots if s.samples_ms]
        if not roots or len(tops) < len(roots):
            return None
        return [sum(x) for x in zip(*tops, strict=False)]

    def ordered(self, sort: str = "total") -> list[tuple[int, StatResult]]:
        """Stats in display order with their depth: each under its nearest kernel ancestor
        (``Im2ColTimer`` under ``conv2d``; framework timers do not indent, so ops stay level
        with ``ExecutorRunTimer``), siblings sorted (stably) by ``SORT_KEYS[sort]``."""
        children: dict[str | None, list[StatResult]] = {}
        for s in self:
            kernel = self._kernel_parent.get(s.name)
            children.setdefault(kernel.name if kernel is not None else None, []).append(s)
        key, out = SORT_KEYS[sort], []

        def walk(parent: str | None, depth: int) -> None:
            for s in sorted(children.get(parent, ()), key=key):
                out.append((depth, s))
                walk(s.name, depth + 1)

        walk(None, 0)
        return out

    def trace_category(self, region: str) -> str:
        """``"kernel"`` for the trace events of a region a kernel stat is of, else framework."""
        regions = self.__dict__.get("_kernel_regions")
        if regions is None:  # made on first use: trees read from files are seldom traced
            # trace events carry the region's own name: GemmTimer for conv2d/GemmTimer
            regions = self._kernel_regions = frozenset(short_name(s.name) for s in self if s.kernel)
        return "kernel" if region in regions else "framework"


@dataclass(frozen=True)
class Shares:
    """Shares of wall time: Python (outside the executor), framework overhead (executor
    time not in kernels) and kernels."""

    python: float
    framework: float
    kernel: float

    @classmethod
    def of(cls, wall_ms: float, executor_ms: float, kernel_ms: float) -> Shares:
        if wall_ms <= 0:
            return cls(0.0, 0.0, 0.0)
        python = max(0.0, wall_ms - executor_ms) / wall_ms
        framework = max(0.0, executor_ms - kernel_ms) / wall_ms
        return cls(min(1.0, python), framework, max(0.0, kernel_ms) / wall_ms)

    def line(self, outside: str = "Python") -> str:
        """The report's shares line; ``outside`` names the first share (``untimed`` where no
        executor stat encloses the steps)."""
        return (f"{outside} {self.python:.2%} | framework overhead {self.framework:.2%} | "
                f"kernels {self.kernel:.2%} of wall time")
