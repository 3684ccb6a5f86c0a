"""A session checked against a stored baseline: per-step op counts (exact) and work counts (hard),
time (stat times, examples/sec, the Python share) as a
:class:`~pytest_opperf.comparison.verdict.Drift` table, whose regressions
(:mod:`pytest_opperf.comparison.regression`) fail only with ``[regression] time = "gate"`` and a
baseline from the same hardware and workload; and one ``baseline_match`` violation when the baseline
has too few of the session's runs.

:func:`check_baseline` adds these to a verdict; :func:`pytest_opperf.comparison.gate.evaluate` calls
it after the absolute limits.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ..core.identity import mismatch
from ..core.machine import hardware_facts, same_hardware
from ..core.stats import Samples
from ..explain.diff import explain
from ..reports.layout import listing
from ..results import ResultSet, RunResult
from ..workcounts.workcount import LABELS, WorkCounts, compared
from .metrics import (
    AVG,
    COUNT,
    EXAMPLES_PER_SEC,
    INSTRUCTIONS,
    PYTHON_SHARE,
    TIME_KINDS,
    MetricSeries,
    metric,
    steady_steps,
    view,
)
from .regression import Comparison, compare_higher, compare_slower
from .thresholds import Regression
from .verdict import Drift, DriftRow, Verdict, Violation

__all__ = ["ALWAYS_RECORDED", "check_baseline"]


def _pct(ratio: float) -> str:
    return f"{(ratio - 1) * 100:+.1f}%" if math.isfinite(ratio) else "+inf%"


def _matched(base: RunResult, new: RunResult) -> Iterator[tuple[str, MetricSeries, MetricSeries]]:
    """The time, rate and share metrics of ``new`` that ``base`` has too, from both views. Where
    one side has samples and the other a summary, both are compared by their summaries: a stat's
    average (``avg_ms:<stat>``), a run's whole-window examples/sec or Python share."""
    bv, nv = view(base), view(new)
    base_stats, new_stats = base.stat_map(), new.stat_map()
    for name, n in nv.items():
        b = bv.get(name)
        if n.kind not in ("time", "rate", "share"):  # counts and work counts do not drift
            continue
        if b is not None and b.sampled == n.sampled:
            yield name, b, n
        elif n.stat is not None and n.stat in base_stats:
            avg = metric(AVG, n.stat)
            yield (avg, MetricSeries(avg, "time", (base_stats[n.stat].avg_ms,), False),
                   MetricSeries(avg, "time", (new_stats[n.stat].avg_ms,), False))
        elif b is not None and name in _WHOLE:
            yield (name, MetricSeries(name, b.kind, (_WHOLE[name](base),), False),
                   MetricSeries(name, n.kind, (_WHOLE[name](new),), False))


_WHOLE: dict[str, Callable[[RunResult], float]] = {
    EXAMPLES_PER_SEC: lambda r: r.examples_per_sec, PYTHON_SHARE: lambda r: r.python_share}


@dataclass(frozen=True)
class _Checked:
    """One time metric compared: the comparison, and the violation it would be."""

    comparison: Comparison
    message: str
    statistic: str


