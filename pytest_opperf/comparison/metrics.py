"""The metric vocabulary, and the steady-state view of a run that every comparison reads.

A metric is one named series of a run: ``step_ms:<stat>`` (an e2e stat's per-step totals),
``call_ms:<stat>`` (a per-op benchmark's time per call, one sample a round), ``avg_ms:<stat>`` (a
stat's average where it has no samples), ``examples_per_sec`` (per step), ``python_share`` (each
step's share of wall time outside the executor), ``count:<stat>`` (per-step op counts), the work
counts ``bytecodes:<stat>``, ``py_calls:<stat>``, ``c_calls:<stat>`` (a stat's self counts per step
from the counting pass, :mod:`pytest_opperf.workcounts.workcount`; the stat ``(outside)`` is the
work outside every timed region) and ``instructions`` (CPU instructions per step, under valgrind;
the work counts are compared by :func:`pytest_opperf.comparison.gate.evaluate`, exactly, and are no
series of :func:`view`). A series' *kind* says how two of them compare: ``time`` (larger is slower),
``rate`` (smaller is slower), ``share`` (a difference in points) or ``count`` (exact).

:func:`view` is the steady state, for the stored-baseline gate, the drift table, the A/B pairs, the
reports and the history alike: a run says which of its leading steps are warm-up
(:attr:`~pytest_opperf.results.RunResult.warmup_steps`, set once by the one warm-up rule,
:func:`pytest_opperf.results.warmup_rule`, when the run is recorded or read), and the functions
here are the only ones that leave them out (:func:`steady`, :func:`steady_steps`,
:func:`steady_python_shares`, :func:`steady_examples_per_sec`).

Steady-state examples/sec is one number: the examples of the steps after warm-up over their time
(:func:`steady_examples_per_sec`, sum over sum); a run without a warm-up step has none, and its
whole window's ``examples_per_sec`` (examples over wall time) stands for it. Compared with a
baseline, the metric's samples are each steady step's rate (a distribution to test, as for every
sampled metric).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from ..results import RunResult

__all__ = ["AVG", "CALL", "COUNT", "EXAMPLES_PER_SEC", "INSTRUCTIONS", "METRIC_KINDS",
           "PYTHON_SHARE", "STEP", "TIME_KINDS", "TOTAL", "WINDOW_EXAMPLES_PER_SEC",
           "WINDOW_PYTHON_SHARE", "Kind", "MetricKey", "MetricSeries", "metric", "stat_of",
           "steady", "steady_examples_per_sec", "steady_python_shares", "steady_steps", "view"]

Kind = Literal["time", "rate", "share", "count"]
METRIC_KINDS: tuple[str, ...] = ("time", "rate", "share", "count")  # Kind's values
TIME_KINDS: tuple[str, ...] = ("time", "rate")  # the kinds a machine's speed moves

STEP, CALL, AVG, TOTAL, COUNT = "step_ms", "call_ms", "avg_ms", "total_ms", "count"
EXAMPLES_PER_SEC, PYTHON_SHARE, INSTRUCTIONS = "examples_per_sec", "python_share", "instructions"
# the whole window's values (warm-up included), named apart from the steady-state ones above
WINDOW_EXAMPLES_PER_SEC, WINDOW_PYTHON_SHARE = "window_examples_per_sec", "window_python_share"


def metric(prefix: str, stat: str) -> str:
    """A stat's metric name: ``metric(STEP, "conv2d")`` is ``step_ms:conv2d`` (one string
    object for every run's, so that a comparison of many runs holds each name once)."""
    return sys.intern(f"{prefix}:{stat}")


def stat_of(name: str) -> str | None:
    """The stat of ``call_ms:conv2d`` (``conv2d``); None for run-level metrics."""
    _, sep, stat = name.partition(":")
    return stat if sep else None


@dataclass(frozen=True)
class MetricKey:
    """One metric of one run: ``run`` is the run id (the same on both sides of a comparison),
    ``metric`` a name of this module's vocabulary."""

    run: str
    metric: str

    @property
    def stat(self) -> str | None:
        """The stat of ``call_ms:conv2d`` (``conv2d``); None for run-level metrics."""
        return stat_of(self.metric)

    @property
    def prefix(self) -> str:
        """``call_ms`` of ``call_ms:conv2d``; the whole name of a run-level metric."""
        return self.metric.partition(":")[0]


