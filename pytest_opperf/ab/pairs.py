"""Paired samples of an e2e run measured on both sides, step by step (pure).

The two sides of an A/B session run an e2e test in lockstep, one step each in turn, so step i of the
base and step i of the head form pair i. The first step (model building, startup) is warm-up and is
dropped when there are at least two. Per pair: each stat's per-step time (``step_ms:<stat>``), the
step's examples/sec (``examples_per_sec``), the step's Python share (wall minus executor time, over
wall: ``python_share``), and per-step op counts (``count:<stat>``, one pair per run, compared
exactly).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ..results import RunResult
from ..stats import after_warmup

__all__ = ["MetricSamples", "e2e_samples"]


@dataclass(frozen=True)
class MetricSamples:
    run: str
    metric: str
    kind: str  # time | rate | share | count
    base: list[float]
    head: list[float]


def _aligned(base: list[float], head: list[float]) -> tuple[list[float], list[float]]:
    n = min(len(base), len(head))
    return after_warmup(base[:n]), after_warmup(head[:n])


def e2e_samples(base: RunResult, head: RunResult) -> Iterator[MetricSamples]:
    """The paired samples of one e2e run (``head.id``) measured on both sides."""
    run = head.id
    base_stats, head_stats = base.stat_map(), head.stat_map()
    for name, h in head_stats.items():
        b = base_stats.get(name)
        if b is None or not b.samples_ms or not h.samples_ms:
            continue  # on one side only: its count tells
        xs, ys = _aligned(list(b.samples_ms), list(h.samples_ms))
        if xs:
            yield MetricSamples(run, f"step_ms:{name}", "time", xs, ys)
    rates = [[e / ms * 1e3 if ms > 0 else 0.0
              for e, ms in zip(r.step_examples, r.step_ms, strict=False)]
             for r in (base, head)]
    if all(rates) and any(base.step_examples):
        xs, ys = _aligned(*rates)
        yield MetricSamples(run, "examples_per_sec", "rate", xs, ys)
    shares = (base.step_python_shares(), head.step_python_shares())
    if shares[0] and shares[1]:
        xs, ys = _aligned(shares[0], shares[1])
        yield MetricSamples(run, "python_share", "share", xs, ys)
    for name in sorted(set(base.counts) | set(head.counts)):
        yield MetricSamples(run, f"count:{name}", "count", [float(base.counts.get(name, 0))],
                            [float(head.counts.get(name, 0))])