class _Baseline:
    """The checks against one baseline; they accumulate into ``verdict``."""

    def __init__(self, verdict: Verdict, regression: Regression) -> None:
        self.regression = regression
        self.verdict = verdict
        self.drift: list[DriftRow] = []
        # runs whose work counts could not be compared, by why; changes that did not fail
        self.uncounted: dict[str, list[str]] = {"lost": [], "new": [], "neither": [],
                                                "versions": [], "unversioned": [], "cpu": []}
        self.work_changes: list[str] = []

    def work_notes(self, label: str) -> None:
        """One line per reason work counts were not compared, and one for the changes that
        did not fail (improvements, advisory ones)."""
        lost, new, neither, versions, unversioned, cpu = (
            self.uncounted[k] for k in ("lost", "new", "neither", "versions", "unversioned",
                                        "cpu"))
        if lost:
            self.verdict.warnings.append(
                f"{len(lost)} run(s) have no work counts but their baseline runs have: not "
                f"compared (their counting pass failed or did not run; see the run's notes): "
                f"{listing(lost)}")
        if neither:
            # a work regression of these runs passes unseen: the verdict must say so
            self.verdict.warnings.append(
                f"{len(neither)} run(s) have no work counts and neither have their baseline runs: "
                f"work counts not compared (a run has them from run.counting_pass(); see the "
                f"run's notes): {listing(neither)}")
        if versions:
            self.verdict.warnings.append(
                f"work counts of {len(versions)} run(s) are advisory: the library versions differ "
                f"from {label}'s: {listing(versions)}")
        if unversioned:
            self.verdict.warnings.append(
                f"work counts of {len(unversioned)} run(s) are advisory: the versions they depend "
                f"on are not recorded on both sides (save a new baseline to gate them): "
                f"{listing(unversioned)}")
        if cpu:
            self.verdict.notes.append(f"CPU instructions of {len(cpu)} run(s) not compared: "
                                      f"{label} counted them on another CPU: {listing(cpu)}")
        if new:
            self.verdict.notes.append(f"{len(new)} run(s) have work counts and their baseline "
                                      f"runs none (save a new baseline to gate them): "
                                      f"{listing(new)}")
        if self.work_changes:
            self.verdict.notes.append(f"work counts that changed without failing: "
                                      f"{listing(self.work_changes)}")

    def fail(self, run: str, metric: str, value: float, limit: float, baseline: float | None,
             message: str, statistic: str, pair: tuple[RunResult, RunResult] | None = None
             ) -> None:
        """A violation; with ``pair`` (the baseline's run and the session's), explained from
        their work counts when both have them (:func:`pytest_opperf.explain.diff.explain`)."""
        why = None
        if pair is not None and pair[0].work is not None and pair[1].work is not None:
            why = explain(metric, *pair).to_dict()
        self.verdict.violations.append(Violation(run, metric, value, limit, baseline, message,
                                                 statistic, why))

    def counts(self, base: RunResult, new: RunResult) -> None:
        if self.regression.counts != "exact" or not base.batches or not new.batches:
            return
        for name in sorted(set(base.counts) | set(new.counts)):
            self.verdict.checks += 1
            was, now = base.counts.get(name, 0), new.counts.get(name, 0)
            if was != now:
                self.fail(new.id, metric(COUNT, name), now, was, was,
                          f"{name} runs {now} times per step, baseline {was}",
                          "per-step count (exact)")

    def work(self, base: RunResult, new: RunResult) -> None:
        """Work counts of ``new`` against ``base``, each stat's self counts (hard: deterministic
        for the same code and library versions; an increase beyond ``max_work_increase`` fails);
        CPU instructions per step on the same CPU model beyond ``max_instructions_increase``.
        What cannot be compared is collected in ``self.uncounted`` for one line each."""
        bw, nw = base.work, new.work
        if bw is None or nw is None:
            if bw is not None:
                self.uncounted["lost"].append(new.id)
            elif nw is not None:
                self.uncounted["new"].append(new.id)
            else:
                self.uncounted["neither"].append(new.id)
            return
        versions = _version_difference(bw, nw)
        unknown = None if versions else _versions_unknown(bw, nw)
        if versions:
            self.uncounted["versions"].append(f"{new.id} ({versions})")
        elif unknown:
            self.uncounted["unversioned"].append(f"{new.id} ({unknown})")
        gating = not versions and not unknown
        tolerance = self.regression.max_work_increase
        for stat, counter, was, now in compared(bw, nw):
            self._work_check(new.id, metric(counter, stat), now, was, tolerance, gating,
                             f"{LABELS[counter]} in {stat}", "work count per step", (base, new))
        if bw.instructions is not None and nw.instructions is not None:
            if bw.instructions_cpu != nw.instructions_cpu:
                self.uncounted["cpu"].append(f"{new.id} ({nw.instructions_cpu!r} vs "
                                             f"{bw.instructions_cpu!r})")
            else:
                self._work_check(new.id, INSTRUCTIONS, nw.instructions, bw.instructions,
                                 self.regression.max_instructions_increase, True,
                                 "CPU instructions per step", "CPU instructions (valgrind)",
                                 (base, new))

    def _work_check(self, run: str, name: str, now: int, was: int, tolerance: float,
                    gating: bool, what: str, statistic: str,
                    pair: tuple[RunResult, RunResult]) -> None:
        if gating:
            self.verdict.checks += 1
        if now == was:
            return
        change = f"{(now - was) / was:+.1%}" if was else "new"
        text = f"{change} {what}: {now:,} per step, baseline {was:,}"
        if now > was * (1 + tolerance) and gating:
            rule = f"tolerance +{tolerance:.1%}" if tolerance else "exact"
            self.fail(run, name, float(now), was * (1 + tolerance), float(was), f"{text} ({rule})",
                      f"{statistic}, {rule}", pair)
        else:
            self.work_changes.append(f"{run}: {text}")

    def time(self, base: RunResult, new: RunResult, gating: bool) -> None:
        """Every time metric of ``new`` against ``base``: a drift row each, and a violation
        each that the rule finds slower when ``gating``."""
        for name, b, n in _matched(base, new):
            checked = self._check(base, new, name, b, n)
            c = checked.comparison
            slowdown = difference = None
            if n.kind == "share":
                difference = c.new - c.base
            elif c.base > 0:  # a rate is compared as time per example: c holds ms per example
                slowdown = c.new / c.base
            value, baseline = (1e3 / c.new, 1e3 / c.base) if n.kind == "rate" else (c.new, c.base)
            self.drift.append(DriftRow(new.id, name, n.kind, value, baseline, slowdown, None,
                                       difference, c.regressed, checked.statistic))
            if gating:
                self.verdict.checks += 1
                if c.regressed:
                    limit = 1e3 / c.limit if n.kind == "rate" else c.limit
                    self.fail(new.id, name, value, limit, baseline, checked.message,
                              checked.statistic, (base, new))

    def _check(self, base: RunResult, new: RunResult, name: str, b: MetricSeries,
               n: MetricSeries) -> _Checked:
        reg = self.regression
        if n.kind == "share":
            increase = reg.max_python_share_increase
            c = compare_higher(b.samples, n.samples, reg, lambda m: m + increase)
            if n.sampled and b.sampled:
                # The steady state decides: the whole-window share also holds the warm-up step
                # (model building, startup), whose noise is larger than a regression of the steps.
                message = (f"Python share of the steps after warm-up {c.new:.2%} vs baseline "
                           f"{c.base:.2%} (tolerance +{increase:.2%} absolute; whole window "
                           f"{new.python_share:.2%} vs {base.python_share:.2%})")
                return _Checked(c, message, f"per-step Python share: {c.statistic}")
            regressed = c.new > c.limit
            c = Comparison(regressed, c.base, c.new, c.limit, c.statistic)
            return _Checked(c, f"Python share {c.new:.2%} vs baseline {c.base:.2%} (tolerance "
                               f"+{increase:.2%} absolute)",
                            "no per-step samples: whole-window share compared")
        if n.kind == "rate":  # as time per example, so that slower is higher
            per_b = [1e3 / r for r in b.samples if r > 0] or [math.inf]
            per_n = [1e3 / r for r in n.samples if r > 0] or [math.inf]
            c = compare_slower(per_b, per_n, reg, 0.0)
            was, now = 1e3 / c.base, 1e3 / c.new
            what = "per-step ms per example" if n.sampled else "no per-step samples"
            return _Checked(c, f"{now:.5g} examples/sec vs baseline {was:.5g} "
                               f"({_pct(now / was)}, tolerance -{reg.max_slowdown:.0%})",
                            f"{what}: {c.statistic}")
        e2e = new.kind == "e2e"
        if e2e:
            steps = steady_steps(base)
            step_floor = reg.min_step_share * Samples(steps).median if steps else 0.0
            floor = max(reg.min_diff_ms, step_floor)
            tolerance = reg.max_slowdown
        else:
            floor = reg.op_min_diff_ms
            tolerance = reg.max_slowdown if reg.op_max_slowdown is None else reg.op_max_slowdown
        c = compare_slower(b.samples, n.samples, reg, floor, tolerance)
        statistic = c.statistic if n.sampled else f"no samples: averages compared, {c.statistic}"
        unit = ("average time" if not n.sampled else
                "median per-step time" if e2e else "median time per call")
        ratio = c.new / c.base if c.base > 0 else math.inf
        stat = n.stat or name
        return _Checked(c, f"{stat} {unit} {c.new:.4g} ms vs baseline {c.base:.4g} ms "
                           f"({_pct(ratio)}, tolerance +{tolerance:.0%}, floor {floor:.3g} ms)",
                        statistic)

    def drift_table(self, gating: bool) -> Drift:
        """The drift rows with the machine factor, the furthest from it first."""
        slowdowns = [r.slowdown for r in self.drift
                     if r.kind in TIME_KINDS and r.slowdown is not None
                     and math.isfinite(r.slowdown) and r.slowdown > 0]
        factor = statistics.median(slowdowns) if slowdowns else None
        rows = [r if r.slowdown is None or factor is None else
                DriftRow(r.run, r.metric, r.kind, r.value, r.baseline, r.slowdown,
                         r.slowdown / factor, r.difference, r.beyond, r.statistic)
                for r in self.drift]
        rows.sort(key=lambda r: (r.relative is None, -(r.relative or 0.0),
                                 -(r.difference or 0.0)))
        return Drift(factor, rows, gating)


