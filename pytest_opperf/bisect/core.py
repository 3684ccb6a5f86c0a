"""The bisection itself: confirm, bisect, verify, on an ordered list of commits and an A/B oracle.

Pure: no git, no processes, no clock of its own. Commits are indices ``0 .. n-1`` of the
first-parent history, ``0`` the good commit and ``n-1`` the bad one. The oracle
(:class:`Oracle`) compares two commits by a paired A/B and answers per metric with a three-way
verdict: ``different`` (the later commit regressed), ``same`` (any slowdown is shown smaller than
what counts; an improvement is "same" too: it is not the regression looked for) or ``unknown``
(the interval is too wide yet). An ``unknown`` comparison is asked again with its pairs so far,
which the oracle pools with new ones (the escalation: more pairs for the same two commits), up
to ``max_attempts`` times.

1. **Confirm** the good commit against the bad one. The metrics that are ``different`` are the
   regression looked for (its *metrics*); none: "not reproduced" (the message says whether every
   metric was shown the same, or which stayed undecided after the sessions a step may pool).
2. **Bisect** a range ``(lo, hi]`` known to hold the regression: compare ``lo`` with the middle
   commit ``mid``: ``different``, the change is in ``(lo, mid]``; ``same``, in ``(mid, hi]``;
   ``unknown``, compare ``mid`` with ``hi`` instead and infer, or stop with the range. A commit
   that cannot be measured (does not build or import, its tests fail) is skipped like
   ``git bisect skip`` and another one of the range is taken.
3. **Verify** the candidate ``c`` against the last commit before it that was measured, in a fresh
   comparison (new pairs): only a ``different`` verdict names a culprit.
4. When the culprit's change is shown smaller than the confirmation's (their difference beyond
   its own interval), part of the step is elsewhere: the range after the culprit is compared
   (``rest``) and, when it regressed, bisected too (a step spread over several commits names
   each, with its share of the step).

Each comparison is one *step*; :class:`Outcome` holds every step, the culprits, the ranges that
stayed open and the skipped commits; its messages name commits by their position (``3``: the
third commit after the good one).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

__all__ = ["StepComparison", "Culprit", "Estimate", "Oracle", "Outcome", "Range", "Step", "Three",
           "bisect", "three_way"]

Three = Literal["different", "same", "unknown"]
StepKind = Literal["confirm", "bisect", "verify", "rest"]
Status = Literal["culprit", "not reproduced", "undecided", "unverified", "broken"]
# undecided: the budget was spent before the confirmation ended


@dataclass(frozen=True)
class Estimate:
    """One metric of one comparison: its verdict and its change, ``x`` in log units (positive:
    worse for the later commit; :func:`pytest_opperf.ab.paired.to_x`) with its interval, and the
    ratio (or difference) as the A/B report shows it."""

    verdict: Three
    x: float
    x_low: float
    x_high: float
    ratio: float
    low: float
    high: float
    pairs: int
    kind: str = "time"  # the metric's kind (pytest_opperf.comparison.metrics.Kind)


@dataclass
class StepComparison:
    """The oracle's answer on ``a`` (earlier) against ``b`` (later). ``broken`` maps a commit that
    could not be measured to why; ``state`` is the oracle's own (its pooled pairs)."""

    a: int
    b: int
    metrics: dict[str, Estimate] = field(default_factory=dict)
    pairs: int = 0
    sessions: int = 0
    elapsed_s: float = 0.0
    broken: dict[int, str] = field(default_factory=dict)
    state: object = None


class Oracle(Protocol):
    def __call__(self, a: int, b: int, so_far: StepComparison | None,
                 focus: frozenset[str] | None) -> StepComparison:
        """Compare commit ``a`` with ``b``; ``so_far`` (the last answer on them) holds pairs to
        pool with new ones; ``focus`` the metrics to decide (None: all)."""
        ...


@dataclass
class Step:
    kind: StepKind
    comparison: StepComparison  # pooled with an earlier comparison of the same commits
    verdict: Three  # over the metrics looked at
    attempts: int  # A/B sessions of this step
    pairs: int  # pairs this step measured


@dataclass(frozen=True)
class Culprit:
    commit: int
    parent: int  # the commit it was verified against (the last measured one before it)
    verified: bool
    metrics: dict[str, Estimate]  # of the verification
    share: dict[str, float]  # per metric: its change over the confirmation's (log units)


@dataclass(frozen=True)
class Range:
    """A range ``(lo, hi]`` that holds (part of) the regression and was not narrowed further."""

    lo: int
    hi: int
    why: str


@dataclass
class Outcome:
    status: Status
    message: str
    metrics: list[str] = field(default_factory=list)  # the regression's (of the confirmation)
    steps: list[Step] = field(default_factory=list)
    culprits: list[Culprit] = field(default_factory=list)
    ranges: list[Range] = field(default_factory=list)
    skipped: dict[int, str] = field(default_factory=dict)
    levels: dict[str, dict[int, float]] = field(default_factory=dict)  # x against commit 0

    @property
    def pairs(self) -> int:
        return sum(s.pairs for s in self.steps)

    @property
    def sessions(self) -> int:
        return sum(s.attempts for s in self.steps)


