"""Change points of a series: where a metric stepped, and by how much (pure, numpy).

The method is a penalised step fit: the series (per-commit medians, in time order) is fitted by a
piecewise-constant function, a step kept only when it lowers the squared error by more than a
penalty. The steps are found by binary segmentation (Scott and Knott 1974; the ``Binseg`` of the
``ruptures`` library, and asv's step detection is a penalised fit of the same kind): split where the
error drops most, then split each side, while a split pays for its penalty. It costs a few numpy
passes per step, so a dashboard of a thousand commits and hundreds of metrics stays quick. Choices
for timing data:

* The fit is on ``log(value)`` when every value is positive, so a step is a ratio (a 10 % slowdown
  weighs the same at 0.1 ms and at 100 ms), else on the values scaled by their median magnitude.
* The penalty is ``PENALTY_BETA * sigma**2 * log(n)`` (a BIC-like penalty), with ``sigma`` the noise
  estimated robustly from the median absolute difference of neighbours, so that one outlier does not
  inflate it, and never below ``min_sigma`` (timers do not resolve better than that: a perfectly
  flat series must not turn every 0.1 % wiggle into a step).
* Outliers are held within 3 sigma of a running median before the fit, so that one bad commit does
  not pull a step onto itself; each step is then placed where it fits the unclipped data best.
* Segments have at least ``min_size`` points: a single outlying commit is not a step; a real step is
  reported once ``min_size`` commits show it.
* Steps smaller than ``min_change`` (relative) are dropped afterwards, and the neighbouring segments
  merged.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["MIN_CHANGE", "PENALTY_BETA", "ChangePoint", "detect", "segments"]

PENALTY_BETA = 3.0
MIN_CHANGE = 0.03
MIN_SIGMA = 0.005


@dataclass(frozen=True)
class ChangePoint:
    """The series stepped at ``index`` (the first point of the new level)."""

    index: int
    before: float  # median of the segment before the step (original units)
    after: float  # median of the segment from the step on

    @property
    def ratio(self) -> float:
        return self.after / self.before if self.before else math.inf

    @property
    def change(self) -> float:
        """Relative change, e.g. +0.25 for 25 % higher."""
        return self.ratio - 1.0


def _transform(values: np.ndarray) -> np.ndarray:
    if np.all(values > 0):
        return np.log(values)
    scale = float(np.median(np.abs(values))) or float(np.max(np.abs(values))) or 1.0
    return values / scale


def _noise(x: np.ndarray, min_sigma: float) -> float:
    if len(x) < 3:
        return min_sigma
    mad = float(np.median(np.abs(np.diff(x))))
    return max(1.4826 * mad / math.sqrt(2.0), min_sigma)


def _clip(x: np.ndarray, sigma: float, width: int = 5, k: float = 3.0) -> np.ndarray:
    """Each point held within ``k`` sigma of the running median of its neighbours: an outlier's pull
    on the squared error is bounded, a step (which moves the running median with it) is kept."""
    half = width // 2
    padded = np.pad(x, half, mode="edge")
    windows = np.lib.stride_tricks.sliding_window_view(padded, width)
    centre = np.median(windows, axis=1)
    return np.clip(x, centre - k * sigma, centre + k * sigma)


def _binseg(x: np.ndarray, penalty: float, min_size: int) -> list[int]:
    """Binary segmentation: split a segment where the squared error drops most, if the drop
    beats the penalty, then split both halves the same way; returns the step indices."""
    steps: list[int] = []
    stack = [(0, len(x))]
    while stack:
        a, b = stack.pop()
        length = b - a
        if length < 2 * min_size:
            continue
        csum = np.cumsum(x[a:b])
        total = csum[-1]
        k = np.arange(min_size, length - min_size + 1)
        left = csum[k - 1]
        gain = left * left / k + (total - left) ** 2 / (length - k) - total * total / length
        j = int(np.argmax(gain))
        if gain[j] > penalty:
            split = a + int(k[j])
            steps.append(split)
            stack += [(a, split), (split, b)]
    return sorted(steps)


def _refine(x: np.ndarray, steps: list[int], min_size: int) -> list[int]:
    """Each step moved to the split of the unclipped data that fits its two segments best
    (clipping can shift a step near the end by a point); a step that then leaves a segment
    shorter than ``min_size`` is dropped."""
    out: list[int] = []
    bounds = [0, *steps, len(x)]
    for k in range(1, len(bounds) - 1):
        lo, hi = (out[-1] if out else 0), bounds[k + 1]
        best, where = np.inf, bounds[k]
        for j in range(max(lo + 1, bounds[k] - min_size + 1), min(hi, bounds[k] + min_size)):
            left, right = x[lo:j], x[j:hi]
            cost = float(((left - left.mean()) ** 2).sum() + ((right - right.mean()) ** 2).sum())
            if cost < best - 1e-12:
                best, where = cost, j
        if where - lo >= min_size and hi - where >= min_size:
            out.append(where)
    return out


def segments(values: Sequence[float] | np.ndarray,
             steps: Sequence[int]) -> list[tuple[int, int, float]]:
    """(start, stop, median) of each segment between the steps."""
    bounds = [0, *steps, len(values)]
    return [(a, b, float(np.median(np.asarray(values[a:b], dtype=float))))
            for a, b in itertools.pairwise(bounds)]


def detect(values: Sequence[float], min_size: int = 3, min_change: float = MIN_CHANGE,
           beta: float = PENALTY_BETA, min_sigma: float = MIN_SIGMA) -> list[ChangePoint]:
    """The change points of ``values`` (time order), each with the medians around it."""
    y = np.asarray(values, dtype=float)
    if len(y) < 2 * min_size or not np.all(np.isfinite(y)):
        return []
    x = _transform(y)
    sigma = _noise(x, min_sigma)
    steps = _binseg(_clip(x, sigma), beta * sigma * sigma * math.log(len(x)), min_size)
    steps = _refine(x, steps, min_size)
    while True:  # drop the smallest step below min_change, merge its segments, repeat
        segs = segments(y, steps)
        changes = [abs(b[2] / a[2] - 1.0) if a[2] else math.inf
                   for a, b in itertools.pairwise(segs)]
        small = [i for i, c in enumerate(changes) if c < min_change]
        if not small:
            break
        steps.pop(min(small, key=lambda i: changes[i]))
    segs = segments(y, steps)
    return [ChangePoint(index=b[0], before=a[2], after=b[2]) for a, b in itertools.pairwise(segs)]