def _version_difference(base: WorkCounts, new: WorkCounts) -> str | None:
    """How the versions that work counts depend on differ (those both recorded), or None."""
    diffs = [f"{name} {new.versions[name]} vs {base.versions[name]}"
             for name in sorted(set(base.versions) & set(new.versions))
             if base.versions[name] != new.versions[name]]
    return ", ".join(diffs) or None


# what workcount.library_versions records for every run (a library only when it is imported, which
# the process decides, not the run: a library one side lacks is no unknown version)
ALWAYS_RECORDED = ("python", "cpus")


def _versions_unknown(base: WorkCounts, new: WorkCounts) -> str | None:
    """Which versions that every run records only one side has (a baseline saved without them:
    its counts may come from any interpreter), or None."""
    lacking = {side: [name for name in ALWAYS_RECORDED
                      if name not in have.versions and name in other.versions]
               for side, have, other in (("the baseline run", base, new),
                                         ("this run", new, base))}
    said = [f"{side} records no {', '.join(names)}" for side, names in lacking.items() if names]
    return "; ".join(said) or None


def _unknown_hardware(baseline: ResultSet, results: ResultSet) -> str | None:
    """The hardware facts that only one side records (``same_hardware`` leaves them out: a
    baseline without them is not known to be from this machine), or None."""
    facts = hardware_facts(baseline.machine or {}), hardware_facts(results.machine or {})
    lacking = [(side, [key for key in facts[i] if facts[i][key] is None
                       and facts[1 - i][key] is not None])
               for i, side in enumerate(("the baseline", "this session"))]
    said = [f"{side} records no {', '.join(keys)}" for side, keys in lacking if keys]
    return "; ".join(said) or None


