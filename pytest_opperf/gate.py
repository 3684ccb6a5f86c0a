"""The gate: thresholds file, absolute limits and baseline regressions, to a verdict.

Thresholds (TOML, ARCHITECTURE section 7) hold ``[regression]`` tolerances
and ``[[limit]]`` tables matched to runs and stats by glob. Unknown keys and
wrong types are errors naming the key and the file, so a typo cannot
silently switch a check off. The A/B ``[compare]`` table is parsed (and
applied) by :mod:`pytest_opperf.ab.paired`.

Regression rule (defaults in :class:`Regression`). A stat is slower than its
baseline only when all of these hold:

* its median sample exceeds the baseline median by more than
  ``max_slowdown`` (relative, default 10 %; ``op_max_slowdown`` for per-op
  benchmarks when set),
* and by more than a floor in ms (``min_diff_ms``, default 0.05 ms per step
  for e2e runs, raised to ``min_step_share`` of the baseline's median step
  when that is larger; ``op_min_diff_ms``, default 0.001 ms per call for
  per-op benchmarks), so small stats cannot flap,
* and the samples say the difference is real: a one-sided Mann-Whitney U
  test (new slower than baseline) at ``alpha`` (default 0.01). With fewer
  than ``min_samples`` (default 5) samples on either side the rank test has
  no power, so the rule is instead conservative: twice the tolerance, and
  every new sample slower than every baseline sample; without samples the
  averages are compared under that same rule.

Samples are per-step totals for e2e runs (the first step, which includes
model building and startup, is dropped when there are at least two) and
per-call round times for per-op benchmarks. Throughput fails when
examples/sec is below baseline x (1 - ``max_slowdown``) AND the per-step
time per example passes the same test. The Python share is
compared step by step: it fails when the per-step Python shares after
warm-up (wall minus executor time of each step, over wall) pass the same
test with the absolute tolerance ``max_python_share_increase``; only runs
without per-step samples compare the whole-window share. The whole-window
share also holds the warm-up step (model building, startup), whose noise
is larger than a regression of the steps, and one slow step (a scheduler
hiccup) moves it by points where the steps' median does not. A slowdown
confined to the warm-up step is therefore not gated.
Per-step counts (``counts = "exact"``) must equal the baseline's: a count
change is structural and has no noise. A baseline from other hardware gives
a warning; the relative checks still run.

A baseline that checks (almost) nothing fails: when the session measured no
run, or fewer than ``min_baseline_share`` (default 0.5) of the session's runs
have a run of the same id in the baseline (a wrong file, another workload, run
ids that changed), the verdict gets one ``baseline_match`` violation saying so.
A ``[[limit]]`` whose globs match no run, or no stat of the runs they match,
is reported as a warning.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from fnmatch import fnmatchcase
from typing import Any

from .gpu_report import steady_examples_per_sec
from .identity import mismatch
from .layout import listing
from .ab.paired import CompareSettings, parse_compare
from .results import ResultSet, RunResult, read_text, same_hardware
from .stats import Samples, mann_whitney_u

__all__ = [
    "Comparison",
    "compare_higher",
    "Limit",
    "Regression",
    "Thresholds",
    "ThresholdsError",
    "Verdict",
    "Violation",
    "compare_slower",
    "evaluate",
    "load_thresholds",
    "parse_thresholds",
]


class ThresholdsError(Exception):
    """A thresholds file that cannot be used; the message is one line naming the file."""


@dataclass(frozen=True)
class Regression:
    """``[regression]``: tolerances against the baseline."""

    max_slowdown: float = 0.10
    max_python_share_increase: float = 0.02
    counts: str = "exact"  # "exact" or "ignore"
    alpha: float = 0.01
    min_diff_ms: float = 0.05
    op_min_diff_ms: float = 0.001
    min_samples: int = 5
    # per-op benchmarks' relative tolerance (default: max_slowdown): timed in
    # isolation, they drift between sessions more than the steps of a run
    op_max_slowdown: float | None = None
    # e2e floor relative to the step: a stat must grow by more than this share
    # of the baseline's median step time (and by min_diff_ms)
    min_step_share: float = 0.0
    # below this share of the session's runs found in the baseline, the baseline
    # is the wrong one (or ids changed): the gate fails instead of checking little
    min_baseline_share: float = 0.5


@dataclass(frozen=True)
class Limit:
    """One ``[[limit]]``: absolute limits for the runs (and stats) its globs match."""

    run: str = "*"
    stat: str | None = None
    max_avg_ms: float | None = None
    max_total_ms: float | None = None
    min_examples_per_sec: float | None = None
    max_python_share: float | None = None


@dataclass(frozen=True)
class Thresholds:
    regression: Regression = Regression()
    limits: tuple[Limit, ...] = ()
    source: str | None = None
    compare: CompareSettings = CompareSettings()  # [compare]: the A/B decision (pytest_opperf.ab.paired)


_STAT_LIMITS = ("max_avg_ms", "max_total_ms")
_RUN_LIMITS = ("min_examples_per_sec", "max_python_share")


def _type_name(value: Any) -> str:
    return {bool: "boolean", str: "string", int: "integer", float: "number", list: "array",
            dict: "table"}.get(type(value), type(value).__name__)


def _check(value: Any, want: type, key: str, where: str, source: str) -> Any:
    """``value`` as type ``want`` (an integer is a fine float), else a ThresholdsError."""
    if want is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, want) or isinstance(value, bool):
        expected = {float: "a number", int: "an integer", str: "a string"}[want]
        raise ThresholdsError(f"{source}: {where} {key} must be {expected}, got {value!r} ({_type_name(value)})")
    if want is float and not math.isfinite(value):
        raise ThresholdsError(f"{source}: {where} {key} must be a finite number, got {value!r}")
    return value


def _unknown(keys: Any, known: Sequence[str], where: str, source: str) -> None:
    unknown = sorted(set(keys) - set(known))
    if unknown:
        raise ThresholdsError(
            f"{source}: unknown key {unknown[0]!r} in {where} (known keys: {', '.join(known)})")


def _parse_regression(table: Any, source: str) -> Regression:
    if not isinstance(table, dict):
        raise ThresholdsError(f"{source}: [regression] must be a table, got {_type_name(table)}")
    types = {f.name: (int if f.name == "min_samples" else str if f.name == "counts" else float)
             for f in fields(Regression)}
    _unknown(table, list(types), "[regression]", source)
    values = {k: _check(v, types[k], k, "[regression]", source) for k, v in table.items()}
    ranges = {
        "max_slowdown": (0.0, math.inf), "max_python_share_increase": (0.0, 1.0), "alpha": (0.0, 1.0),
        "min_diff_ms": (0.0, math.inf), "op_min_diff_ms": (0.0, math.inf), "min_samples": (2, math.inf),
        "op_max_slowdown": (0.0, math.inf), "min_step_share": (0.0, 1.0), "min_baseline_share": (0.0, 1.0),
    }
    for key, (lo, hi) in ranges.items():
        if key in values and not lo <= values[key] <= hi:
            raise ThresholdsError(f"{source}: [regression] {key} must be in [{lo}, {hi}], got {values[key]!r}")
    if values.get("alpha") == 0.0:
        raise ThresholdsError(f"{source}: [regression] alpha must be above 0, got 0.0")
    if "counts" in values and values["counts"] not in ("exact", "ignore"):
        raise ThresholdsError(f"{source}: [regression] counts must be 'exact' or 'ignore', got {values['counts']!r}")
    return Regression(**values)


def _parse_limit(table: Any, index: int, source: str) -> Limit:
    where = f"[[limit]] #{index}"
    if not isinstance(table, dict):
        raise ThresholdsError(f"{source}: {where} must be a table, got {_type_name(table)}")
    known = [f.name for f in fields(Limit)]
    _unknown(table, known, where, source)
    values = {k: _check(v, str if k in ("run", "stat") else float, k, where, source) for k, v in table.items()}
    if not any(k in values for k in _STAT_LIMITS + _RUN_LIMITS):
        raise ThresholdsError(f"{source}: {where} sets no limit (give one of {', '.join(_STAT_LIMITS + _RUN_LIMITS)})")
    if "stat" in values:
        run_level = [k for k in _RUN_LIMITS if k in values]
        if run_level:
            raise ThresholdsError(
                f"{source}: {where} {run_level[0]} limits a run, but the table also names stat = "
                f"{values['stat']!r}; put it in a [[limit]] without stat")
    for key in _STAT_LIMITS + _RUN_LIMITS:
        if key in values and values[key] < 0:
            raise ThresholdsError(f"{source}: {where} {key} must not be negative, got {values[key]!r}")
    if values.get("max_python_share", 0.0) > 1:
        raise ThresholdsError(f"{source}: {where} max_python_share is a share of wall time and must be in "
                              f"[0, 1], got {values['max_python_share']!r}")
    return Limit(**values)


def parse_thresholds(data: Mapping[str, Any], source: str = "<thresholds>") -> Thresholds:
    """Thresholds from a parsed TOML document (raises :class:`ThresholdsError`)."""
    _unknown(data, ["regression", "limit", "compare"], "the top level", source)
    regression = _parse_regression(data["regression"], source) if "regression" in data else Regression()
    limits = data.get("limit", [])
    if not isinstance(limits, list):
        raise ThresholdsError(f"{source}: limit must be an array of tables ([[limit]]), got {_type_name(limits)}")
    compare = parse_compare(data["compare"], source) if "compare" in data else CompareSettings()
    return Thresholds(regression, tuple(_parse_limit(t, i + 1, source) for i, t in enumerate(limits)), source,
                      compare)


def load_thresholds(path: str | os.PathLike[str]) -> Thresholds:
    """Read a thresholds file; any problem is one line naming the file."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]

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
    value: float
    limit: float
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
        violations = []
        for v in data.get("violations", []):
            if isinstance(v, dict):
                violations.append(Violation(
                    run=str(v.get("run", "")), metric=str(v.get("metric", "")), value=v.get("value"),
                    limit=v.get("limit"), baseline=v.get("baseline"), message=str(v.get("message", "")),
                    statistic=str(v.get("statistic", ""))))
        incomplete = data.get("incomplete")
        if incomplete is None and data.get("passed") is False and not violations:
            incomplete = "the stored verdict did not pass"  # never show PASSED for a file that says otherwise
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
    limit: float  # the bound the new median was held to: limit(base median), widened to twice the
    # tolerance with few samples (e.g. base x (1 + max_slowdown), or base + increase for the Python share)
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
        statistic = (f"few samples (n={n.n} vs {b.n} < {regression.min_samples}): twice the tolerance, "
                     f"{'every' if separated else 'not every'} new sample above every baseline sample, "
                     f"{medians}")
    return Comparison(regressed, b.median, n.median, bound, statistic)


