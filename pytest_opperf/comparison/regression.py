"""The regression rule on time: whether a series of samples is higher (slower) than its baseline's.

A series is slower than its baseline when its median exceeds the baseline's by more than
``max_slowdown`` AND by more than a floor in ms AND a one-sided Mann-Whitney U test at ``alpha``
says so (with fewer than ``min_samples`` samples: twice the tolerance and every sample slower).
Samples are a run's steady state (:func:`pytest_opperf.comparison.metrics.view`). The gate
(:mod:`pytest_opperf.comparison.baseline_checks`) applies it to each time metric against a stored
baseline.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..core.stats import Samples, mann_whitney_u
from .thresholds import Regression

__all__ = ["Comparison", "compare_higher", "compare_slower"]


@dataclass(frozen=True)
class Comparison:
    """Whether one series got slower than its baseline, and why."""

    regressed: bool
    base: float  # baseline median
    new: float  # new median
    limit: float  # the new median's bound: limit(base median), e.g. base x (1 + max_slowdown)
    # or base + increase for the Python share; twice the tolerance with few samples
    statistic: str


def compare_higher(base: Sequence[float], new: Sequence[float], regression: Regression,
                   limit: Callable[[float], float], floor: float = 0.0) -> Comparison:
    """Whether ``new`` is higher than ``base`` beyond ``limit(base median)`` and ``floor``,
    and the samples say the difference is real (the rule in this module's docstring)."""
    b, n = Samples(base), Samples(new)
    few = min(b.n, n.n) < regression.min_samples
    bound = limit(b.median)
    if few:  # no rank test to lean on: twice the tolerance
        bound = b.median + 2 * (bound - b.median)
    higher = n.median > bound and n.median - b.median > floor
    ratio = n.median / b.median if b.median > 0 else math.inf if n.median > 0 else 1.0
    medians = f"median {b.median:.4g} -> {n.median:.4g} (ratio {ratio:.3f})"
    if not few:
        test = mann_whitney_u(new, base)
        regressed = higher and test.p_value < regression.alpha
        statistic = (f"Mann-Whitney U one-sided p={test.p_value:.2g} (alpha {regression.alpha:g}, "
                     f"n={n.n} vs {b.n}), {medians}")
    else:
        separated = n.min > b.max
        regressed = higher and separated
        statistic = (f"few samples (n={n.n} vs {b.n} < {regression.min_samples}): twice the "
                     f"tolerance, {'every' if separated else 'not every'} new sample above every "
                     f"baseline sample, {medians}")
    return Comparison(regressed, b.median, n.median, bound, statistic)


def compare_slower(base: Sequence[float], new: Sequence[float], regression: Regression,
                   floor: float, tolerance: float | None = None) -> Comparison:
    """The regression rule on two non-empty sample series (larger = slower);
    ``tolerance`` defaults to ``max_slowdown``."""
    slowdown = regression.max_slowdown if tolerance is None else tolerance
    return compare_higher(base, new, regression, lambda m: m * (1 + slowdown), floor)
