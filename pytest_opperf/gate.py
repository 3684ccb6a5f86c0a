"""The gate: thresholds file, absolute limits and baseline regressions, to a verdict.

Thresholds (TOML, ARCHITECTURE section 7) hold ``[regression]`` tolerances and ``[[limit]]`` tables
matched to runs and stats by glob, each key declared once in :class:`Regression` and :class:`Limit`
and checked by :mod:`pytest_opperf.keys`; the A/B ``[compare]`` table is
:mod:`pytest_opperf.ab.paired`'s.

The rules (written out in docs/contract-additions.md, "Thresholds file"): a stat is slower than its
baseline when its median sample exceeds the baseline's by more than ``max_slowdown`` AND by more
than a floor in ms AND a one-sided Mann-Whitney U test at ``alpha`` says so (with fewer than
``min_samples`` samples: twice the tolerance and every sample slower). Samples are per-step totals
after the warm-up step for e2e runs and per-call round times for per-op benchmarks. Throughput and
the per-step Python share (after warm-up; the whole window only without per-step samples) go through
the same test; per-step counts must be equal. A baseline that matches fewer than
``min_baseline_share`` of the session's runs is one ``baseline_match`` violation; a ``[[limit]]``
matching nothing is a warning.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from fnmatch import fnmatchcase
from typing import Any

from .ab.paired import CompareSettings, parse_compare
from .gpu_report import steady_examples_per_sec
from .identity import mismatch
from .keys import ThresholdsError, keys, parse, table_key, type_name, unknown
from .layout import listing
from .results import ResultSet, RunResult, read_text, same_hardware
from .stats import Samples, after_warmup, mann_whitney_u

__all__ = ["Comparison", "compare_higher", "Limit", "Regression", "Thresholds", "ThresholdsError",
           "Verdict", "Violation", "compare_slower", "evaluate", "load_thresholds",
           "parse_thresholds"]


@dataclass(frozen=True)
class Regression:
    """``[regression]``: tolerances against the baseline."""

    max_slowdown: float = table_key(0.10, "relative, per stat and for examples/sec", 0.0)
    max_python_share_increase: float = table_key(
        0.02, "the tolerance of the Python share (absolute)", 0.0, 1.0)
    counts: str = table_key("exact", "per-step op counts must not change, or are not compared",
                            choices=("exact", "ignore"))
    alpha: float = table_key(0.01, "significance level of the one-sided Mann-Whitney U test",
                             0.0, 1.0, lo_open=True)
    min_diff_ms: float = table_key(
        0.05, "floor: a stat's median per-step total must grow by more than this", 0.0)
    op_min_diff_ms: float = table_key(0.001, "the same floor per call, for per-op benchmarks", 0.0)
    min_samples: int = table_key(5, "fewer samples on either side: the conservative rule", 2)
    op_max_slowdown: float | None = table_key(
        None, "the relative tolerance of per-op benchmarks (default: max_slowdown); timed in "
        "isolation, they drift between sessions more than the steps of a run", 0.0)
    min_step_share: float = table_key(
        0.0, "a second e2e floor: a stat must also grow by more than this share of the "
        "baseline's median step time", 0.0, 1.0)
    min_baseline_share: float = table_key(
        0.5, "the share of the session's runs that must have a run of the same id in the "
        "baseline; below it the baseline is the wrong one and the gate fails", 0.0, 1.0)


@dataclass(frozen=True)
class Limit:
    """One ``[[limit]]``: absolute limits for the runs (and stats) its globs match."""

    run: str = table_key("*", "the runs it applies to (a glob on run ids)")
    stat: str | None = table_key(
        None, "the stats max_avg_ms and max_total_ms apply to (a glob; unset: every stat)")
    max_avg_ms: float | None = table_key(None, "upper limit of a stat's average (ms)", 0.0)
    max_total_ms: float | None = table_key(None, "upper limit of a stat's total (ms)", 0.0)
    min_examples_per_sec: float | None = table_key(
        None, "lower limit of a run's examples/sec (of the steps after warm-up, if any)", 0.0)
    max_python_share: float | None = table_key(None, "upper limit of a run's Python share of wall "
                                               "time", 0.0, 1.0, what="a share of wall time")


@dataclass(frozen=True)
class Thresholds:
    regression: Regression = Regression()
    limits: tuple[Limit, ...] = ()
    source: str | None = None
    compare: CompareSettings = CompareSettings()  # [compare]: the A/B decision (ab.paired)


_STAT_LIMITS = ("max_avg_ms", "max_total_ms")
_RUN_LIMITS = ("min_examples_per_sec", "max_python_share")


def _parse_limit(table: Any, index: int, source: str) -> Limit:
    where = f"[[limit]] #{index}"
    values = parse(keys(Limit), table, where, source)
    if not any(k in values for k in _STAT_LIMITS + _RUN_LIMITS):
        raise ThresholdsError(f"{source}: {where} sets no limit "
                              f"(give one of {', '.join(_STAT_LIMITS + _RUN_LIMITS)})")
    run_level = [k for k in _RUN_LIMITS if k in values]
    if "stat" in values and run_level:
        raise ThresholdsError(f"{source}: {where} {run_level[0]} limits a run, but the table "
                              f"also names stat = {values['stat']!r}; put it in a [[limit]] "
                              "without stat")
    return Limit(**values)


def parse_thresholds(data: Mapping[str, Any], source: str = "<thresholds>") -> Thresholds:
    """Thresholds from a parsed TOML document (raises :class:`ThresholdsError`)."""
    unknown(data, ["regression", "limit", "compare"], "the top level", source)
    regression = parse(keys(Regression), data.get("regression", {}), "[regression]", source)
    limits = data.get("limit", [])
    if not isinstance(limits, list):
        raise ThresholdsError(f"{source}: limit must be an array of tables ([[limit]]), "
                              f"got {type_name(limits)}")
    compare = parse_compare(data["compare"], source) if "compare" in data else CompareSettings()
    parsed = tuple(_parse_limit(t, i + 1, source) for i, t in enumerate(limits))
    return Thresholds(Regression(**regression), parsed, source, compare)


def load_thresholds(path: str | os.PathLike[str]) -> Thresholds:
    """Read a thresholds file; any problem is one line naming the file."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10
        import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]
    source = str(path)
    text = read_text(path, ThresholdsError, "a thresholds file")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ThresholdsError(f"{source}: not valid TOML: {exc}") from None
    except RecursionError:
        raise ThresholdsError(f"{source}: not a thresholds file: nested too deeply") from None
    return parse_thresholds(data, source)


