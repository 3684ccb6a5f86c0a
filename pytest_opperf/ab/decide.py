"""The A/B session's final decisions: the statistics of :mod:`.paired` and the start-order rule.

Which side's process starts first is not neutral (A/A here: 5-9 % on memory-bound e2e stats), so
every pass after the first runs in two fresh processes started in the other order, and every pair is
tagged with the side started first when it was measured (:class:`.samples.SessionPairs`, re-exported
here). The verdict of a metric is :func:`pytest_opperf.ab.paired.decide`'s on all its pairs (its
interval widened for the spread between the generations' process pairs), except that a change
(regressed or improved; counts are exact and need nothing more) counts only when the pairs of each
start order, on their own, show it: at least ``min_pairs`` of them, their interval at the session's
corrected level wholly on the change's side of no change and reaching a change that counts (``c``);
that "unchanged" on the pairs of one start order alone needs an interval within ``c`` both ways once
widened for the spread between process pairs that they cannot show (one process pair's bias can hide
a change as well as make one); and that a headline metric of an e2e run (examples/sec, the Python
share, the step) is unchanged only when the process pairs of at least ``MIN_CHANGE_GENERATIONS``
generations rule a change that counts out too (:func:`.generations.generations_bound`). A change in
time also needs the process pairs of at least ``MIN_CHANGE_GENERATIONS`` generations, the t interval
of their estimates wholly on its side of no change (:func:`.generations.generations_interval`): two
process pairs that happen to agree show no spread between them, which the design effect would read
as none. A false alarm then needs independent significant ones, and a fluke of one process pair that
drags the estimate of all the pairs past ``c/2`` is not confirmed by an order whose own pairs rule a
change that counts out, while the size of the change is ruled on all the pairs (each order's pairs
on their own would need twice as many). Else it is undecided (:func:`final_decisions`;
docs/ab-statistics.md). An undecided metric whose pairs point to a regression is *inconclusive*,
which fails the gate by default: its estimate past the threshold, its interval above no change at
the level of the undecided metrics and its generations' process pairs not disagreeing; or its
interval at the session's level above no change and reaching the threshold, and the process pairs of
at least three generations showing the slowdown too (:func:`_inconclusive`).

The controller only collects the pairs and asks here: for the final decisions, whether its gate's
verdict is settled (:func:`settled`, which ends it), whether the pairs of one start order decide
on their own (:func:`order_verdict`, a visit's sequential stop), and which metrics want more pairs
and for how long (:func:`wanting_pairs`, with :func:`may_regress` for its last generation). Pure:
no pytest, numpy only when deciding (through :mod:`.paired`).
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Sequence
from typing import Literal

from ..comparison.metrics import MetricKey
from ..comparison.thresholds import CompareSettings
from . import paired, tuning
from .family import Family, headline
from .generations import design_effect, generations_bound, generations_interval
from .paired import ABVerdict, Decision, Paired
from .samples import SessionPairs

__all__ = ["SessionPairs", "Want", "final_decisions", "may_regress", "order_verdict",
           "points_to_regression", "settled", "unbounded", "wanting_pairs"]

# How long a metric may have more pairs (wanting_pairs): up to the ceiling, as the gate's verdict
# waits for it; within the reruns' budget.
Want = Literal["gate", "decide"]


def _wider(estimate: float, low: float, high: float, factor: float) -> tuple[float, float]:
    """The interval ``[low, high]`` around ``estimate`` (in ``x``) ``factor`` times as wide."""
    return estimate - (estimate - low) * factor, estimate + (high - estimate) * factor


def _widened(d: Decision, p: Paired, generations: Sequence[int]) -> Decision:
    """``d`` with its interval widened by the square root of the pairs' :func:`design_effect`
    (the spread between the generations' process pairs) and its verdict ruled again on the
    widened interval (an undecided one stays undecided: widening only ever takes confidence
    away)."""
    if d.kind == "count" or not math.isfinite(d.estimate):
        return d
    effect = design_effect(paired.pair_x(p), generations)
    if effect <= 1.0:
        return d
    factor = math.sqrt(effect)
    estimate, low, high, c = d.in_x()
    low, high = _wider(estimate, low, high, factor)
    beta_low, beta_high = _wider(estimate, *d.beta_x(), factor)
    verdict = d.verdict if d.verdict == "undecided" else paired.rule(low, high, c, beta_high)
    ends = [paired.from_x(d.kind, v) for v in (low, high, beta_low, beta_high)]
    if d.kind == "rate":  # a rate's interval turns round in x (a drop is worse)
        ends = [ends[1], ends[0], ends[3], ends[2]]
    groups = len(set(generations))
    return dataclasses.replace(
        d, verdict=verdict, low=ends[0], high=ends[1], beta_low=ends[2], beta_high=ends[3],
        statistic=f"{d.statistic}; interval {factor:.2f}x as wide for the spread between the "
                  f"{groups} generations' process pairs (design effect {effect:.2f})")


def session_decide(samples: SessionPairs, settings: CompareSettings,
                   keys: Sequence[MetricKey] | None = None) -> list[Decision]:
    """:func:`.paired.decide` on the pairs of ``keys`` (default: every metric; corrected for
    that many, the e2e runs' steps among them headline metrics: :meth:`SessionPairs.family`),
    each interval widened for the spread between the generations' process pairs
    (:func:`_widened`). What every verdict of the session is ruled on."""
    chosen = list(samples.paired) if keys is None else list(keys)
    decisions = paired.decide([samples.paired[k] for k in chosen], settings,
                              samples.family(chosen))
    return [_widened(d, samples.paired[k], samples.generations_of(k))
            for d, k in zip(decisions, chosen, strict=True)]


def _part_decision(part: Paired, settings: CompareSettings, family: Family,
                   generations: Sequence[int] = ()) -> Decision:
    """``part``'s decision, corrected for ``family`` (the session's); with the pairs'
    ``generations``, its interval widened for the spread between them (:func:`_widened`)."""
    d = paired.decide([part], settings, family)[0]
    return _widened(d, part, generations) if generations else d


def order_verdict(part: Paired, settings: CompareSettings, family: Family,
                  generations: Sequence[int] = ()) -> ABVerdict:
    """The verdict of the pairs ``part`` (those of one start order) on their own, corrected for
    ``family``, and for the spread between the pairs' ``generations`` when given."""
    return _part_decision(part, settings, family, generations).verdict


def _order_pairs(key: MetricKey, settings: CompareSettings) -> int:
    """The pairs a start order needs for a say of its own on ``key``: ``min_pairs``."""
    return settings.for_metric(key).min_pairs


def _both_orders(d: Decision, samples: SessionPairs, settings: CompareSettings) -> bool:
    """Whether the pairs of each start order, on their own, show ``d``'s change: at least
    :func:`_order_pairs` of them, and their interval at the session's corrected level (widened
    for their generations) wholly on the change's side of no change and reaching ``c`` on it."""
    family = samples.family()
    for first in ("base", "head"):
        part = samples.part(d.key, first)
        if part is None or part.pairs < _order_pairs(d.key, settings):
            return False
        _, low, high, c = _part_decision(part, settings, family,
                                         samples.generations_of(d.key, first)).in_x()
        if not (low > 0 and high >= c if d.verdict == "regressed" else high < 0 and low <= -c):
            return False
    return True


def _unshown_unchanged_why(d: Decision, samples: SessionPairs,
                           settings: CompareSettings) -> str | None:
    """Why ``d``, "unchanged" on its pairs, is not shown unchanged yet when it is a headline
    metric of an e2e run (:func:`.family.headline`: examples/sec, the Python share, the step):
    such a metric is unchanged only when the process pairs of at least
    ``MIN_CHANGE_GENERATIONS`` generations rule a change that counts out too, the one-sided
    ``1 - beta`` t bound of their estimates (:func:`generations_bound`) below ``c``: a visit of
    an e2e test gives a few step pairs, so its metrics rest on few process pairs, whose spread
    the design effect estimated from two or three of them can miss (:mod:`.tuning`,
    ``MIN_CHANGE_GENERATIONS``). ``None``: shown, or ``d`` is no such metric."""
    if d.verdict != "unchanged" or d.kind == "count" or not headline(d.key, samples.step_keys):
        return None
    bound, g = generations_bound(d.key, samples, settings)
    _, _, _, c = d.in_x()
    if bound < c:
        return None
    if g < tuning.MIN_CHANGE_GENERATIONS:
        return (f"a headline metric is unchanged on the process pairs of "
                f"{tuning.MIN_CHANGE_GENERATIONS} generations, and it has {g}")
    return (f"the one-sided {100 * (1 - settings.for_metric(d.key).beta):g}% t bound of its {g} "
            f"generations' estimates, {paired.from_x(d.kind, bound):.4g}, reaches the threshold")


def _across_generations(d: Decision, samples: SessionPairs, settings: CompareSettings) -> bool:
    """Whether the process pairs of at least ``MIN_CHANGE_GENERATIONS`` generations show ``d``'s
    change: the t interval of their estimates (:func:`generations_interval`, at the session's
    corrected level) wholly on the change's side of no change. Two process pairs that both happen
    to run one side slower agree with each other, and so their spread cannot show that their bias
    is a draw; more pairs are new draws, and the t interval's few degrees of freedom allow for the
    spread that their estimates do show (four process pairs of an A/A shard ran an add of 0.03 ms
    6.6 % slower on the head, design effect 2.03: at 95 % their t interval lay above no change)."""
    low, high, _ = generations_interval(d.key, samples, settings)
    return low > 0 if d.verdict == "regressed" else high < 0


def _unconfirmed_why(d: Decision, samples: SessionPairs, settings: CompareSettings) -> str | None:
    """Why ``d``, a change in time, is not confirmed yet: not shown by the pairs of each start
    order on their own (:func:`_both_orders`), or not by the process pairs of its generations
    (:func:`_across_generations`); ``None`` when it is, or when ``d`` is no such change."""
    if d.verdict not in ("regressed", "improved") or d.kind == "count":
        return None
    if not _both_orders(d, samples, settings):
        return "not shown by the pairs of each start order of the sides on their own"
    if _across_generations(d, samples, settings):
        return None
    low, high, g = generations_interval(d.key, samples, settings)
    if g < tuning.MIN_CHANGE_GENERATIONS:
        return (f"shown by {g} generations' process pairs, and a change needs "
                f"{tuning.MIN_CHANGE_GENERATIONS}")
    ends = sorted(paired.from_x(d.kind, v) for v in (low, high))  # a rate's turns round
    return (f"the t interval of its {g} generations' estimates, [{ends[0]:.3g}, {ends[1]:.3g}], "
            "reaches no change")


def _unconfirmed(d: Decision, samples: SessionPairs, settings: CompareSettings) -> bool:
    """Whether ``d`` is a change in time not confirmed yet (:func:`_unconfirmed_why`)."""
    return _unconfirmed_why(d, samples, settings) is not None


def _one_sided(d: Decision, samples: SessionPairs) -> bool:
    """Whether ``d`` is unchanged on the pairs of one start order alone with the interval it is
    ruled on (:meth:`.paired.Decision.beta_x`), widened for a spread between process pairs that
    one of them cannot show (``ONE_PAIR_DESIGN_EFFECT``, :mod:`.tuning`), reaching a change that
    counts either way (``-c`` or ``c``): one process pair's bias, which can be as large as a
    change (0.815 head/base of a whole generation, one busy loop beside it; a 3 % slower conv2d
    at 1.001-1.013 in one process pair), may be what hides a change there, and the pairs of that
    process pair cannot rule it out."""
    if d.verdict != "unchanged" or d.kind == "count" or _orders(d.key, samples) >= 2:
        return False
    estimate, _, _, c = d.in_x()
    low, high = _wider(estimate, *d.beta_x(), math.sqrt(tuning.ONE_PAIR_DESIGN_EFFECT))
    return low <= -c or high >= c


def _orders(key: MetricKey, samples: SessionPairs) -> int:
    """How many start orders ``key`` has pairs of (0-2)."""
    return sum(1 for f in ("base", "head") if (part := samples.part(key, f)) and part.pairs)


def _one_order(d: Decision, samples: SessionPairs) -> bool:
    """Whether ``d`` is undecided on the pairs of one start order only: the other order, a
    process pair of its own, has not been asked yet (a benchmark whose visit stopped as decided
    at the family the first pass knew then, and is undecided at the session's)."""
    return d.verdict == "undecided" and d.kind != "count" and _orders(d.key, samples) == 1


def _confirmed(d: Decision, samples: SessionPairs, settings: CompareSettings) -> Decision:
    """``d``, or undecided when it is a change seen in one start order only, unchanged on
    one start order's pairs whose interval, widened for one process pair, reaches a change that
    counts (:func:`_one_sided`), or a headline metric unchanged on its pairs but not on its
    process pairs (:func:`_unshown_unchanged_why`)."""
    if _one_sided(d, samples):
        return dataclasses.replace(d, verdict="undecided",
                                   statistic=f"{d.statistic}; unchanged on the pairs of one "
                                   "start order, but their interval, widened by a design effect "
                                   f"of {tuning.ONE_PAIR_DESIGN_EFFECT:g} for the spread between "
                                   "process pairs one cannot show, reaches a change that counts: "
                                   "one process pair's bias could hide a change")
    why = _unconfirmed_why(d, samples, settings) or _unshown_unchanged_why(d, samples, settings)
    if why is None:
        return d
    return dataclasses.replace(d, verdict="undecided", statistic=f"{d.statistic}; {d.verdict}, "
                               f"but {why}")


def final_decisions(samples: SessionPairs, settings: CompareSettings) -> list[Decision]:
    """The session's decisions, one per metric in ``samples``' order: :func:`.paired.decide` on
    all the pairs, a change seen in one start order only made undecided (the module docstring),
    and the undecided ones that are inconclusive marked so (:func:`_inconclusive`). Pure and
    deterministic."""
    decisions = [_confirmed(d, samples, settings) for d in session_decide(samples, settings)]
    return _inconclusive(decisions, samples, settings)


def settled(samples: SessionPairs, settings: CompareSettings) -> str | None:
    """The note of a session whose gate's verdict is known whatever its undecided metrics end
    as: a metric regressed (a confirmed change, or a count), so the gate fails, and more pairs
    would only size what is left; ``None`` while none is."""
    verdicts = Counter(d.verdict for d in final_decisions(samples, settings))
    if not verdicts["regressed"]:
        return None
    return (f"stopped once the gate's verdict was settled: {verdicts['regressed']} metric(s) "
            f"regressed, {verdicts['undecided']} left undecided")


def points_to_regression(d: Decision) -> bool:
    """Whether ``d``'s pairs point to a regression they may not show past ``c/2``: its estimate
    past the threshold ``c`` (:attr:`.paired.Decision.past_threshold`), or its interval above no
    change (``low > 0``) and reaching ``c``. What an undecided metric needs to be a candidate for
    inconclusive (:func:`_inconclusive`, which asks more of each)."""
    if d.kind == "count" or not math.isfinite(d.estimate):
        return False
    _, low, high, c = d.in_x()
    return d.past_threshold or (math.isfinite(c) and low > 0 and high >= c)


def _inconclusive(decisions: list[Decision], samples: SessionPairs,
                  settings: CompareSettings) -> list[Decision]:
    """``decisions`` with the inconclusive ones marked: undecided, and either

    * its estimate past the threshold ``c`` (:attr:`.paired.Decision.past_threshold`) and the
      interval of all its pairs above no change (``low > 0``) at the level corrected for the
      session's undecided metrics only, its generations' process pairs not disagreeing (fewer
      than ``MIN_CHANGE_GENERATIONS`` generations, or their t interval at that level above no
      change); or
    * its own interval, at the session's level, above no change and reaching ``c``, and the t
      interval of at least ``MIN_CHANGE_GENERATIONS`` generations' estimates, at the session's
      level too (:func:`generations_interval`), above no change: a slowdown shown by the pairs
      and by the process pairs alike, as a change is, that may be as large as ``c``, where only
      the ``c/2`` margin of a regression is not shown. A slowdown just past ``c`` has its
      estimate below ``c`` about as often as above it (a 3 % slower step at a 3 % threshold,
      one busy loop beside it: 0.977 [0.957, 0.997] examples/sec after 17 process pairs), and
      was a warning.

    The estimate alone would not do: an A/A metric too noisy to decide lies past ``c`` by chance
    often (here, one of a session's 20 undecided e2e stats at 1.08x [0.94, 1.24]); the interval
    keeps the chance that an unchanged session has any inconclusive metric at about
    ``alpha / 2`` for each rule, as :func:`.paired.decide` does for its regressions. Nor is a
    metric whose process pairs disagree (an A/A relu_grad that two process pairs ran 10 % slower
    and a third did not)."""
    undecided = [i for i, d in enumerate(decisions)
                 if d.verdict == "undecided" and points_to_regression(d) and d.pairs]
    if not undecided:
        return decisions
    # corrected for the number of metrics it is given: the undecided ones
    everyone = [i for i, d in enumerate(decisions)
                if d.verdict == "undecided" and d.kind != "count" and d.pairs]
    keys = [decisions[i].key for i in everyone]
    looks = dict(zip(everyone, session_decide(samples, settings, keys), strict=True))
    family = samples.family(keys)
    out = list(decisions)
    for i in undecided:
        d = decisions[i]
        if d.past_threshold and looks[i].in_x()[1] > 0:
            generations_low, _, g = generations_interval(d.key, samples, settings, family)
            if g < tuning.MIN_CHANGE_GENERATIONS or generations_low > 0:  # pairs agree
                out[i] = dataclasses.replace(d, inconclusive=True)
                continue
        _, low, high, c = d.in_x()
        if low > 0 and high >= c:
            generations_low, _, g = generations_interval(d.key, samples, settings)
            if g >= tuning.MIN_CHANGE_GENERATIONS and generations_low > 0:
                out[i] = dataclasses.replace(d, inconclusive=True)
    return out


def unbounded(d: Decision, settings: CompareSettings) -> bool:
    """Whether ``d`` is undecided for want of pairs alone: it has an estimate, but fewer pairs
    than ``min_pairs`` or no bounded interval at its level (a benchmark visited before the
    session knew how many metrics it corrects for took the pairs of a smaller family)."""
    if d.verdict != "undecided" or d.kind == "count" or not math.isfinite(d.estimate):
        return False
    return d.pairs < settings.for_metric(d.key).min_pairs or math.isinf(d.half_width)


def may_regress(samples: SessionPairs, key: MetricKey, final: str,
                settings: CompareSettings) -> bool:
    """Whether ``key`` can still end regressed when the pairs of the start order ``final`` get no
    more pairs. A regression needs those pairs, on their own, to show it (the start order rule):
    at least ``min_pairs`` of them and the lower end of their interval,
    widened for their generations, above no change. The pairs and their generations are fixed,
    and the family only grows (samples are never dropped), so the interval at the end is at least
    as wide as at today's family: a lower end at or below 0 now stays there (its upper end, which
    must reach ``c``, only grows, and so is not read). Counts (exact, no confirmation) always
    may."""
    if samples.paired[key].kind == "count":
        return True
    part = samples.part(key, final)
    if part is None or part.pairs < _order_pairs(key, settings):
        return False
    _, low, _, _ = _part_decision(part, settings, samples.family(),
                                  samples.generations_of(key, final)).in_x()
    return low > 0


def wanting_pairs(samples: SessionPairs, settings: CompareSettings, final: str | None = None,
                  undecided: str = "inconclusive") -> list[tuple[MetricKey, Want]]:
    """The metrics that want more pairs, in ``samples``' order, and how long they may have them.

    ``"gate"``, up to the ceiling: the gate's verdict waits for them. A change still to confirm
    (seen in one start order only, or by fewer process pairs than a change needs:
    :func:`_unconfirmed`); unchanged on one start order's pairs whose widened interval reaches a
    change that counts (:func:`_one_sided`); a headline metric unchanged on its pairs and not yet
    on its process pairs (:func:`_unshown_unchanged_why`); an undecided metric with the pairs of
    one start order only (:func:`_one_order`); and an undecided metric whose verdict could fail
    the gate or is what the pull request is about (``undecided``, ``--opperf-compare-undecided``:
    every one with ``fail``; by default one whose pairs point to a regression,
    :func:`points_to_regression`, which may end inconclusive, every one of an e2e run, and one
    undecided for want of pairs alone, :func:`unbounded`). ``"decide"``, within the reruns'
    budget: every other undecided metric.

    With ``final`` (the start order whose pairs get no more pairs), only those that may still
    end regressed (:func:`may_regress`), and those whose undecided verdict itself fails or is
    waited for (the last group above)."""
    wanted: list[tuple[MetricKey, Want]] = []
    for d in session_decide(samples, settings):
        change = (_unconfirmed(d, samples, settings) or _one_sided(d, samples)
                  or _unshown_unchanged_why(d, samples, settings) is not None)
        if not change and d.verdict != "undecided":
            continue
        always = undecided == "fail" or (undecided == "inconclusive" and (
            points_to_regression(d) or samples.e2e(d.key) or unbounded(d, settings)))
        if not always and final is not None and not may_regress(samples, d.key, final, settings):
            continue
        wanted.append((d.key, "gate" if always or change or _one_order(d, samples) else "decide"))
    return wanted
