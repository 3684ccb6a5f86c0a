"""The A/B session's final decisions: the statistics of :mod:`.paired` and the start-order rule.

Which side's process starts first is not neutral (A/A here: 5-9 % on memory-bound e2e stats), so
every pass after the first runs in two fresh processes started in the other order, and every pair
is tagged with the side started first when it was measured (:class:`SessionPairs`). The verdict of a
metric is :func:`pytest_opperf.ab.paired.decide`'s on all its pairs, except that a change
(regressed or improved; counts are exact and need nothing more) counts only when the pairs of each
start order, on their own, decide it at the session's corrected level, with at least
``MIN_ORDER_PAIRS`` (:mod:`.tuning`) of them: a false alarm then needs two independent ones.
Else it is undecided (:func:`final_decisions`; docs/contract-additions.md, A/B). An undecided
metric whose pairs point to a regression (estimate past the threshold, interval above no change at
the level of the undecided metrics) is *inconclusive*, which fails the gate by default.

The controller only collects the pairs and asks here: for the final decisions, whether the pairs
of one start order decide on their own (:func:`order_verdict`, a visit's sequential stop), and
which metrics want more pairs (:func:`wanting_pairs`, with the rules :func:`leans`,
:func:`short` and :func:`may_regress` of its budget's tiers). Pure: no pytest, numpy only when
deciding (through :mod:`.paired`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Literal

from ..comparison.metrics import Kind, MetricKey
from ..comparison.thresholds import CompareSettings
from . import paired, tuning
from .paired import ABVerdict, Decision, Paired

__all__ = ["Keep", "SessionPairs", "Want", "final_decisions", "leans",
           "may_regress", "order_verdict", "short", "wanting_pairs"]

# Which metrics want more pairs (wanting_pairs): every undecided one; only a leaning one short of
# pairs or a change seen in one start order; only the changes.
Keep = Literal["undecided", "leaning", "changes"]
# Why a metric wants more pairs: a change seen in one start order only, to confirm in the other;
# an undecided metric.
Want = Literal["confirm", "decide"]


@dataclass
class SessionPairs:
    """The session's paired samples, each pair tagged with the side started first (``"base"`` or
    ``"head"``) in the processes that measured it."""

    paired: dict[MetricKey, Paired] = field(default_factory=dict)
    firsts: dict[MetricKey, list[str]] = field(default_factory=dict)  # per pair, in order

    def __len__(self) -> int:
        """The number of metrics (with or without pairs yet)."""
        return len(self.paired)

    def of(self, key: MetricKey, kind: Kind) -> Paired:
        """``key``'s samples, empty ones made now when it has none (it counts as a metric)."""
        return self.paired.setdefault(key, Paired(key, kind))

    def add(self, key: MetricKey, kind: Kind, base: float, head: float, first: str) -> None:
        """One pair of ``key``, measured with ``first`` started first."""
        self.of(key, kind).add(base, head)
        self.firsts.setdefault(key, []).append(first)

    def part(self, key: MetricKey, first: str) -> Paired | None:
        """The pairs of ``key`` measured with ``first`` started first (None: no such metric)."""
        samples, firsts = self.paired.get(key), self.firsts.get(key, [])
        if samples is None:
            return None
        rows = [i for i, o in enumerate(firsts) if o == first]
        return Paired(key, samples.kind, [samples.base[i] for i in rows],
                      [samples.head[i] for i in rows])


def _part_decision(part: Paired, settings: CompareSettings, family_size: int) -> Decision:
    """``part``'s decision, corrected for ``family_size`` metrics."""
    # decide() corrects for the number of Paired it is given: the others, empty, stand for the
    # rest of the session's metrics, so this look uses the session's level.
    family = [part] + [Paired(MetricKey("", f"#{i}"), "time") for i in range(family_size - 1)]
    return paired.decide(family, settings)[0]


def order_verdict(part: Paired, settings: CompareSettings, family_size: int) -> ABVerdict:
    """The verdict of the pairs ``part`` (those of one start order) on their own, corrected for
    ``family_size`` metrics."""
    return _part_decision(part, settings, family_size).verdict


def _both_orders(d: Decision, samples: SessionPairs, settings: CompareSettings) -> bool:
    """Whether the pairs of each start order, on their own, give ``d``'s verdict at the
    session's corrected level (at least ``MIN_ORDER_PAIRS`` of each)."""
    for first in ("base", "head"):
        part = samples.part(d.key, first)
        if (part is None or part.pairs < tuning.MIN_ORDER_PAIRS
                or order_verdict(part, settings, len(samples)) != d.verdict):
            return False
    return True


def _unconfirmed(d: Decision, samples: SessionPairs, settings: CompareSettings) -> bool:
    """Whether ``d`` is a change not seen in the pairs of each start order on their own."""
    changed = d.verdict in ("regressed", "improved") and d.kind != "count"
    return changed and not _both_orders(d, samples, settings)


def _confirmed(d: Decision, samples: SessionPairs, settings: CompareSettings) -> Decision:
    """``d``, or undecided when it is a change seen in one start order only."""
    if not _unconfirmed(d, samples, settings):
        return d
    return dataclasses.replace(d, verdict="undecided",
                               statistic=f"{d.statistic}; {d.verdict}, but not in "
                               "the pairs of each start order of the sides on their own")