def compare_slower(base: Sequence[float], new: Sequence[float], regression: Regression,
                   floor: float, tolerance: float | None = None) -> Comparison:
    """The regression rule on two non-empty sample series (larger = slower);
    ``tolerance`` defaults to ``max_slowdown``."""
    slowdown = regression.max_slowdown if tolerance is None else tolerance
    return compare_higher(base, new, regression, lambda m: m * (1 + slowdown), floor)


def _after_warmup(samples: Sequence[float] | None) -> list[float]:
    if not samples:
        return []
    return list(samples[1:]) if len(samples) >= 2 else list(samples)


def _per_example_ms(run: RunResult) -> list[float]:
    """Per-step wall ms per example, after warm-up."""
    pairs = list(zip(run.step_ms, run.step_examples, strict=False))
    pairs = pairs[1:] if len(pairs) >= 2 else pairs
    return [ms / n for ms, n in pairs if n > 0]


def _step_python_shares(run: RunResult) -> list[float]:
    """Each step's share of wall time outside the executor, after warm-up (empty if unknown)."""
    if run.executor_stat is not None:
        s = run.stat(run.executor_stat)
        executor = s.samples_ms if s is not None else None
    else:  # executor time is the sum of the top-level stats, step by step
        tops = [s.samples_ms for s in run.stats if s.parent is None]
        executor = [sum(x) for x in zip(*tops, strict=False)] if tops and all(tops) else None
    if not executor or len(executor) != len(run.step_ms):
        return []
    shares = [(w - e) / w for w, e in zip(run.step_ms, executor, strict=True) if w > 0]
    return _after_warmup(shares) if len(shares) == len(run.step_ms) else []


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
        """A warning for every [[limit]] whose globs matched nothing: a typo must not switch it off silently."""
        for index, lim in enumerate(self.thresholds.limits):
            where = f"[[limit]] #{index + 1} (run = {lim.run!r}{f', stat = {lim.stat!r}' if lim.stat else ''})"
            if index not in self.limit_runs:
                self.verdict.warnings.append(f"{where} matches no run of this session: it checked nothing")
            elif (lim.max_avg_ms is not None or lim.max_total_ms is not None) and index not in self.limit_stats:
                self.verdict.warnings.append(f"{where} matches no stat of the runs it matches: its stat limits "
                                             "checked nothing")

    def fail(self, run: str, metric: str, value: float, limit: float, baseline: float | None,
             message: str, statistic: str) -> None:
        self.verdict.violations.append(Violation(run, metric, value, limit, baseline, message, statistic))

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
                    what = "examples/sec" if steady is None else "examples/sec in the steps after warm-up"
                    self.fail(run.id, "examples_per_sec", eps, lim.min_examples_per_sec, None,
                              f"{eps:.5g} {what} is below the limit {lim.min_examples_per_sec:g}",
                              "absolute limit" if steady is None else "absolute limit on the steady state")
            if lim.max_python_share is not None:
                self.verdict.checks += 1
                if run.python_share > lim.max_python_share:
                    self.fail(run.id, "python_share", run.python_share, lim.max_python_share, None,
                              f"Python share {run.python_share:.2%} is above the limit {lim.max_python_share:.2%}",
                              "absolute limit")
            if lim.max_avg_ms is None and lim.max_total_ms is None:
                continue
            for s in run.stats:
                if not fnmatchcase(s.name, lim.stat or "*"):
                    continue
                self.limit_stats.add(index)
                checks = (("avg_ms", s.avg_ms, lim.max_avg_ms), ("total_ms", s.total_ms, lim.max_total_ms))
                for key, value, bound in checks:
                    if bound is None:
                        continue
                    self.verdict.checks += 1
                    if value > bound:
                        self.fail(run.id, f"{key}:{s.name}", value, bound, None,
                                  f"{s.name} {key.replace('_ms', '')} {value:.4g} ms is above the limit {bound:g} ms",
                                  "absolute limit")

    # regressions

    def stats(self, base: RunResult, new: RunResult) -> None:
        e2e = new.kind == "e2e"
        reg = self.regression
        if e2e:
            steps = _after_warmup(base.step_ms)
            floor = max(reg.min_diff_ms, reg.min_step_share * Samples(steps).median if steps else 0.0)
            tolerance = reg.max_slowdown
        else:
            floor = reg.op_min_diff_ms
            tolerance = reg.max_slowdown if reg.op_max_slowdown is None else reg.op_max_slowdown
        sampled_unit = "median per-step time" if e2e else "median time per call"
        pick = _after_warmup if e2e else (lambda samples: list(samples or []))
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
                c = Comparison(c.regressed, c.base, c.new, c.limit, f"no samples: averages compared, {c.statistic}")
            if c.regressed:
                ratio = c.new / c.base if c.base > 0 else math.inf
                self.fail(new.id, metric, c.new, c.limit, c.base,
                          f"{s.name} {unit} {c.new:.4g} ms vs baseline {c.base:.4g} ms "
                          f"({_pct(ratio)}, tolerance +{tolerance:.0%}, floor {floor:.3g} ms)", c.statistic)

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
            self.fail(new.id, "examples_per_sec", new.examples_per_sec, limit, base.examples_per_sec,
                      f"{new.examples_per_sec:.5g} examples/sec vs baseline {base.examples_per_sec:.5g} "
                      f"({_pct(new.examples_per_sec / base.examples_per_sec)}, tolerance "
                      f"-{self.regression.max_slowdown:.0%})", statistic)

    def python_share(self, base: RunResult, new: RunResult) -> None:
        self.verdict.checks += 1
        increase = self.regression.max_python_share_increase
        b, n = _step_python_shares(base), _step_python_shares(new)
        if b and n:
            # The steady state decides: the whole-window share also holds the
            # warm-up step (model building, startup), whose noise is larger
            # than a regression of the steps, and one slow step moves it by
            # points where the steps' median does not.
            c = compare_higher(b, n, self.regression, lambda m: m + increase)
            if c.regressed:
                self.fail(new.id, "python_share", c.new, c.limit, c.base,
                          f"Python share of the steps after warm-up {c.new:.2%} vs baseline {c.base:.2%} "
                          f"(tolerance +{increase:.2%} absolute; whole window {new.python_share:.2%} vs "
                          f"{base.python_share:.2%})", f"per-step Python share: {c.statistic}")
            return
        limit = base.python_share + increase
        if new.python_share > limit:
            self.fail(new.id, "python_share", new.python_share, limit, base.python_share,
                      f"Python share {new.python_share:.2%} vs baseline {base.python_share:.2%} "
                      f"(tolerance +{increase:.2%} absolute)", "no per-step samples: whole-window share compared")

    def counts(self, base: RunResult, new: RunResult) -> None:
        if self.regression.counts != "exact" or not base.batches or not new.batches:
            return
        for name in sorted(set(base.counts) | set(new.counts)):
            self.verdict.checks += 1
            was, now = base.counts.get(name, 0), new.counts.get(name, 0)
            if was != now:
                self.fail(new.id, f"count:{name}", now, was, was,
                          f"{name} runs {now} times per step, baseline {was}", "per-step count (exact)")

    def against(self, base: RunResult, new: RunResult) -> None:
        self.stats(base, new)
        if new.kind == "e2e" and base.kind == "e2e":
            self.throughput(base, new)
            self.python_share(base, new)
            self.counts(base, new)