def three_way(metrics: Mapping[str, Estimate], focus: frozenset[str] | None) -> Three:
    """One verdict over ``focus`` (None: every metric): ``different`` when any is, ``same`` when
    all are (a metric missing from the comparison is not), else ``unknown``."""
    names = list(metrics) if focus is None else sorted(focus)
    verdicts = [metrics[m].verdict if m in metrics else "unknown" for m in names]
    if "different" in verdicts:
        return "different"
    return "same" if verdicts and all(v == "same" for v in verdicts) else "unknown"


class _Stop(Exception):
    """The budget is spent: the bisection ends with what it has."""


@dataclass
class _Bisection:
    n: int
    oracle: Oracle
    max_attempts: int
    time_left: Callable[[], float]
    on_step: Callable[[str, StepKind, int, int, StepComparison | None], None]
    out: Outcome
    focus: frozenset[str] | None = None
    cache: dict[tuple[int, int], StepComparison] = field(default_factory=dict)

    def step(self, kind: StepKind, a: int, b: int, fresh: bool = False) -> Step:
        """Compare ``a`` with ``b`` until the verdict is not ``unknown``, the attempts are spent
        or the budget is; pools with an earlier comparison of the same commits unless ``fresh``."""
        if self.time_left() <= 0:
            raise _Stop()
        so_far = None if fresh else self.cache.get((a, b))
        before = so_far.pairs if so_far is not None else 0
        self.on_step("start", kind, a, b, so_far)
        attempts = 0
        while True:
            result = self.oracle(a, b, so_far, self.focus)
            attempts += 1
            verdict = three_way(result.metrics, self.focus)
            if (result.broken or verdict != "unknown" or attempts >= self.max_attempts
                    or self.time_left() <= 0):
                break
            so_far = result
            self.on_step("more", kind, a, b, result)
        if not fresh:
            self.cache[(a, b)] = result
        step = Step(kind, result, verdict, attempts, result.pairs - before)
        self.out.steps.append(step)
        self._level(a, b, result)
        self.on_step("end", kind, a, b, result)
        return step

    def _level(self, a: int, b: int, result: StepComparison) -> None:
        """Each metric's level against commit 0, chained through the comparisons."""
        for name, e in result.metrics.items():
            levels = self.out.levels.setdefault(name, {0: 0.0})
            if a in levels and math.isfinite(e.x):
                levels[b] = levels[a] + e.x
            elif b in levels and math.isfinite(e.x):
                levels[a] = levels[b] - e.x

    def usable(self, lo: int, hi: int) -> list[int]:
        return [i for i in range(lo + 1, hi) if i not in self.out.skipped]

    def broken(self, step: Step) -> bool:
        """Records the commits a step could not measure; whether there were any."""
        for commit, why in step.comparison.broken.items():
            self.out.skipped.setdefault(commit, why)
        return bool(step.comparison.broken)

    def measured(self, a: int, b: int, bound: int) -> tuple[Step | None, str | None]:
        """A bisection step from ``a`` to ``b``: the step; or None when it found a commit it could
        not measure (skipped: the range is narrowed again), with why when that commit is
        ``bound``, the end of the range that was measured before."""
        step = self.step("bisect", a, b)
        if not self.broken(step):
            return step, None
        if bound in step.comparison.broken:
            return None, f"the commit at {bound} could not be measured again"
        return None, None

    def narrow(self, lo: int, hi: int) -> tuple[int, int, str | None]:
        """Narrow ``(lo, hi]`` (known to regress) to one commit, or to a range with why."""
        while True:
            inside = self.usable(lo, hi)
            if not inside:
                return lo, hi, None
            middle = (lo + hi) / 2
            mid = min(inside, key=lambda i: (abs(i - middle), i))
            step, why = self.measured(lo, mid, bound=lo)
            if why is not None:
                return lo, hi, why
            if step is None:
                continue
            if step.verdict == "different":
                hi = mid
            elif step.verdict == "same":
                lo = mid
            else:
                other, why = self.measured(mid, hi, bound=hi)
                if why is not None:
                    return lo, hi, why
                if other is None:
                    continue
                if other.verdict == "unknown":
                    return lo, hi, (f"undecided between {lo} and {mid} and between {mid} and "
                                    f"{hi} after {self.max_attempts} attempt(s) each")
                lo, hi = (mid, hi) if other.verdict == "different" else (lo, mid)