def final_decisions(samples: SessionPairs, settings: CompareSettings) -> list[Decision]:
    """The session's decisions, one per metric in ``samples``' order: :func:`.paired.decide` on
    all the pairs, a change seen in one start order only made undecided (the module docstring),
    and the undecided ones that are inconclusive marked so (:func:`_inconclusive`). Pure and
    deterministic."""
    decisions = [_confirmed(d, samples, settings)
                 for d in paired.decide(list(samples.paired.values()), settings)]
    return _inconclusive(decisions, samples, settings)


def _inconclusive(decisions: list[Decision], samples: SessionPairs,
                  settings: CompareSettings) -> list[Decision]:
    """``decisions`` with the inconclusive ones marked: undecided, the estimate past the
    threshold ``c`` (:attr:`.paired.Decision.past_threshold`), and the interval of all its pairs
    above no change (``low > 0``) at the level corrected for the session's undecided metrics
    only. The estimate alone would not do: an A/A metric too noisy to decide lies past ``c`` by
    chance often (here, one of a session's 20 undecided e2e stats at 1.08x [0.94, 1.24]); the
    interval keeps the chance that an unchanged session has any inconclusive metric at about
    ``alpha / 2``, as :func:`.paired.decide` does for its regressions."""
    undecided = [i for i, d in enumerate(decisions)
                 if d.verdict == "undecided" and d.kind != "count" and d.pairs]
    if not any(decisions[i].past_threshold for i in undecided):
        return decisions
    # decide() corrects for the number of Paired it is given: the undecided metrics
    looks = paired.decide([samples.paired[decisions[i].key] for i in undecided], settings)
    out = list(decisions)
    for i, look in zip(undecided, looks, strict=True):
        _, low, _, _ = look.in_x()
        if decisions[i].past_threshold and low > 0:
            out[i] = dataclasses.replace(decisions[i], inconclusive=True)
    return out


def leans(d: Decision) -> bool:
    """Whether ``d``'s estimate lies past ``c/2`` (a regression's side of the rule's margin), or
    it is a count (exact: undecided only without pairs)."""
    if d.kind == "count":
        return True
    estimate, _, _, c = d.in_x()
    return estimate > c / 2


def short(samples: SessionPairs, key: MetricKey, settings: CompareSettings) -> bool:
    """Whether the pairs of a start order of ``key`` are too few for a verdict of their own:
    fewer than ``MIN_ORDER_PAIRS`` or ``min_pairs``, or no bounded interval at the session's
    level (an e2e stat gets a few pairs a run)."""
    need = max(tuning.MIN_ORDER_PAIRS, settings.for_metric(key).min_pairs)
    for first in ("base", "head"):
        part = samples.part(key, first)
        if part is None or part.pairs < need:
            return True
        _, low, _, _ = _part_decision(part, settings, len(samples)).in_x()
        if not math.isfinite(low):
            return True
    return False


def may_regress(samples: SessionPairs, key: MetricKey, final: str,
                settings: CompareSettings) -> bool:
    """Whether ``key`` can still end regressed when the pairs of the start order ``final`` get no
    more pairs. A regression needs those pairs, on their own, to decide "regressed" (the start
    order rule): at least ``MIN_ORDER_PAIRS`` and ``min_pairs`` of them and the lower end of
    their interval above ``c/2`` (:func:`.paired.rule`). Their ``c`` is fixed (their base median
    is), and the family only grows (samples are never dropped), so the interval at the end is at
    least as wide as at today's family size: a lower end at or below ``c/2`` now stays there.
    Counts (exact, no confirmation) always may."""
    if samples.paired[key].kind == "count":
        return True
    part = samples.part(key, final)
    need = max(tuning.MIN_ORDER_PAIRS, settings.for_metric(key).min_pairs)
    if part is None or part.pairs < need:
        return False
    _, low, _, c = _part_decision(part, settings, len(samples)).in_x()
    return math.isfinite(c) and low > c / 2


def wanting_pairs(samples: SessionPairs, settings: CompareSettings, keep: Keep = "undecided",
                  final: str | None = None,
                  undecided: str = "inconclusive") -> list[tuple[MetricKey, Want]]:
    """The metrics that want more pairs, in ``samples``' order, and why: ``"confirm"``, a change
    seen in one start order only (a change must show again in a second run, with its own set-up);
    ``"decide"``, an undecided metric. A metric whose undecided verdict could fail the gate
    (``undecided``, ``--opperf-compare-undecided``: every one with ``fail``; by default one whose
    estimate is past the threshold, which may end inconclusive) always counts. Of the others,
    only those changes and the metrics that lean towards a regression (:func:`leans`) with too
    few pairs in a start order for a verdict (:func:`short`) count with ``keep="leaning"``, only
    the changes with ``keep="changes"``, and with ``final`` (the start order whose pairs get no
    more pairs) only those that may still end regressed (:func:`may_regress`)."""
    wanted: list[tuple[MetricKey, Want]] = []
    for d in paired.decide(list(samples.paired.values()), settings):
        change = _unconfirmed(d, samples, settings)
        # an estimate past the threshold may end inconclusive (final_decisions)
        fails = undecided == "fail" or (undecided == "inconclusive" and d.past_threshold)
        kept = fails or (
            (keep == "undecided" or change
             or (keep == "leaning" and leans(d) and short(samples, d.key, settings)))
            and (final is None or may_regress(samples, d.key, final, settings)))
        if not kept:
            continue
        if change:
            wanted.append((d.key, "confirm"))
        elif d.verdict == "undecided":
            wanted.append((d.key, "decide"))
    return wanted