def evaluate(results: ResultSet, thresholds: Thresholds | None = None, baseline: ResultSet | None = None,
             baseline_name: str | None = None) -> Verdict:
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
            verdict.warnings.append(f"baseline {baseline_name or ''} is from other hardware ({other}); "
                                    "relative checks still run".replace("  ", " "))
        unmatched = []
        measured_otherwise: list[str] = []
        for run in results.runs:
            base = baseline.run(run.id)
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
        _baseline_match(gate, results, baseline, baseline_name, len(results.runs) - len(unmatched))
        measured = {r.id for r in results.runs}
        missing = [r.id for r in baseline.runs if r.id not in measured]
        if missing:
            verdict.notes.append(f"{len(missing)} baseline run(s) not measured in this "
                                 f"session: {listing(missing)}")
    return verdict


def _baseline_match(gate: _Gate, results: ResultSet, baseline: ResultSet, name: str | None, matched: int) -> None:
    """A ``baseline_match`` violation when the baseline compares nothing, or too few of the session's runs."""
    total = len(results.runs)
    least = gate.regression.min_baseline_share
    label = f"baseline {name}" if name else "the baseline"
    if total == 0:
        message = f"the session measured no runs: nothing was compared with {label}"
    elif matched == 0 or matched / total < least:
        new_id = next(r.id for r in results.runs if baseline.run(r.id) is None)
        base_id = f"{baseline.runs[0].id!r}" if baseline.runs else "none (it has no runs)"
        message = (f"{label} has a run for only {matched} of the session's {total} run(s) (at least "
                   f"{least:.0%} expected): a wrong baseline, another workload or suite, or run ids that changed "
                   f"(e.g. {new_id!r} is not in it; its ids look like {base_id})")
    else:
        return
    gate.verdict.checks += 1
    gate.fail("(session)", "baseline_match", matched / total if total else 0.0, least, None, message,
              "runs found in the baseline")