# --- verdicts --------------------------------------------------------------------


@dataclass
class Violation:
    """One failed check (section 6 fields plus the statistic that decided it)."""

    run: str
    metric: str
    value: float | None  # None only in a verdict read back from a file (show)
    limit: float | None
    baseline: float | None
    message: str
    statistic: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Verdict:
    """The gate's outcome for one session."""

    violations: list[Violation] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    checks: int = 0
    baseline: str | None = None
    thresholds: str | None = None
    # why the session did not run to its end (interrupted, -x): such a verdict never passes
    incomplete: str | None = None
    undecided: int = 0  # A/B metrics that neither passed nor failed (shown in the verdict line)

    @property
    def passed(self) -> bool:
        return not self.violations and self.incomplete is None

    def to_dict(self) -> dict[str, Any]:
        d = {"passed": self.passed, "violations": [v.to_dict() for v in self.violations],
             "warnings": list(self.warnings), "notes": list(self.notes), "checks": self.checks,
             "baseline": self.baseline, "thresholds": self.thresholds, "undecided": self.undecided}
        if self.incomplete is not None:
            d["incomplete"] = self.incomplete
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Verdict:
        """A verdict stored in a results file (lenient: display only)."""
        violations = [Violation(
            run=str(v.get("run", "")), metric=str(v.get("metric", "")), value=v.get("value"),
            limit=v.get("limit"), baseline=v.get("baseline"), message=str(v.get("message", "")),
            statistic=str(v.get("statistic", ""))) for v in data.get("violations", [])
            if isinstance(v, dict)]
        incomplete = data.get("incomplete")
        if incomplete is None and data.get("passed") is False and not violations:
            # never show PASSED for a file that says otherwise
            incomplete = "the stored verdict did not pass"
        return cls(violations=violations, warnings=list(data.get("warnings", [])),
                   notes=list(data.get("notes", [])), checks=int(data.get("checks", 0)),
                   baseline=data.get("baseline"), thresholds=data.get("thresholds"),
                   incomplete=str(incomplete) if incomplete is not None else None,
                   undecided=int(data.get("undecided", 0)))


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


