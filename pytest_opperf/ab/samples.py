"""The A/B session's paired samples, each pair tagged with the start order and the generation
(the process pair) that measured it: what :mod:`.decide` rules on and the controller fills. Pure:
no pytest, no numpy."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ..comparison.metrics import STEP, Kind, MetricKey, metric
from ..core.stats import median
from .family import Family
from .paired import Paired

__all__ = ["SessionPairs"]


@dataclass
class SessionPairs:
    """The session's paired samples, each pair tagged with the side started first (``"base"`` or
    ``"head"``) in the processes that measured it."""

    paired: dict[MetricKey, Paired] = field(default_factory=dict)
    firsts: dict[MetricKey, list[str]] = field(default_factory=dict)  # per pair, in order
    generations: dict[MetricKey, list[int]] = field(default_factory=dict)  # per pair, in order
    steps: dict[str, list[float]] = field(default_factory=dict)  # per e2e run, the base's steps
    step_keys: set[MetricKey] = field(default_factory=set)  # per e2e run, its step's metric

    def family(self, keys: Iterable[MetricKey] | None = None) -> Family:
        """The metrics every decision of the session is corrected for (:class:`.family.Family`),
        or only ``keys`` of them; the e2e runs' steps among them are headline metrics."""
        chosen = self.paired.values() if keys is None else (self.paired[k] for k in keys)
        return Family.of(((p.key, p.kind) for p in chosen), self.step_keys)

    def e2e(self, key: MetricKey) -> bool:
        """Whether ``key`` is a metric of an e2e run (one with steps or a step stat)."""
        return key.run in self.steps or any(k.run == key.run for k in self.step_keys)

    def add_step_stat(self, run: str, stat: str) -> None:
        """``stat`` is the e2e run ``run``'s executor stat: its ``step_ms`` is the step, a headline
        metric (:func:`.family.headline`). Before the run's first pairs, so that its level only
        falls."""
        self.step_keys.add(MetricKey(run, metric(STEP, stat)))

    def of(self, key: MetricKey, kind: Kind) -> Paired:
        """``key``'s samples, empty ones made now when it has none (it counts as a metric)."""
        if key not in self.paired:
            self.paired[key] = Paired(key, kind, step_ms=self.step_ms(key.run))
        return self.paired[key]

    def add_steps(self, run: str, base_ms: Sequence[float]) -> None:
        """The base's wall time (ms) of more steady steps of the e2e run ``run``: the step that
        its stats' ``min_step_share`` is a share of is their median, kept on each of the run's
        metrics (:attr:`.paired.Paired.step_ms`)."""
        self.steps.setdefault(run, []).extend(float(v) for v in base_ms)
        step = self.step_ms(run)
        for key, p in self.paired.items():
            if key.run == run:
                p.step_ms = step

    def step_ms(self, run: str) -> float:
        """The median of the base's steady steps of ``run`` (ms; 0 when it has none)."""
        steps = self.steps.get(run)
        return median(steps) if steps else 0.0

    def add(self, key: MetricKey, kind: Kind, base: float, head: float, first: str,
            generation: int = 0) -> None:
        """One pair of ``key``, measured with ``first`` started first, by the side processes of
        ``generation`` (0: the first pass's)."""
        self.of(key, kind).add(base, head)
        self.firsts.setdefault(key, []).append(first)
        self.generations.setdefault(key, []).append(generation)

    def part(self, key: MetricKey, first: str) -> Paired | None:
        """The pairs of ``key`` measured with ``first`` started first (None: no such metric)."""
        samples, firsts = self.paired.get(key), self.firsts.get(key, [])
        if samples is None:
            return None
        rows = [i for i, o in enumerate(firsts) if o == first]
        return Paired(key, samples.kind, [samples.base[i] for i in rows],
                      [samples.head[i] for i in rows], samples.step_ms)

    def generations_of(self, key: MetricKey, first: str | None = None) -> list[int]:
        """The generation of each pair of ``key`` (those of the start order ``first`` only, when
        given), in the order of :attr:`paired` (or of :meth:`part`)."""
        generations = self.generations.get(key, [])
        if first is None:
            return list(generations)
        return [g for g, o in zip(generations, self.firsts.get(key, []), strict=True)
                if o == first]
