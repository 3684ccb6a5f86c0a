"""The family of metrics an A/B decision is corrected for, and the weights of its correction.

An e2e run's headline metrics (``examples_per_sec``, ``python_share``, and the step itself: the
``step_ms`` of the run's executor stat, the root of its ``Stat=`` table) are what the report leads
with and what a change that only time can see (inside C kernels) shows in first, and they get the
fewest pairs, each the ratio of two whole training steps. The weighted Bonferroni of
:class:`Family` gives them half of ``alpha``. Pure: no numpy, no pytest.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ..comparison.metrics import EXAMPLES_PER_SEC, PYTHON_SHARE, Kind, MetricKey

__all__ = ["HEADLINE", "HEADLINE_SHARE", "Family", "headline"]

# An e2e run's headline metrics: what the report leads with, and what a change that only time can
# see (inside C kernels) shows in first.
HEADLINE = (EXAMPLES_PER_SEC, PYTHON_SHARE)
# The share of alpha the headline metrics of a family get between them, when it has others too.
HEADLINE_SHARE = 0.5


def headline(key: MetricKey, steps: Iterable[MetricKey] = ()) -> bool:
    """Whether ``key`` is an e2e run's headline metric: one of :data:`HEADLINE`, or one of
    ``steps`` (the ``step_ms`` of each e2e run's executor stat: the step)."""
    return key.metric in HEADLINE or key in steps


@dataclass(frozen=True)
class Family:
    """The metrics a decision is corrected for: ``headline`` of them an e2e run's headline metrics
    (:func:`headline`, ``steps`` the runs' step metrics), ``other`` the rest with statistics
    (counts are exact and not counted).

    The correction is a weighted Bonferroni: when the family has both kinds, the headline metrics
    share :data:`HEADLINE_SHARE` of ``alpha`` and the others the rest, each metric an equal part of
    its kind's share; with one kind only, each metric gets ``alpha`` over the family, as plain
    Bonferroni. The levels add up to ``alpha`` either way, so every interval of the family holds
    together with probability at least ``1 - alpha``. Why weighted: ci.yml's e2e job has 6 headline
    metrics among 81 with statistics. An e2e run's examples/sec gets a few pairs a visit with the
    noise of a whole step; at ``alpha / 81`` it needs 1.43 times the pairs it needs at
    ``alpha / 12``, while the others' intervals widen by 5 % (docs/ab-statistics.md,
    "Correction"). A family only grows in a session, and each level then only falls: an interval
    ruled on now is at least as wide at the end."""

    headline: int = 0
    other: int = 0
    steps: frozenset[MetricKey] = field(default=frozenset(), compare=False)

    @classmethod
    def of(cls, metrics: Iterable[tuple[MetricKey, Kind]],
           steps: Iterable[MetricKey] = ()) -> Family:
        """The family of ``metrics`` (each a key and its kind), counts left out; ``steps``: the e2e
        runs' step metrics (:func:`headline`)."""
        steps = frozenset(steps)
        kinds = [headline(key, steps) for key, kind in metrics if kind != "count"]
        return cls(sum(kinds), len(kinds) - sum(kinds), steps)

    def plus(self, other: int) -> Family:
        """This family with ``other`` more metrics that are not headline ones."""
        return Family(self.headline, self.other + max(0, other), self.steps)

    def level(self, alpha: float, key: MetricKey) -> float:
        """``alpha``'s share for ``key``, a metric of this family (or of its kind)."""
        if self.headline and self.other:
            if headline(key, self.steps):
                return alpha * HEADLINE_SHARE / self.headline
            return alpha * (1 - HEADLINE_SHARE) / self.other
        return alpha / max(1, self.headline + self.other)

    def describe(self) -> str:
        """The correction in words, for a decision's statistic."""
        size = self.headline + self.other
        metrics = f"{size} metric{'s' if size != 1 else ''}"
        if not (self.headline and self.other):
            return f"Bonferroni, {metrics}"
        return (f"Bonferroni, {metrics}, weighted: {HEADLINE_SHARE:g} of alpha over "
                f"{self.headline} headline")