def _per_example_ms(run: RunResult) -> list[float]:
    """Per-step wall ms per example, after warm-up."""
    pairs = list(zip(run.step_ms, run.step_examples, strict=False))
    pairs = pairs[1:] if len(pairs) >= 2 else pairs
    return [ms / n for ms, n in pairs if n > 0]


def _pct(ratio: float) -> str:
    return f"{(ratio - 1) * 100:+.1f}%" if math.isfinite(ratio) else "+inf%"


class _Gate:
    """Checks accumulate into one verdict."""

    def __init__(self, thresholds: Thresholds) -> None:
        self.thresholds = thresholds
        self.regression = thresholds.regression
        self.verdict = Verdict(thresholds=thresholds.source)
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

    # absolute limits

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
                for key, value, bound in (("avg", s.avg_ms, lim.max_avg_ms),
                                          ("total", s.total_ms, lim.max_total_ms)):
                    if bound is None:
                        continue
                    self.verdict.checks += 1
                    if value > bound:
                        self.fail(run.id, f"{key}_ms:{s.name}", value, bound, None,
                                  f"{s.name} {key} {value:.4g} ms is above the limit {bound:g} ms",
                                  "absolute limit")

    # regressions

    def stats(self, base: RunResult, new: RunResult) -> None:
        e2e = new.kind == "e2e"
        reg = self.regression
        if e2e:
            steps = after_warmup(base.step_ms)
            step_floor = reg.min_step_share * Samples(steps).median if steps else 0.0
            floor = max(reg.min_diff_ms, step_floor)
            tolerance = reg.max_slowdown
        else:
            floor = reg.op_min_diff_ms
            tolerance = reg.max_slowdown if reg.op_max_slowdown is None else reg.op_max_slowdown
        sampled_unit = "median per-step time" if e2e else "median time per call"
        pick = after_warmup if e2e else (lambda samples: list(samples or []))
        base_stats = base.stat_map()
        for s in new.stats:
            b = base_stats.get(s.name)
            if b is None:
                continue
            self.verdict.checks += 1
            new_samples, base_samples = pick(s.samples_ms), pick(b.samples_ms)
            if new_samples and base_samples:
                metric, unit = f"{'step_ms' if e2e else 'call_ms'}:{s.name}", sampled_unit
                c = compare_slower(base_samples, new_samples, reg, floor, tolerance)
            else:  # one value each: the few-samples rule on the averages is all there is
                metric, unit = f"avg_ms:{s.name}", "average time"
                c = compare_slower([b.avg_ms], [s.avg_ms], reg, floor, tolerance)
                statistic = f"no samples: averages compared, {c.statistic}"
                c = Comparison(c.regressed, c.base, c.new, c.limit, statistic)
            if c.regressed:
                ratio = c.new / c.base if c.base > 0 else math.inf
                self.fail(new.id, metric, c.new, c.limit, c.base,
                          f"{s.name} {unit} {c.new:.4g} ms vs baseline {c.base:.4g} ms "
                          f"({_pct(ratio)}, tolerance +{tolerance:.0%}, floor {floor:.3g} ms)",
                          c.statistic)

    def throughput(self, base: RunResult, new: RunResult) -> None:
        if base.examples_per_sec <= 0 or new.examples <= 0:
            return
        self.verdict.checks += 1
        limit = base.examples_per_sec * (1 - self.regression.max_slowdown)
        if new.examples_per_sec >= limit:
            return
        b, n = _per_example_ms(base), _per_example_ms(new)
        if b and n:  # the headline failed; the steps decide whether it is real
            c = compare_slower(b, n, self.regression, 0.0)
            regressed, statistic = c.regressed, f"per-step ms per example: {c.statistic}"
        else:
            regressed, statistic = True, "no per-step samples: examples/sec compared"
        if regressed:
            was, now = base.examples_per_sec, new.examples_per_sec
            self.fail(new.id, "examples_per_sec", now, limit, was,
                      f"{now:.5g} examples/sec vs baseline {was:.5g} ({_pct(now / was)}, "
                      f"tolerance -{self.regression.max_slowdown:.0%})", statistic)

    def python_share(self, base: RunResult, new: RunResult) -> None:
        self.verdict.checks += 1
        increase = self.regression.max_python_share_increase
        b, n = base.steady_python_shares(), new.steady_python_shares()
        if b and n:
            # The steady state decides: the whole-window share also holds the warm-up step
            # (model building, startup), whose noise is larger than a regression of the steps,
            # and one slow step moves it by points where the steps' median does not.
            c = compare_higher(b, n, self.regression, lambda m: m + increase)
            if c.regressed:
                self.fail(new.id, "python_share", c.new, c.limit, c.base,
                          f"Python share of the steps after warm-up {c.new:.2%} vs baseline "
                          f"{c.base:.2%} (tolerance +{increase:.2%} absolute; whole window "
                          f"{new.python_share:.2%} vs {base.python_share:.2%})",
                          f"per-step Python share: {c.statistic}")
            return
        limit = base.python_share + increase
        if new.python_share > limit:
            self.fail(new.id, "python_share", new.python_share, limit, base.python_share,
                      f"Python share {new.python_share:.2%} vs baseline {base.python_share:.2%} "
                      f"(tolerance +{increase:.2%} absolute)",
                      "no per-step samples: whole-window share compared")

    def counts(self, base: RunResult, new: RunResult) -> None:
        if self.regression.counts != "exact" or not base.batches or not new.batches:
            return
        for name in sorted(set(base.counts) | set(new.counts)):
            self.verdict.checks += 1
            was, now = base.counts.get(name, 0), new.counts.get(name, 0)
            if was != now:
                self.fail(new.id, f"count:{name}", now, was, was,
                          f"{name} runs {now} times per step, baseline {was}",
                          "per-step count (exact)")

    def against(self, base: RunResult, new: RunResult) -> None:
        self.stats(base, new)
        if new.kind == "e2e" and base.kind == "e2e":
            self.throughput(base, new)
            self.python_share(base, new)
            self.counts(base, new)


