"""What a gate decides: violations, the drift table and the verdict (a leaf: no imports of the
package, so the gate, the A/B statistics and the renderers can all use it)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["Drift", "DriftRow", "Verdict", "Violation"]


@dataclass
class Violation:
    """One failed check: an item of the results file's ``gate.violations``, with the statistic
    that decided it."""

    run: str
    metric: str
    value: float | None  # None only in a verdict read back from a file (show)
    limit: float | None
    baseline: float | None
    message: str
    statistic: str
    # why the metric got slower (pytest_opperf.explain.diff.Explanation.to_dict()), when known
    explain: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if self.explain is None:
            del d["explain"]
        return d


def _num(value: Any) -> float | None:
    """A finite number as a float, else None (a stored file is read leniently, for display)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer beyond a double
        return None
    return number if math.isfinite(number) else None


@dataclass(frozen=True)
class DriftRow:
    """One time metric against a stored baseline. ``slowdown`` is how many times longer the work
    took here (``value / baseline`` for times, ``baseline / value`` for examples/sec; for the
    Python share, ``value - baseline`` in points is ``difference`` and ``slowdown`` is None);
    ``relative`` is the slowdown over the machine factor; ``beyond`` says whether the regression
    rule (tolerance, floors, rank test) finds it slower, that is, whether it would fail the gate
    with ``[regression] time = "gate"``."""

    run: str
    metric: str
    kind: str
    value: float
    baseline: float
    slowdown: float | None
    relative: float | None
    difference: float | None
    beyond: bool
    statistic: str

    def to_dict(self) -> dict[str, Any]:
        return {k: (_num(v) if isinstance(v, float) else v) for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DriftRow:
        return cls(str(d.get("run", "")), str(d.get("metric", "")), str(d.get("kind", "")),
                   _num(d.get("value")) or 0.0, _num(d.get("baseline")) or 0.0,
                   _num(d.get("slowdown")), _num(d.get("relative")), _num(d.get("difference")),
                   bool(d.get("beyond")), str(d.get("statistic", "")))


@dataclass
class Drift:
    """Time against a stored baseline: ``machine_factor`` is the median slowdown over every time
    metric (None without any), ``rows`` every compared time metric, the furthest from the factor
    first; ``gating`` whether these rows were also gate checks (``time = "gate"`` on comparable
    hardware), else they are advisory."""

    machine_factor: float | None
    rows: list[DriftRow] = field(default_factory=list)
    gating: bool = False

    @property
    def beyond(self) -> list[DriftRow]:
        return [r for r in self.rows if r.beyond]

    def factor_text(self) -> str:
        """``this machine ran the baseline's work 1.90x slower (median of 312 time metrics)``."""
        timed = sum(1 for r in self.rows if r.slowdown is not None)
        f = self.machine_factor
        if f is None:
            return "no time metric to compare"
        how = (f"{f:.2f}x slower" if f >= 1.005 else f"{1 / f:.2f}x faster" if f <= 0.995
               else "at the same speed")
        return (f"this machine ran the baseline's work {how} (median of {timed} time "
                f"metric{'s' if timed != 1 else ''})")

    def to_dict(self) -> dict[str, Any]:
        return {"machine_factor": self.machine_factor, "gating": self.gating,
                "beyond": len(self.beyond), "rows": [r.to_dict() for r in self.rows]}

    @classmethod
    def from_dict(cls, data: Any) -> Drift | None:
        if not isinstance(data, Mapping):
            return None
        given = data.get("rows")
        rows = [DriftRow.from_dict(r) for r in (given if isinstance(given, list) else [])
                if isinstance(r, Mapping)]
        return cls(_num(data.get("machine_factor")), rows, bool(data.get("gating")))


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
    inconclusive: int = 0  # of those, the ones whose slowdown may be past the threshold
    undecided_metrics: list[str] = field(default_factory=list)  # "run::metric", inconclusive first
    drift: Drift | None = None  # time against a stored baseline (advisory unless time = "gate")

    @property
    def passed(self) -> bool:
        return not self.violations and self.incomplete is None

    def to_dict(self) -> dict[str, Any]:
        d = {"passed": self.passed, "violations": [v.to_dict() for v in self.violations],
             "warnings": list(self.warnings), "notes": list(self.notes), "checks": self.checks,
             "baseline": self.baseline, "thresholds": self.thresholds, "undecided": self.undecided,
             "inconclusive": self.inconclusive, "undecided_metrics": list(self.undecided_metrics)}
        if self.incomplete is not None:
            d["incomplete"] = self.incomplete
        if self.drift is not None:
            d["drift"] = self.drift.to_dict()
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Verdict:
        """A verdict stored in a results file (lenient: display only)."""
        violations = [Violation(
            run=str(v.get("run", "")), metric=str(v.get("metric", "")), value=v.get("value"),
            limit=v.get("limit"), baseline=v.get("baseline"), message=str(v.get("message", "")),
            statistic=str(v.get("statistic", "")),
            explain=v["explain"] if isinstance(v.get("explain"), dict) else None)
            for v in data.get("violations", [])
            if isinstance(v, dict)]
        incomplete = data.get("incomplete")
        if incomplete is None and data.get("passed") is False and not violations:
            # never show PASSED for a file that says otherwise
            incomplete = "the stored verdict did not pass"
        return cls(violations=violations, warnings=list(data.get("warnings", [])),
                   notes=list(data.get("notes", [])), checks=int(data.get("checks", 0)),
                   baseline=data.get("baseline"), thresholds=data.get("thresholds"),
                   incomplete=str(incomplete) if incomplete is not None else None,
                   undecided=int(data.get("undecided", 0)),
                   inconclusive=int(data.get("inconclusive", 0)),
                   undecided_metrics=[str(m) for m in data.get("undecided_metrics", [])],
                   drift=Drift.from_dict(data.get("drift")))
