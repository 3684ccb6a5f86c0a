"""Paired samples of an e2e run measured on both sides, step by step (pure).

The two sides of an A/B session run an e2e test in lockstep, one step each in turn, so step i of the
base and step i of the head form pair i. Both runs are read through their steady-state view
(:func:`pytest_opperf.comparison.metrics.view`: the warm-up step dropped, as everywhere), whose
sampled metrics pair up sample by sample: each stat's per-step time (``step_ms:<stat>``), the step's
examples/sec, the step's Python share; per-step op counts (``count:<stat>``) are one pair per run,
compared exactly (a count on one side only is 0 on the other), and so are the work counts of the
runs' counting passes (``bytecodes:<stat>``..., when both sides counted; :mod:`pytest_opperf
.workcount`), where only an increase is a regression. A stat that takes no time in any steady step
on either side (an initializer of the startup program, which runs before the first step) has no
time metric: no ratio of two zeros can be decided, and its count says whether it runs.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from ..comparison.metrics import COUNT, Kind, metric, view
from ..results import RunResult
from ..workcounts.workcount import compared

__all__ = ["MetricSamples", "e2e_samples"]


@dataclass(frozen=True)
class MetricSamples:
    run: str
    metric: str
    kind: Kind
    base: list[float]
    head: list[float]


def _idle(samples: Sequence[float]) -> bool:
    return all(v <= 0 for v in samples)


def e2e_samples(base: RunResult, head: RunResult) -> Iterator[MetricSamples]:
    """The paired samples of one e2e run (``head.id``) measured on both sides."""
    run = head.id
    bv, hv = view(base), view(head)
    for name, h in hv.items():
        b = bv.get(name)
        if h.kind == "count" or b is None or not (b.sampled and h.sampled):
            continue  # a stat on one side only: its count tells
        n = min(len(b.samples), len(h.samples))
        if n and not (_idle(b.samples[:n]) and _idle(h.samples[:n])):
            yield MetricSamples(run, name, h.kind, list(b.samples[:n]), list(h.samples[:n]))
    for name in sorted(set(base.counts) | set(head.counts)):
        yield MetricSamples(run, metric(COUNT, name), "count", [float(base.counts.get(name, 0))],
                            [float(head.counts.get(name, 0))])
    if base.work is not None and head.work is not None:
        for stat, counter, was, now in compared(base.work, head.work):
            yield MetricSamples(run, metric(counter, stat), "count", [float(was)], [float(now)])