def bisect(n: int, oracle: Oracle, max_attempts: int = 4,
           time_left: Callable[[], float] = lambda: math.inf,
           on_step: Callable[[str, StepKind, int, int, StepComparison | None], None] | None = None,
           into: Outcome | None = None) -> Outcome:
    """Confirm, bisect and verify over commits ``0 .. n-1`` (the module docstring); ``on_step``
    hears of each step as it starts (with the comparison so far, if any) and ends, and ``into``
    (returned) fills as the steps go."""
    if n < 2:
        raise ValueError(f"a bisection needs a good and a bad commit, got {n} commit(s)")
    out = into if into is not None else Outcome("undecided", "")
    run = _Bisection(n, oracle, max(1, max_attempts), time_left,
                     on_step or (lambda *args: None), out)
    try:
        _confirm_and_search(run, out, n)
    except _Stop:
        out.ranges.append(Range(-1, -1, "the budget is spent"))
    _conclude(out, n)
    return out


def _confirm_and_search(run: _Bisection, out: Outcome, n: int) -> None:
    confirm = run.step("confirm", 0, n - 1)
    if run.broken(confirm):
        out.status = "broken"
        which = " and ".join(("the good", "the bad")[c == n - 1] + f" commit ({why})"
                             for c, why in confirm.comparison.broken.items())
        out.message = f"cannot compare: {which} could not be measured"
        return
    out.metrics = sorted(m for m, e in confirm.comparison.metrics.items()
                         if e.verdict == "different")
    if not out.metrics:  # no metric shown regressed: not reproduced (the message says how sure)
        out.status = "not reproduced"
        unknown = {m: e for m, e in confirm.comparison.metrics.items() if e.verdict == "unknown"}
        if unknown:
            worst = max(unknown, key=lambda m: unknown[m].x if math.isfinite(unknown[m].x)
                        else -math.inf)
            e = unknown[worst]
            out.message = (f"not reproduced: no metric was shown to regress; {len(unknown)} "
                           f"stayed undecided after {confirm.attempts} session(s) (the most: "
                           f"{worst} {e.ratio:.3f} [{e.low:.3f}, {e.high:.3f}])")
        else:
            out.message = "not reproduced: the good and the bad commit measure the same"
        return
    run.focus = frozenset(out.metrics)
    whole = confirm.comparison.metrics
    todo = [(0, n - 1)]
    while todo:
        lo, hi = todo.pop(0)
        a, c, why = run.narrow(lo, hi)
        if why is not None or c - a > 1:  # undecided, or the commits between are skipped
            skipped = sum(1 for i in range(a + 1, c) if i in out.skipped)
            out.ranges.append(Range(a, c, why or f"{skipped} commit(s) between could not be "
                                    "measured"))
            continue
        verify = run.step("verify", a, c, fresh=True)
        if run.broken(verify):
            out.ranges.append(Range(a, c, "the verification could not measure a commit"))
            continue
        metrics = {m: verify.comparison.metrics[m] for m in out.metrics
                   if m in verify.comparison.metrics}
        share = {m: e.x / whole[m].x for m, e in metrics.items()
                 if m in whole and whole[m].x > 0 and math.isfinite(e.x)}
        out.culprits.append(Culprit(c, a, verify.verdict == "different", metrics, share))
        rest = any(_shown_smaller(e, whole[m]) for m, e in metrics.items() if m in whole)
        if c < hi and (rest or verify.verdict != "different"):
            after = run.step("rest", c, hi)
            if not run.broken(after) and after.verdict == "different":
                todo.append((c, hi))
            elif after.verdict == "unknown":
                out.ranges.append(Range(c, hi, "undecided whether the rest regressed too"))


def _shown_smaller(part: Estimate, whole: Estimate) -> bool:
    """Whether a culprit's change is shown smaller than the whole step's: the difference of the
    two estimates (independent sessions) above zero by more than its own half-width, the two
    half-widths added in quadrature. The culprit's interval against the confirmation's point
    estimate alone would ignore the confirmation's own noise, and compare the rest of the range
    by chance in bisections whose whole step is one commit."""
    if not all(map(math.isfinite, (part.x, part.x_high, whole.x, whole.x_low))):
        return False
    half = math.hypot(part.x_high - part.x, whole.x - whole.x_low)
    return whole.x - part.x > half


def _conclude(out: Outcome, n: int) -> None:
    if out.status in ("broken", "not reproduced"):
        return
    if not out.steps:
        out.message = "undecided: the budget is spent before the confirmation"
        return
    verified = [c for c in out.culprits if c.verified]
    if verified and not out.ranges and len(verified) == len(out.culprits):
        out.status = "culprit"
        out.message = (f"{len(verified)} culprit(s) verified" if len(verified) > 1
                       else "culprit verified")
        return
    out.status = "unverified"
    parts = []
    unverified = [c for c in out.culprits if not c.verified]
    if unverified:
        parts.append("the candidate(s) at " + ", ".join(str(c.commit) for c in unverified)
                     + " not confirmed against their parent")
    for r in out.ranges:
        parts.append(r.why if r.lo < 0 else f"the range {r.lo}..{r.hi}: {r.why}")
    if verified:
        parts.insert(0, f"{len(verified)} culprit(s) verified")
    out.message = "no single culprit verified: " + "; ".join(parts)
