"""Paired A/B statistics: one decision per metric from interleaved base/head samples.

Sample i of the base and sample i of the head form pair i (measured back to back, so a drift of the
machine's speed cancels in the pair). Each pair gives one number ``x``, positive when worse for the
head: ``log(head/base)`` for times, ``log(base/head)`` for rates, ``head - base`` for the Python
share; counts are compared exactly. Per metric: the Hodges-Lehmann estimate with the exact Wilcoxon
signed-rank interval (:mod:`.signedrank`), Bonferroni-corrected over the metrics of one
:func:`decide` (weighted: an e2e run's headline metrics share half of ``alpha``,
:class:`.family.Family`), and the rule: regressed when ``lo > c/2`` and ``hi >= c`` (``c`` the
smallest change that counts), improved the mirror, unchanged when the one-sided ``1 - beta`` bound
on the regression's side is below ``c`` (each metric's own, not corrected: a pass needs every
metric unchanged), else undecided. The rule, its reasons, the floors and the simulations behind
them: docs/ab-statistics.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..comparison.metrics import CALL, METRIC_KINDS, STEP, Kind, MetricKey
from ..comparison.thresholds import CompareSettings
from ..core.stats import most_common
from ..explain.diff import Explanation
from ..records.checks import is_num, shown
from ..workcounts.workcount import COUNTERS
from .cost import Cost
from .extras import need as _need
from .extras import read_explain, read_extras
from .family import Family
from .signedrank import EXACT_MAX_PAIRS, walsh_intervals

__all__ = ["ABVerdict", "CompareResult", "Decision", "Paired", "decide", "from_x", "pair_x",
           "rule", "to_x"]

ABVerdict = Literal["regressed", "improved", "unchanged", "undecided"]
# the report's order
VERDICTS: tuple[str, ...] = ("regressed", "undecided", "improved", "unchanged")


# --- x: one pair's change ------------------------------------------------------------

# x = sign * log(head/base) for the ratios (a rate's drop is worse: -1), head - base otherwise
_LOG_SIGN: dict[str, float] = {"time": 1.0, "rate": -1.0}


def to_x(kind: str, value: float) -> float:
    """``value`` in ``x`` units: a ratio head/base (time, rate; <= 0 has no log: -inf at 0, nan
    below) as its signed log, a difference head - base (share, count) as it is."""
    sign = _LOG_SIGN.get(kind)
    if sign is None:
        return value
    return sign * (math.log(value) if value > 0 else -math.inf if value == 0 else math.nan)


def from_x(kind: str, x: float) -> float:
    """The inverse of :func:`to_x`: ``x`` as a ratio head/base or a difference."""
    sign = _LOG_SIGN.get(kind)
    return x if sign is None else math.exp(sign * x)


def _flips(kind: str) -> bool:
    """Whether :func:`to_x` turns an interval's ends round (a rate's: a drop is worse)."""
    return _LOG_SIGN.get(kind, 1.0) < 0


# --- samples -------------------------------------------------------------------------


@dataclass
class Paired:
    """The paired samples of one metric: sample i of ``base`` and of ``head`` form pair i.
    ``step_ms``: for an e2e stat (``step_ms:``), the base's median step wall time of its run,
    the reference of ``min_step_share`` (0: not known)."""

    key: MetricKey
    kind: Kind
    base: list[float] = field(default_factory=list)
    head: list[float] = field(default_factory=list)
    step_ms: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in METRIC_KINDS:
            raise ValueError(f"{self.key.run} {self.key.metric}: kind must be one of "
                             f"{', '.join(METRIC_KINDS)}, got {self.kind!r}")
        if len(self.base) != len(self.head):
            raise ValueError(f"{self.key.run} {self.key.metric}: base and head must pair up, got "
                             f"{len(self.base)} base and {len(self.head)} head samples")

    def add(self, base: float, head: float) -> None:
        self.base.append(float(base))
        self.head.append(float(head))

    @property
    def pairs(self) -> int:
        return len(self.base)


# --- decisions -------------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    """The verdict on one metric. ``base``/``head`` are the medians of the samples (for counts the
    most common per-step value); ``estimate`` is the ratio head/base (time, rate) or the difference
    head - base (share, count) and ``low``/``high`` its corrected interval (unbounded: 0/inf for
    ratios, -inf/inf for differences). ``limit`` is the estimate at which a change counts (1.05: a
    5 % slowdown; 0.95 for a rate; +0.01 for the share; 0 for counts), nan when not known.
    ``inconclusive``: an undecided metric whose pairs point to a regression they could not show
    (set by the session's final decisions, :func:`pytest_opperf.ab.decide.final_decisions`).
    ``beta_low``/``beta_high``: the interval at level ``1 - 2 beta``, not corrected, each end a
    one-sided ``1 - beta`` bound: "unchanged" is ruled on the end on the regression's side
    (:func:`rule`); nan where not known (counts, files of older writers: the corrected interval
    stands in, :meth:`beta_x`)."""

    key: MetricKey
    kind: Kind
    verdict: ABVerdict
    base: float
    head: float
    estimate: float
    low: float
    high: float
    pairs: int
    statistic: str
    limit: float = math.nan
    inconclusive: bool = False
    beta_low: float = math.nan
    beta_high: float = math.nan

    @property
    def ratio(self) -> bool:
        """Whether ``estimate`` is a ratio (time, rate) rather than a difference."""
        return self.kind in ("time", "rate")

    @property
    def half_width(self) -> float:
        """Half the interval's width: in log units as a relative change (0.012 = +-1.2 %) for
        ratios, absolute for differences; inf when unbounded."""
        finite = math.isfinite(self.low) and math.isfinite(self.high)
        if not finite or (self.ratio and self.low <= 0):
            return math.inf
        if self.ratio:
            return math.expm1((math.log(self.high) - math.log(self.low)) / 2)
        return (self.high - self.low) / 2

    @property
    def past_threshold(self) -> bool:
        """Whether the estimate lies past the threshold on the regression's side (counts and
        metrics without an estimate never do)."""
        if self.kind == "count":
            return False
        estimate, _, _, c = self.in_x()
        return math.isfinite(estimate) and math.isfinite(c) and estimate > c

    def in_x(self) -> tuple[float, float, float, float]:
        """The estimate, the interval's low and high ends and ``c`` (the limit) in ``x`` units
        (:func:`to_x`; positive: worse for the head)."""
        low, high = (self.high, self.low) if _flips(self.kind) else (self.low, self.high)
        return (to_x(self.kind, self.estimate), to_x(self.kind, low), to_x(self.kind, high),
                to_x(self.kind, self.limit))

    def beta_x(self) -> tuple[float, float]:
        """The ends of the ``1 - 2 beta`` interval in ``x`` units, low and high (:meth:`in_x`): the
        high one is the bound "unchanged" is ruled on. The corrected interval's where that one is
        not known (a count's, or a file of an older writer: what its verdict was ruled on)."""
        if math.isnan(self.beta_low) or math.isnan(self.beta_high):
            return self.in_x()[1:3]
        low, high = ((self.beta_high, self.beta_low) if _flips(self.kind)
                     else (self.beta_low, self.beta_high))
        return to_x(self.kind, low), to_x(self.kind, high)

    @property
    def bound(self) -> float:
        """The one-sided ``1 - beta`` bound on the regression's side, in the estimate's units
        (for a rate its low end; nan where not known)."""
        return self.beta_low if _flips(self.kind) else self.beta_high

    def to_dict(self) -> dict[str, Any]:
        def num(v: float) -> float | None:
            return v if math.isfinite(v) else None
        return {"run": self.key.run, "metric": self.key.metric, "kind": self.kind,
                "verdict": self.verdict, "base": num(self.base), "head": num(self.head),
                "estimate": num(self.estimate), "low": num(self.low), "high": num(self.high),
                "limit": num(self.limit), "pairs": self.pairs, "statistic": self.statistic,
                "inconclusive": self.inconclusive,
                **{k: num(v) for k, v in (("beta_low", self.beta_low),
                                          ("beta_high", self.beta_high)) if not math.isnan(v)}}


def _step_floor(p: Paired, ms: CompareSettings) -> float:
    """An e2e stat's floor in ms from its step (``min_step_share``); 0 for other metrics."""
    return ms.min_step_share * p.step_ms if p.key.prefix == STEP else 0.0


def _threshold(p: Paired, ms: CompareSettings, base: float) -> float:
    """``c``: the smallest change that counts, in ``x`` units (the module docstring)."""
    if p.kind == "time":
        floors = {CALL: ms.min_call_ms, STEP: max(ms.min_step_ms, _step_floor(p, ms))}
        return max(math.log1p(ms.min_slowdown), math.log1p(floors.get(p.key.prefix, 0.0) / base))
    if p.kind == "rate":
        return -math.log1p(-ms.min_slowdown)
    return ms.max_python_share_increase


def rule(low: float, high: float, c: float, bound: float | None = None) -> ABVerdict:
    """The decision rule on the corrected interval ``[low, high]`` of ``x`` with the threshold
    ``c``: regressed, improved, or unchanged when ``bound`` (the one-sided ``1 - beta`` bound on
    the regression's side, not corrected; default ``high``) is below ``c``."""
    if low > c / 2 and high >= c:
        return "regressed"
    if high < -c / 2 and low <= -c:
        return "improved"
    if (high if bound is None else bound) < c:
        return "unchanged"
    return "undecided"


def _level(a: float) -> str:
    pct = 100 * (1 - a)
    digits = max(2, 1 - math.floor(math.log10(100 * a))) if a > 0 else 2
    return f"{pct:.{digits}f}".rstrip("0").rstrip(".") + "%"


def _count_decision(p: Paired) -> Decision:
    if not p.pairs:
        return Decision(p.key, p.kind, "undecided", math.nan, math.nan, math.nan, -math.inf,
                        math.inf, 0, "per-step count (exact): no pairs", 0.0)
    (base, base_same), (head, head_same) = (most_common([round(v) for v in side])
                                            for side in (p.base, p.head))
    diff = float(head - base)
    work = p.key.prefix in COUNTERS  # a work count: less work is an improvement
    statistic = "work count per step (exact)" if work else "per-step count (exact)"
    statistic += "" if base_same and head_same else ", most common per-step value"
    verdict: ABVerdict = ("unchanged" if not diff else "improved" if work and diff < 0
                        else "regressed")
    return Decision(p.key, p.kind, verdict, float(base), float(head), diff, diff, diff, p.pairs,
                    statistic, 0.0)


def _worse(kinds: Sequence[str], base: Any, head: Any) -> Any:
    """Each pair as ``x`` (rows of metrics, columns of pairs), positive when the head is worse:
    :func:`to_x` of each pair's head/base, on whole arrays."""
    import numpy as np

    with np.errstate(all="ignore"):  # unusable rows are set aside by the caller
        logs = np.log(head) - np.log(base)
        diff = head - base
    sign = np.array([[_LOG_SIGN.get(k, 1.0)] for k in kinds])
    ratio = np.array([[k in _LOG_SIGN] for k in kinds])
    return np.where(ratio, logs * sign, diff)


def pair_x(p: Paired) -> list[float]:
    """Each pair of ``p`` in ``x`` units (:func:`_worse`; nan or inf where a ratio has no log)."""
    import numpy as np

    x = _worse([p.kind], np.array([p.base], dtype=np.float64), np.array([p.head], dtype=np.float64))
    return [float(v) for v in x[0]]


def _unusable(kinds: Sequence[str], base: Any, head: Any) -> list[str | None]:
    """Per row, why it gives no interval (None: it does)."""
    import numpy as np

    finite = (np.isfinite(base).all(axis=1) & np.isfinite(head).all(axis=1)).tolist()
    positive = ((base > 0).all(axis=1) & (head > 0).all(axis=1)).tolist()
    return [None if ok and (pos or k == "share") else
            "non-finite samples" if not ok else "samples at or below 0: no ratio"
            for k, ok, pos in zip(kinds, finite, positive, strict=True)]


def decide(samples: Sequence[Paired], settings: CompareSettings,
           family: Family | None = None) -> list[Decision]:
    """One :class:`Decision` per :class:`Paired`, in order; Bonferroni-corrected (weighted,
    :class:`.family.Family`) for ``family``, by default the metrics with statistics among
    ``samples`` (all but counts); a look at some of a session's metrics passes the session's.
    Pure and deterministic."""
    import numpy as np

    family = Family.of((p.key, p.kind) for p in samples) if family is None else family
    correction = family.describe()
    decisions: list[Decision | None] = [None] * len(samples)
    groups: dict[tuple[int, float], list[int]] = {}
    for i, p in enumerate(samples):
        if p.kind == "count":
            decisions[i] = _count_decision(p)
        elif not p.pairs:
            lo = 0.0 if p.kind in ("time", "rate") else -math.inf
            decisions[i] = Decision(p.key, p.kind, "undecided", math.nan, math.nan, math.nan, lo,
                                    math.inf, 0, "no interval: no pairs")
        else:
            groups.setdefault((p.pairs, family.level(settings.alpha, p.key)), []).append(i)
    for (n, a), members in groups.items():
        base = np.array([samples[i].base for i in members], dtype=np.float64)
        head = np.array([samples[i].head for i in members], dtype=np.float64)
        base_median = np.median(base, axis=1).tolist()
        head_median = np.median(head, axis=1).tolist()
        usable = []
        problems = _unusable([samples[i].kind for i in members], base, head)
        for row, (i, problem) in enumerate(zip(members, problems, strict=True)):
            p = samples[i]
            if problem is None:
                usable.append(row)
                continue
            lo = 0.0 if p.kind in ("time", "rate") else -math.inf
            decisions[i] = Decision(p.key, p.kind, "undecided", base_median[row], head_median[row],
                                    math.nan, lo, math.inf, n, f"no interval: {problem}")
        if not usable:
            continue
        x = _worse([samples[members[r]].kind for r in usable], base[usable], head[usable])
        method = "exact" if n <= EXACT_MAX_PAIRS else "normal approximation"
        test = (f"Wilcoxon signed-rank {_level(a)} CI ({correction}; {method}); unchanged on "
                f"the one-sided {_level(settings.beta)} bound, not corrected")
        rows = walsh_intervals(x, [a, 2 * settings.beta])
        for row, (centre, [(lo, hi), (blo, bhi)]) in zip(usable, rows, strict=True):
            p = samples[members[row]]
            ms = settings.for_metric(p.key)
            b, h = base_median[row], head_median[row]
            verdict = rule(lo, hi, c := _threshold(p, ms, b), bhi)
            what = "ratio" if p.kind in ("time", "rate") else "difference"
            statistic = f"Hodges-Lehmann {what}, {test}"
            if _step_floor(p, ms) > max(ms.min_step_ms, ms.min_slowdown * b):
                statistic += (f"; counts from {100 * ms.min_step_share:.3g} % of the "
                              f"{p.step_ms:.4g} ms step")
            if n < ms.min_pairs:
                verdict = "undecided"
                statistic += f"; too few pairs ({n} < min_pairs {ms.min_pairs})"
            elif verdict == "undecided" and (math.isinf(hi) or math.isinf(lo)):
                statistic += f"; too few pairs for a {_level(a)} interval"
            estimate, low, high, limit, beta_low, beta_high = (
                from_x(p.kind, v) for v in (centre, lo, hi, c, blo, bhi))
            if _flips(p.kind):
                low, high, beta_low, beta_high = high, low, beta_high, beta_low
            decisions[members[row]] = Decision(p.key, p.kind, verdict, b, h, estimate, low, high, n,
                                               statistic, limit, beta_low=beta_low,
                                               beta_high=beta_high)
    return [d for d in decisions if d is not None]


# --- the session's result ------------------------------------------------------------------


def _decision_from_dict(d: Any, where: str, source: str) -> Decision:
    _need(isinstance(d, dict), source, f"{where} is not an object")
    for key in ("run", "metric", "statistic"):
        _need(isinstance(d.get(key), str), source, f"{where}.{key} is missing or not a string")
    _need(d.get("kind") in METRIC_KINDS, source,
          f"{where}.kind must be one of {', '.join(METRIC_KINDS)}, got {d.get('kind')!r}")
    _need(d.get("verdict") in VERDICTS, source,
          f"{where}.verdict must be one of {', '.join(VERDICTS)}, got {d.get('verdict')!r}")
    _need(isinstance(d.get("pairs"), int) and not isinstance(d["pairs"], bool) and d["pairs"] >= 0,
          source, f"{where}.pairs is missing or not a non-negative integer")
    inconclusive = d.get("inconclusive", False)  # absent in files of older writers
    _need(isinstance(inconclusive, bool), source, f"{where}.inconclusive is not a boolean")
    _need(not inconclusive or d.get("verdict") == "undecided", source,
          f"{where}.inconclusive is true for a {d.get('verdict')} metric (only an undecided one "
          "can be)")
    unbounded = {"low": -math.inf, "high": math.inf, "beta_low": -math.inf,
                 "beta_high": math.inf}
    values = {}
    for key in ("base", "head", "estimate", "low", "high", "limit", "beta_low", "beta_high"):
        if key.startswith("beta_") and key not in d:  # a file of an older writer: not known
            values[key] = math.nan
            continue
        v = d.get(key)
        _need(v is None or is_num(v), source, f"{where}.{key} is not a number or null")
        values[key] = float(v) if v is not None else unbounded.get(key, math.nan)
    for low, high in (("low", "high"), ("beta_low", "beta_high")):
        if values[low] > values[high]:  # an impossible interval: no gate may read it
            _need(False, source, f"{where}.{low} must not be above {where}.{high}, got "
                                 f"{shown(d[low])} > {shown(d[high])}")
    return Decision(MetricKey(d["run"], d["metric"]), d["kind"], d["verdict"], values["base"],
                    values["head"], values["estimate"], values["low"], values["high"], d["pairs"],
                    d["statistic"], values["limit"], inconclusive, values["beta_low"],
                    values["beta_high"])


@dataclass
class CompareResult:
    """An A/B session's outcome, for the report, the results JSON and the gate."""

    base: str  # how the base was given ("REV abc1234 (origin/main)", "DIR /path")
    head: str
    decisions: list[Decision]
    added: list[str] = field(default_factory=list)  # run ids on the head side only
    removed: list[str] = field(default_factory=list)  # run ids on the base side only
    pairs: int = 0  # pairs measured in all
    elapsed_s: float = 0.0
    budget_exhausted: bool = False
    notes: list[str] = field(default_factory=list)
    # {"base": {...}, "head": {...}}: each side's interpreter (executable, python, numpy)
    interpreters: dict[str, dict[str, Any]] | None = None
    # per generation of side processes: generation, first, pairs, metrics, geometric_mean
    # (:func:`pytest_opperf.ab.generations.generation_bias`)
    generations: list[dict[str, Any]] = field(default_factory=list)
    # per test with a decided metric: its metrics, pairs, visits, seconds (:mod:`.cost`)
    cost: list[Cost] = field(default_factory=list)
    # why each regressed or inconclusive metric got slower (:mod:`pytest_opperf.explain`)
    explain: dict[MetricKey, Explanation] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        """How many metrics got each verdict, in the report's order."""
        return {v: sum(1 for d in self.decisions if d.verdict == v) for v in VERDICTS}

    def geometric_mean(self) -> float | None:
        """The geometric mean of head/base over the time metrics (per-op calls, e2e stats)."""
        logs = [math.log(d.estimate) for d in self.decisions
                if d.kind == "time" and math.isfinite(d.estimate) and d.estimate > 0]
        return math.exp(math.fsum(logs) / len(logs)) if logs else None

    def summary(self) -> str:
        """``1 regressed, 9 unchanged, 3 undecided, 1 improved; geometric mean head/base 1.004``."""
        c = self.counts()
        text = ", ".join(f"{c[v]} {v}" for v in ("regressed", "unchanged", "undecided", "improved"))
        mean = self.geometric_mean()
        return text + (f"; geometric mean head/base {mean:.3f}" if mean is not None else "")

    def to_dict(self) -> dict[str, Any]:
        """The results JSON's ``compare`` object (fields in docs/reference/results.md)."""
        return {"base": self.base, "head": self.head, "summary": self.summary(),
                "verdicts": self.counts(), "geometric_mean": self.geometric_mean(),
                "pairs": self.pairs, "elapsed_s": self.elapsed_s,
                "budget_exhausted": self.budget_exhausted, "added": list(self.added),
                "removed": list(self.removed), "notes": list(self.notes),
                "interpreters": self.interpreters, "generations": list(self.generations),
                "cost": [c.to_dict() for c in self.cost],
                "decisions": [{**d.to_dict(), **({"explain": self.explain[d.key].to_dict()}
                                                 if d.key in self.explain else {})}
                              for d in self.decisions]}

    @classmethod
    def from_dict(cls, data: Any, source: str = "<data>") -> CompareResult:
        """A ``compare`` object read back (raises :class:`pytest_opperf.results.ResultsError`)."""
        _need(isinstance(data, dict), source, "compare is not an object")
        for key in ("base", "head"):
            _need(isinstance(data.get(key), str), source,
                  f"compare.{key} is missing or not a string")
        for key in ("added", "removed", "notes"):
            _need(isinstance(data.get(key), list) and all(isinstance(x, str) for x in data[key]),
                  source, f"compare.{key} is missing or not a list of strings")
        _need(isinstance(data.get("pairs"), int) and not isinstance(data["pairs"], bool), source,
              "compare.pairs is missing or not an integer")
        _need(is_num(data.get("elapsed_s")), source,
              "compare.elapsed_s is missing or not a number")
        _need(isinstance(data.get("budget_exhausted"), bool), source,
              "compare.budget_exhausted is missing or not a boolean")
        _need(isinstance(data.get("decisions"), list), source,
              "compare.decisions is missing or not a list")
        decisions = [_decision_from_dict(d, f"compare.decisions[{i}]", source)
                     for i, d in enumerate(data["decisions"])]
        # the fields later writers added: absent in files of older writers
        interpreters, generations, cost = read_extras(data, source)
        return cls(data["base"], data["head"], decisions, list(data["added"]),
                   list(data["removed"]), data["pairs"], float(data["elapsed_s"]),
                   data["budget_exhausted"], list(data["notes"]), interpreters, generations, cost,
                   read_explain(data, source))
