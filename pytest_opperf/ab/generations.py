"""The process pairs of an A/B session, its generations: what each says on its own, and what
their spread says of all (pure).

Each generation is one fresh pair of side processes, one draw of everything a process fixes for
its life (memory layout, hash seed, which core it starts on), and so of a bias that all its pairs
share. :func:`design_effect` widens a metric's interval for the spread between them;
:func:`generation_estimates` are what each process pair says of the change; the t interval and the
one-sided bound of their mean (:func:`generations_interval`, :func:`generations_bound`, ``G - 1``
degrees of freedom) rule a change or "unchanged" on the process pairs alone, which the design
effect estimated from two or three of them can miss (:mod:`.decide`, docs/ab-statistics.md).
:func:`generation_bias` is the session's own A/A-style estimate of their bias, for the report.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..comparison.metrics import MetricKey
from ..comparison.thresholds import CompareSettings
from ..core.stats import median, student_t_quantile
from . import paired, tuning
from .family import Family
from .samples import SessionPairs
from .signedrank import hodges_lehmann

__all__ = ["design_effect", "generation_bias", "generation_estimates", "generations_bound",
           "generations_interval"]


def generation_bias(samples: SessionPairs) -> list[dict[str, Any]]:
    """The session's own estimate of the process pairs' bias: for each generation, the side
    started first, its pairs, its time metrics, and the geometric mean over them of each metric's
    median head/base in that generation (an A/A session's would all be 1; their spread is what
    one process pair adds on its own, which :func:`design_effect` allows for)."""
    logs: dict[int, list[float]] = {}
    pairs: dict[int, int] = {}
    firsts: dict[int, str] = {}
    for key, p in samples.paired.items():
        generations, order = samples.generations.get(key, []), samples.firsts.get(key, [])
        by: dict[int, list[float]] = {}
        for b, h, g, first in zip(p.base, p.head, generations, order, strict=True):
            pairs[g] = pairs.get(g, 0) + 1
            firsts.setdefault(g, first)
            if p.kind == "time" and b > 0 and h > 0:
                by.setdefault(g, []).append(math.log(h / b))
        for g, xs in by.items():
            logs.setdefault(g, []).append(median(xs))
    out = []
    for g in sorted(pairs):
        mean = math.exp(math.fsum(logs[g]) / len(logs[g])) if logs.get(g) else None
        out.append({"generation": g, "first": firsts[g], "pairs": pairs[g],
                    "metrics": len(logs.get(g, [])), "geometric_mean": mean})
    return out


def _by_generation(x: Sequence[float], groups: Sequence[int]) -> dict[int, list[float]]:
    """The finite values of ``x`` grouped by their generation (``groups``)."""
    by: dict[int, list[float]] = {}
    for value, group in zip(x, groups, strict=True):
        if math.isfinite(value):
            by.setdefault(group, []).append(value)
    return by


def design_effect(x: Sequence[float], groups: Sequence[int]) -> float:
    """How many times the variance of the mean of the pairs ``x`` grows because they come from
    several process pairs (``groups``: each pair's generation) that each add a bias of their own:
    the design effect of a clustered sample, ``1 + (m - 1) * icc``, where ``m`` is the effective
    number of pairs per generation (``sum(n_g**2) / N``) and ``icc`` the share of the variance
    between generations, from a one-way random-effects ANOVA (its estimate of the between-groups
    variance clipped at 0). 1 with fewer than two generations: there is nothing to estimate the
    spread between process pairs from, and so one generation cannot show it."""
    by = _by_generation(x, groups)
    sizes = [len(v) for v in by.values()]
    n, g = sum(sizes), len(by)
    if g < 2 or n <= g:
        return 1.0
    mean = math.fsum(v for vs in by.values() for v in vs) / n
    means = {k: math.fsum(vs) / len(vs) for k, vs in by.items()}
    between = math.fsum(len(vs) * (means[k] - mean) ** 2 for k, vs in by.items()) / (g - 1)
    within = math.fsum((v - means[k]) ** 2 for k, vs in by.items() for v in vs) / (n - g)
    n0 = (n - math.fsum(s * s for s in sizes) / n) / (g - 1)
    spread = max(0.0, (between - within) / n0) if n0 > 0 else 0.0
    if spread == 0.0:
        return 1.0
    icc = spread / (spread + within)
    return 1.0 + (math.fsum(s * s for s in sizes) / n - 1.0) * icc


def generation_estimates(samples: SessionPairs, key: MetricKey) -> list[float]:
    """The Hodges-Lehmann estimate of each generation's pairs of ``key`` in ``x`` units (finite
    ones), in the order of the generations: what each process pair, on its own, says of the
    change. An e2e visit gives a generation some 9 step pairs, whose median would spread 1.2 times
    as much between generations under the same noise (docs/ab-statistics.md, "Each process
    pair's estimate")."""
    by = _by_generation(paired.pair_x(samples.paired[key]), samples.generations_of(key))
    return [hodges_lehmann(by[g]) for g in sorted(by)]


def _generations_mean(samples: SessionPairs, key: MetricKey) -> tuple[float, float, int]:
    """The mean of :func:`generation_estimates` of ``key``, its standard error and the number of
    generations; nan for both with fewer than ``MIN_CHANGE_GENERATIONS`` (:mod:`.tuning`)."""
    estimates = generation_estimates(samples, key)
    g = len(estimates)
    if g < max(2, tuning.MIN_CHANGE_GENERATIONS):
        return math.nan, math.nan, g
    mean = math.fsum(estimates) / g
    return mean, math.sqrt(math.fsum((e - mean) ** 2 for e in estimates) / (g - 1) / g), g


def generations_interval(key: MetricKey, samples: SessionPairs, settings: CompareSettings,
                         family: Family | None = None) -> tuple[float, float, int]:
    """The t interval (``generations - 1`` degrees of freedom) of the mean of
    :func:`generation_estimates` of ``key``, in ``x``, at the level of ``family`` (default:
    the session's, as every interval of its pairs), and the number of generations; an unbounded
    interval with fewer than ``MIN_CHANGE_GENERATIONS`` (:mod:`.tuning`)."""
    mean, se, g = _generations_mean(samples, key)
    if math.isnan(mean):
        return -math.inf, math.inf, g
    a = (family or samples.family()).level(settings.for_metric(key).alpha, key)
    half = student_t_quantile(1 - a / 2, g - 1) * se
    return mean - half, mean + half, g


def generations_bound(key: MetricKey, samples: SessionPairs,
                      settings: CompareSettings) -> tuple[float, int]:
    """The one-sided ``1 - beta`` t bound (``generations - 1`` degrees of freedom, not corrected,
    as the bound "unchanged" is ruled on) of the mean of :func:`generation_estimates` of ``key``
    on the regression's side, in ``x``, and the number of generations; inf with fewer than
    ``MIN_CHANGE_GENERATIONS`` (:mod:`.tuning`)."""
    mean, se, g = _generations_mean(samples, key)
    if math.isnan(mean):
        return math.inf, g
    return mean + student_t_quantile(1 - settings.for_metric(key).beta, g - 1) * se, g
