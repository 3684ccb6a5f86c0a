"""The gate: one place that turns checks into a verdict's violations (limits, counts, time, A/B).

The policy is stated once, in docs/gate.md: time fails only in A/B
(decisions by :mod:`pytest_opperf.ab.paired`); against a stored baseline op counts, work counts
and ``[[limit]]``s are hard and time is a :class:`~pytest_opperf.comparison.verdict.Drift` table, a
gate only under ``[regression] time = "gate"`` and then not against other or unknown hardware or
another workload.

:func:`evaluate` checks the absolute ``[[limit]]``s here (a ``[[limit]]`` matching nothing is a
warning) and a stored baseline with :func:`pytest_opperf.comparison.baseline_checks.check_baseline`
(the regression rule on time is :mod:`pytest_opperf.comparison.regression`); :func:`add_compare`
adds an A/B session's decisions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from fnmatch import fnmatchcase
from typing import Any

from ..ab.paired import CompareResult, Decision
from ..results import ResultSet, RunResult
from ..workcounts.workcount import COUNTERS, LABELS
from .baseline_checks import check_baseline
from .metrics import AVG, CALL, TOTAL, metric, steady_examples_per_sec
from .thresholds import Thresholds
from .verdict import Verdict, Violation

__all__ = ["UNDECIDED_MODES", "add_compare", "evaluate"]

# What an A/B metric left undecided does (--opperf-compare-undecided): an inconclusive one (its
# pairs showing a slowdown that may be past the threshold) fails and the others warn (the
# default); every one warns; every one fails.
UNDECIDED_MODES = ("inconclusive", "warn", "fail")


class _Limits:
    """The absolute ``[[limit]]`` checks; they accumulate into ``verdict``."""

    def __init__(self, thresholds: Thresholds, verdict: Verdict) -> None:
        self.thresholds = thresholds
        self.verdict = verdict
        self.limit_runs: set[int] = set()  # [[limit]] tables whose run glob matched a run
        self.limit_stats: set[int] = set()  # ... and whose stat glob matched a stat of one

    def unmatched_limits(self) -> None:
        """A warning per [[limit]] matching nothing: a typo must not switch it off silently."""
        warnings = self.verdict.warnings
        for index, lim in enumerate(self.thresholds.limits):
            stat = f", stat = {lim.stat!r}" if lim.stat else ""
            where = f"[[limit]] #{index + 1} (run = {lim.run!r}{stat})"
            limits_stats = lim.max_avg_ms is not None or lim.max_total_ms is not None
            if index not in self.limit_runs:
                warnings.append(f"{where} matches no run of this session: it checked nothing")
            elif limits_stats and index not in self.limit_stats:
                warnings.append(f"{where} matches no stat of the runs it matches: its stat limits "
                                "checked nothing")

    def fail(self, run: str, metric: str, value: float, limit: float, baseline: float | None,
             message: str, statistic: str) -> None:
        violation = Violation(run, metric, value, limit, baseline, message, statistic)
        self.verdict.violations.append(violation)

    def limits(self, run: RunResult) -> None:
        for index, lim in enumerate(self.thresholds.limits):
            if not fnmatchcase(run.id, lim.run):
                continue
            self.limit_runs.add(index)
            if lim.min_examples_per_sec is not None:
                self.verdict.checks += 1
                # The steady state decides: the warm-up step holds data synthesis, the startup
                # program and first kernel compiles, one-time work that is no throughput.
                steady = steady_examples_per_sec(run)
                eps = run.examples_per_sec if steady is None else steady
                if eps < lim.min_examples_per_sec:
                    what, statistic = "examples/sec", "absolute limit"
                    if steady is not None:
                        what += " in the steps after warm-up"
                        statistic += " on the steady state"
                    self.fail(run.id, "examples_per_sec", eps, lim.min_examples_per_sec, None,
                              f"{eps:.5g} {what} is below the limit {lim.min_examples_per_sec:g}",
                              statistic)
            if lim.max_python_share is not None:
                self.verdict.checks += 1
                if run.python_share > lim.max_python_share:
                    self.fail(run.id, "python_share", run.python_share, lim.max_python_share, None,
                              f"Python share {run.python_share:.2%} is above the limit "
                              f"{lim.max_python_share:.2%}", "absolute limit")
            if lim.max_avg_ms is None and lim.max_total_ms is None:
                continue
            for s in run.stats:
                if not fnmatchcase(s.name, lim.stat or "*"):
                    continue
                self.limit_stats.add(index)
                for key, value, bound in ((AVG, s.avg_ms, lim.max_avg_ms),
                                          (TOTAL, s.total_ms, lim.max_total_ms)):
                    if bound is None:
                        continue
                    self.verdict.checks += 1
                    if value > bound:
                        what = key.removesuffix("_ms")
                        self.fail(run.id, metric(key, s.name), value, bound, None,
                                  f"{s.name} {what} {value:.4g} ms is above the limit {bound:g} ms",
                                  "absolute limit")


def evaluate(results: ResultSet, thresholds: Thresholds | None = None,
             baseline: ResultSet | None = None, baseline_name: str | None = None) -> Verdict:
    """Check ``results`` against the absolute limits and, when given, a stored baseline (counts
    hard; time as drift, hard only with ``time = "gate"`` on comparable hardware)."""
    thresholds = thresholds or Thresholds()
    verdict = Verdict(thresholds=thresholds.source)
    verdict.baseline = baseline_name
    limits = _Limits(thresholds, verdict)
    for run in results.runs:
        limits.limits(run)
    limits.unmatched_limits()
    if baseline is not None:
        check_baseline(verdict, thresholds.regression, results, baseline, baseline_name)
    return verdict


def add_compare(verdict: Verdict, compare: CompareResult | None,
                problems: Sequence[tuple[str, str, str]] = (),
                undecided: str = "inconclusive") -> None:
    """The A/B session's violations: each regressed metric, each test that could not be compared
    (``problems``: a base test that failed; ``(test, metric, why)``), and the undecided metrics
    that ``undecided`` (:data:`UNDECIDED_MODES`) makes fail: the inconclusive ones (by default),
    none or all. The verdict counts and names every undecided metric, inconclusive first.
    ``compare`` is None when the A/B did not run to its end."""
    if undecided not in UNDECIDED_MODES:
        raise ValueError(f"undecided must be one of {', '.join(UNDECIDED_MODES)}, "
                         f"got {undecided!r}")
    if compare is not None:
        verdict.checks += len(compare.decisions)
        for d in compare.decisions:
            if d.verdict == "regressed":
                verdict.violations.append(Violation(d.key.run, d.key.metric, d.head,
                                                    _limit_value(d), d.base, _ab_message(d),
                                                    d.statistic, _explain(compare, d)))
        left = sorted((d for d in compare.decisions if d.verdict == "undecided"),
                      key=lambda d: not d.inconclusive)
        verdict.undecided = len(left)
        verdict.inconclusive = sum(1 for d in left if d.inconclusive)
        verdict.undecided_metrics = [f"{d.key.run}::{d.key.metric}" for d in left]
        verdict.violations += [replace(_undecided_violation(d, undecided),
                                       explain=_explain(compare, d)) for d in left
                               if undecided == "fail" or (undecided == "inconclusive"
                                                          and d.inconclusive)]
    verdict.violations += [Violation(test, metric, 0.0, 0.0, None, why,
                                     "A/B: a test must pass on both sides to be compared")
                           for test, metric, why in problems]


def _explain(compare: CompareResult, d: Decision) -> dict[str, Any] | None:
    """``d``'s explanation as the gate JSON keeps it, when the session has one."""
    found = compare.explain.get(d.key)
    return found.to_dict() if found is not None else None