@dataclass(frozen=True)
class MetricSeries:
    """One metric of a run in its steady state: ``sampled`` is False where ``samples`` is a
    single summary value (a stat's average, a run's whole-window share) rather than samples."""

    metric: str
    kind: Kind
    samples: tuple[float, ...]
    sampled: bool = True

    @property
    def stat(self) -> str | None:
        return stat_of(self.metric)


def steady(run: RunResult, per_step: Sequence[float] | None) -> list[float]:
    """A per-step series of ``run`` (its ``step_ms``, a stat's per-step totals, per-step rates)
    without its warm-up steps; a per-op run's rounds (it has no steps) all."""
    return list(per_step[run.warmup_steps:]) if per_step else []


def steady_steps(run: RunResult) -> list[float]:
    """The wall ms of the steps after warm-up."""
    return steady(run, run.step_ms)


def steady_python_shares(run: RunResult) -> list[float]:
    """Each step's share of wall time outside the executor, after warm-up: what the gate
    decides on (empty if unknown: no per-step executor time, or a step of no time)."""
    shares = run.step_python_shares()
    return steady(run, shares) if shares and all(w > 0 for w in run.step_ms) else []


def steady_examples_per_sec(run: RunResult) -> float | None:
    """Steady-state examples/sec: the examples of the steps after warm-up over their time;
    ``None`` for a run without a warm-up step (fewer than two steps), whose whole window's
    ``examples_per_sec`` stands for it, or without per-step examples."""
    if not run.warmup_steps or len(run.step_examples) != len(run.step_ms):
        return None
    ms = sum(steady_steps(run))
    return sum(steady(run, run.step_examples)) / (ms / 1e3) if ms > 0 else None


def _series(name: str, kind: Kind, values: Sequence[float],
            sampled: bool = True) -> MetricSeries:
    return MetricSeries(name, kind, tuple(float(v) for v in values), sampled)


def view(run: RunResult) -> dict[str, MetricSeries]:
    """Every metric of ``run``, in its steady state (the steps after warm-up; a per-op run's
    rounds all), keyed by metric name, in the run's stat order then run-level ones.

    A stat without samples is ``avg_ms:<stat>`` (its average); e2e runs add the per-step
    ``examples_per_sec`` and ``python_share`` (the whole window's share when the run has no
    per-step executor time) and ``count:<stat>`` for each per-step op count. (Work counts are one
    value per run, not a series: :func:`pytest_opperf.workcounts.workcount.compared` pairs two
    runs'.)"""
    e2e = run.kind == "e2e"
    out: dict[str, MetricSeries] = {}
    for s in run.stats:
        samples = steady(run, s.samples_ms)
        if samples:
            name = metric(STEP if e2e else CALL, s.name)
            out[name] = _series(name, "time", samples)
        else:
            name = metric(AVG, s.name)
            out[name] = _series(name, "time", [s.avg_ms], sampled=False)
    if not e2e:
        return out
    rates = [e / ms * 1e3 for e, ms in zip(run.step_examples, run.step_ms, strict=False) if ms > 0]
    steady_rates = steady(run, rates)
    if (any(run.step_examples) and len(rates) == min(len(run.step_examples), len(run.step_ms))
            and steady_rates):
        out[EXAMPLES_PER_SEC] = _series(EXAMPLES_PER_SEC, "rate", steady_rates)
    elif run.examples > 0 and run.examples_per_sec > 0:
        out[EXAMPLES_PER_SEC] = _series(EXAMPLES_PER_SEC, "rate", [run.examples_per_sec],
                                        sampled=False)
    shares = steady_python_shares(run)
    out[PYTHON_SHARE] = (_series(PYTHON_SHARE, "share", shares) if shares
                         else _series(PYTHON_SHARE, "share", [run.python_share], sampled=False))
    if run.batches:
        for name in sorted(run.counts):
            key = metric(COUNT, name)
            out[key] = _series(key, "count", [run.counts[name]], sampled=False)
    return out
