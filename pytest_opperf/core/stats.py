"""Pure sample statistics: summaries of timing samples, the Mann-Whitney U test and the quantiles
of Student's t.

No pytest and no numpy: the gate runs these on a few hundred per-step samples, where plain Python is
fast enough and keeps the plugin's import light. ``tests/test_stats.py`` checks them against
hand-computed values and ``scipy.stats``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

__all__ = ["MannWhitney", "Samples", "mann_whitney_u", "median", "most_common", "normal_sf",
           "student_t_quantile"]


def median(values: Sequence[float]) -> float:
    """The median (mean of the two middle values for an even count)."""
    if not values:
        raise ValueError("median of no values")
    s = sorted(values)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


class Samples:
    """Summary statistics of one series of samples (e.g. per-step ms): what the gate reads."""

    def __init__(self, values: Sequence[float]) -> None:
        if not values:
            raise ValueError("Samples needs at least one value")
        self.sorted = sorted(values)
        self.n = len(self.sorted)
        self.min, self.max = self.sorted[0], self.sorted[-1]

    @cached_property
    def median(self) -> float:
        return median(self.sorted)


def most_common(values: Sequence[int]) -> tuple[int, bool]:
    """The most common value (the smallest of equally common ones) and whether all values agree."""
    if not values:
        raise ValueError("most_common of no values")
    counts = Counter(values)
    top = max(counts.values())
    return min(v for v, c in counts.items() if c == top), len(counts) == 1


def normal_sf(z: float) -> float:
    """P(Z > z) for a standard normal Z; exact in the tails, unlike 1 - cdf."""
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def _student_t_central(t: float, df: int) -> float:
    """P(|T| < t) for Student's t with ``df`` (a whole number) degrees of freedom and t >= 0: the
    finite sums in the angle ``atan(t / sqrt(df))`` of Abramowitz and Stegun, 26.7.3-4."""
    theta = math.atan(t / math.sqrt(df))
    c2 = math.cos(theta) ** 2
    term, total = 1.0, 1.0
    if df % 2 == 0:  # sin(theta) * (1 + 1/2 c^2 + 1*3/(2*4) c^4 + ... up to c^(df-2))
        for k in range(2, df, 2):
            term *= c2 * (k - 1) / k
            total += term
        return math.sin(theta) * total
    if df == 1:
        return 2 * theta / math.pi
    for k in range(3, df, 2):  # 1 + 2/3 c^2 + 2*4/(3*5) c^4 + ... up to c^(df-3)
        term *= c2 * (k - 1) / k
        total += term
    return 2 / math.pi * (theta + math.sin(theta) * math.cos(theta) * total)


def student_t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile (0.5 <= p < 1) of Student's t with ``df`` >= 1 whole degrees of
    freedom, by bisection on its distribution function to about 1e-12 of the value."""
    if not 0.5 <= p < 1 or df < 1:
        raise ValueError(f"student_t_quantile needs 0.5 <= p < 1 and df >= 1, given {p}, {df}")
    target = 2 * p - 1  # P(|T| < t)
    low, high = 0.0, 1.0
    while _student_t_central(high, df) < target:
        high *= 2
    while high - low > 1e-12 * max(1.0, high):
        mid = (low + high) / 2
        low, high = (mid, high) if _student_t_central(mid, df) < target else (low, mid)
    return (low + high) / 2


@dataclass(frozen=True)
class MannWhitney:
    """Result of a one-sided Mann-Whitney U test that ``x`` tends to exceed ``y``."""

    u: float  # U of x: how many (x, y) pairs have x > y, ties counting one half
    p_value: float
    method: str  # "exact" or "asymptotic"


def _midranks(values: Sequence[float]) -> tuple[list[float], list[int]]:
    """Ranks starting at 1, ties sharing their mean rank; and the tie group sizes."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    ties: list[int] = []
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        rank = (i + j) / 2 + 1
        for k in range(i, j + 1):
            ranks[order[k]] = rank
        ties.append(j - i + 1)
        i = j + 1
    return ranks, ties


def _u_counts(m: int, n: int) -> list[int]:
    """How many of the C(m+n, m) orderings give U = 0, 1, ..., m*n.

    These are the coefficients of the Gaussian binomial [m+n choose m]_q =
    prod_{i=1..m} (1 - q^(n+i)) / (1 - q^i); each factor is a multiplication
    or a division of the series by a binomial, linear in its length."""
    m, n = min(m, n), max(m, n)
    size = m * n + 1
    c = [0] * size
    c[0] = 1
    for i in range(1, m + 1):
        a = n + i
        for k in range(size - 1, a - 1, -1):  # times (1 - q^a), descending to reuse c in place
            c[k] -= c[k - a]
        for k in range(i, size):  # divided by (1 - q^i): a running sum with stride i
            c[k] += c[k - i]
    return c


def mann_whitney_u(x: Sequence[float], y: Sequence[float], method: str = "auto",
                   continuity: bool = True) -> MannWhitney:
    """One-sided Mann-Whitney U test of "x is stochastically greater than y".

    ``method="auto"`` is exact when one sample has at most 8 values and there are no ties, and
    otherwise the normal approximation with tie correction (and a continuity correction of 1/2), as
    ``scipy.stats.mannwhitneyu`` chooses. When every value ties the test has no evidence: p = 1.
    """
    n1, n2 = len(x), len(y)
    if n1 == 0 or n2 == 0:
        raise ValueError(f"Mann-Whitney U needs two non-empty samples, got sizes {n1} and {n2}")
    if method not in ("auto", "exact", "asymptotic"):
        raise ValueError(f"method must be 'auto', 'exact' or 'asymptotic', got {method!r}")
    ranks, ties = _midranks(list(x) + list(y))
    u = math.fsum(ranks[:n1]) - n1 * (n1 + 1) / 2
    has_ties = any(t > 1 for t in ties)
    if method == "auto":
        method = "asymptotic" if (n1 > 8 and n2 > 8) or has_ties else "exact"
    if method == "exact":
        if has_ties:
            raise ValueError("the exact Mann-Whitney U distribution assumes no ties")
        counts = _u_counts(n1, n2)
        at_least = sum(counts[math.ceil(u):])
        return MannWhitney(u, min(1.0, at_least / math.comb(n1 + n2, n1)), "exact")
    n = n1 + n2
    tie_term = sum(t**3 - t for t in ties)
    sigma = math.sqrt(n1 * n2 / 12 * ((n + 1) - tie_term / (n * (n - 1))))
    numerator = u - n1 * n2 / 2 - (0.5 if continuity else 0.0)
    if sigma == 0.0:
        p = 1.0 if numerator <= 0 else 0.0
    else:
        p = normal_sf(numerator / sigma)
    return MannWhitney(u, min(1.0, max(0.0, p)), "asymptotic")