def _undecided_violation(d: Decision, mode: str) -> Violation:
    """The violation of an undecided metric that fails the gate under ``mode``."""
    what = "inconclusive" if d.inconclusive else "undecided"
    if d.ratio:
        where = f"head/base {d.estimate:.4g} [{d.low:.4g}, {d.high:.4g}], counts from {d.limit:.4g}"
    else:
        where = f"{d.estimate:+.4g} [{d.low:+.4g}, {d.high:+.4g}], counts from {d.limit:+.4g}"
    if mode != "inconclusive":
        why = "--opperf-compare-undecided=fail"
    else:
        shown = ("its estimate is past the threshold" if d.past_threshold
                 else "its interval shows a slowdown and reaches the threshold")
        why = (f"{shown}, its interval too wide to decide; "
               "--opperf-compare-undecided=warn only warns")
    value, limit, base = (v if math.isfinite(v) else 0.0  # a metric without pairs has none
                          for v in (d.head, _limit_value(d), d.base))
    return Violation(d.key.run, d.key.metric, value, limit, base,
                     f"A/B {what} after {d.pairs} pair(s): {where} ({why})", d.statistic)


def _limit_value(d: Decision) -> float:
    """The head value from which the change counts, in the metric's own unit."""
    if d.kind in ("time", "rate"):
        return d.base * d.limit
    if d.kind == "share":
        return d.base + d.limit
    return d.base


def _ab_message(d: Decision) -> str:
    """The gate's message for a regressed metric: base, head, ratio (or difference), interval."""
    stat = d.key.stat or d.key.metric
    if d.kind == "count" and d.key.prefix in COUNTERS:
        change = f"{(d.head - d.base) / d.base:+.1%}" if d.base else "new"
        return (f"{change} {LABELS[d.key.prefix]} in {stat}: {d.head:,.0f} per step, base "
                f"{d.base:,.0f} (A/B, exact)")
    if d.kind == "count":
        return f"{stat} runs {d.head:g} times per step, base {d.base:g} (A/B, exact)"
    if d.kind == "share":
        return (f"Python share of the steps {d.head:.2%} vs base {d.base:.2%}: "
                f"{d.estimate * 100:+.2f} points [{d.low * 100:+.2f}, {d.high * 100:+.2f}] "
                f"(counts from +{d.limit * 100:.2f} points)")
    interval = f"head/base {d.estimate:.3f} [{d.low:.3f}, {d.high:.3f}]"
    if d.kind == "rate":
        return (f"{d.head:.5g} examples/sec vs base {d.base:.5g}: {interval} "
                f"(a drop counts from {d.limit:.3f})")
    unit = "time per call" if d.key.prefix == CALL else "per-step time"
    return (f"{stat} median {unit} {d.head:.4g} ms vs base {d.base:.4g} ms: {interval} "
            f"(counts from {d.limit:.3f})")