def evaluate(results: ResultSet, thresholds: Thresholds | None = None,
             baseline: ResultSet | None = None, baseline_name: str | None = None) -> Verdict:
    """Check ``results`` against the absolute limits and, when given, a baseline."""
    gate = _Gate(thresholds or Thresholds())
    verdict = gate.verdict
    verdict.baseline = baseline_name
    for run in results.runs:
        gate.limits(run)
    gate.unmatched_limits()
    if baseline is not None:
        other = same_hardware(baseline.machine, results.machine)
        if other:
            verdict.warnings.append(f"baseline {baseline_name or ''} is from other hardware "
                                    f"({other}); relative checks still run".replace("  ", " "))
        unmatched = []
        measured_otherwise: list[str] = []
        base_runs = baseline.by_id()  # one lookup per run: linear in the number of runs
        for run in results.runs:
            base = base_runs.get(run.id)
            if base is None:
                unmatched.append(run.id)
            elif mismatch(base, run):  # other timing or cache state: times are other quantities
                measured_otherwise.append(f"{run.id} ({mismatch(base, run)})")
                gate.counts(base, run)
            else:
                gate.against(base, run)
        if measured_otherwise:
            verdict.warnings.append(f"{len(measured_otherwise)} run(s) measured otherwise than "
                                    "their baseline run, times not compared (counts still are): "
                                    f"{listing(measured_otherwise)}")
        if unmatched:
            verdict.notes.append(f"{len(unmatched)} run(s) have no baseline run: "
                                 f"{listing(unmatched)}")
        _baseline_match(gate, results, baseline, baseline_name, len(results.runs) - len(unmatched),
                        unmatched)
        measured = {r.id for r in results.runs}
        missing = [r.id for r in baseline.runs if r.id not in measured]
        if missing:
            verdict.notes.append(f"{len(missing)} baseline run(s) not measured in this "
                                 f"session: {listing(missing)}")
    return verdict


def _baseline_match(gate: _Gate, results: ResultSet, baseline: ResultSet, name: str | None,
                    matched: int, unmatched: list[str]) -> None:
    """A ``baseline_match`` violation when the baseline compares nothing, or too few of the
    session's runs."""
    total = len(results.runs)
    least = gate.regression.min_baseline_share
    label = f"baseline {name}" if name else "the baseline"
    if total == 0:
        message = f"the session measured no runs: nothing was compared with {label}"
    elif matched == 0 or matched / total < least:
        new_id = unmatched[0]
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