def _time_advisory(baseline: ResultSet, results: ResultSet) -> str | None:
    """Why times of ``baseline`` cannot gate ``results`` even with ``time = "gate"``."""
    other = same_hardware(baseline.machine, results.machine)
    if other:
        return f"other hardware ({other})"
    unknown = _unknown_hardware(baseline, results)
    if unknown:
        return f"unknown hardware ({unknown})"
    was, now = (baseline.session or {}).get("workload"), (results.session or {}).get("workload")
    if was and now and was != now:
        return f"another workload ({now} vs baseline {was})"
    return None


def check_baseline(verdict: Verdict, regression: Regression, results: ResultSet,
                   baseline: ResultSet, baseline_name: str | None) -> None:
    """Check ``results`` against ``baseline`` into ``verdict``: counts hard; time as drift, hard
    only with ``time = "gate"`` on comparable hardware."""
    gate = _Baseline(verdict, regression)
    label = f"baseline {baseline_name}" if baseline_name else "the baseline"
    why = _time_advisory(baseline, results)
    gating = gate.regression.time == "gate" and why is None
    if gate.regression.time == "gate" and why is not None:
        verdict.warnings.append(f'{label} is from {why}: time is advisory drift, not gated '
                                '(time = "gate" needs the same hardware and workload); counts '
                                'and limits still gate')
    elif why is not None:
        verdict.notes.append(f"{label} is from {why}: its times are drift only, as always")
    index = baseline.by_id()  # one lookup per run: linear in the number of runs
    unmatched = []
    measured_otherwise: list[str] = []
    for run in results.runs:
        base = index.get(run.id)
        if base is None:
            unmatched.append(run.id)
            continue
        if run.kind == "e2e" and base.kind == "e2e":
            gate.counts(base, run)
            gate.work(base, run)
        if mismatch(base, run):  # other timing or cache state: times are other quantities
            measured_otherwise.append(f"{run.id} ({mismatch(base, run)})")
        elif base.kind == run.kind:
            gate.time(base, run, gating)
    gate.work_notes(label)
    if measured_otherwise:
        verdict.warnings.append(f"{len(measured_otherwise)} run(s) measured otherwise than "
                                "their baseline run, times not compared (counts still are): "
                                f"{listing(measured_otherwise)}")
    if unmatched:
        verdict.notes.append(f"{len(unmatched)} run(s) have no baseline run: "
                             f"{listing(unmatched)}")
    _baseline_match(gate, results, baseline, baseline_name, len(results.runs) - len(unmatched),
                    index)
    measured = {r.id for r in results.runs}
    missing = [r.id for r in baseline.runs if r.id not in measured]
    if missing:
        verdict.notes.append(f"{len(missing)} baseline run(s) not measured in this "
                             f"session: {listing(missing)}")
    if gate.drift:
        verdict.drift = gate.drift_table(gating)


def _baseline_match(gate: _Baseline, results: ResultSet, baseline: ResultSet, name: str | None,
                    matched: int, index: dict[str, RunResult]) -> None:
    """A ``baseline_match`` violation when the baseline compares nothing, or too few of the
    session's runs."""
    total = len(results.runs)
    least = gate.regression.min_baseline_share
    label = f"baseline {name}" if name else "the baseline"
    if total == 0:
        message = f"the session measured no runs: nothing was compared with {label}"
    elif matched == 0 or matched / total < least:
        new_id = next(r.id for r in results.runs if r.id not in index)
        base_id = f"{baseline.runs[0].id!r}" if baseline.runs else "none (it has no runs)"
        message = (f"{label} has a run for only {matched} of the session's {total} run(s) (at "
                   f"least {least:.0%} expected): a wrong baseline, another workload or suite, or "
                   f"run ids that changed (e.g. {new_id!r} is not in it; its ids look like "
                   f"{base_id})")
    else:
        return
    gate.verdict.checks += 1
    share = matched / total if total else 0.0
    gate.fail("(session)", "baseline_match", share, least, None, message,
              "runs found in the baseline")
