"""One bisection step: a same-job A/B between two commits' worktrees, by the A/B machinery.

:class:`ABOracle` is the :class:`~pytest_opperf.bisect.core.Oracle` of a real bisection. For
commits ``a`` (earlier: the base side) and ``b`` (later: the head side) it runs one A/B session
with :class:`pytest_opperf.ab.controller.Controller` in this process: two side processes, each
``<python> -m pytest -p pytest_opperf.ab.side --opperf <fixed options> <selection>`` started in
its commit's worktree, interleaved with the paired statistics, start orders and CPU placement of
``--opperf-compare``, launched as every child pytest of the plugin is
(:mod:`pytest_opperf.glue.child`: the fixed options in its environment, ``PYTEST_ADDOPTS`` and
``GITHUB_STEP_SUMMARY`` dropped).

Which ``pytest_opperf`` each side imports: **this one**, the bisecting release, on both sides. A
shim directory holding only a ``pytest_opperf`` link to this package comes first on each side's
``PYTHONPATH``, then the side's worktree, so each side runs its commit's framework code, suites and
conftest, measured by the same plugin: a change of the plugin between the commits (its timers, its
own overhead) can neither show up as a regression nor hide one. A commit whose suites need
another release of the plugin than this one fails to collect and is skipped.

The pairs of an answer are pooled with those of the comparison so far (``so_far``): an ``unknown``
verdict asked again adds a session's pairs to the ones it has (the escalation). A commit that
cannot be measured (a side cannot start, collect, or its tests fail) is answered as broken. What
a session finds that biases its comparison (compiled extensions outside the checkouts that differ
between the sides: :mod:`pytest_opperf.ab.extensions`) is kept in :attr:`ABOracle.warnings`, each
once, for the report's notes.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..ab import decide
from ..ab.checkout import side_environment
from ..ab.controller import Controller, TestOutcome
from ..ab.paired import Decision, Paired
from ..ab.processes import SideFailure, SideSpec
from ..ab.samples import SessionPairs
from ..ab.tests_from import PROBE_ENV, Judgement, Staged, TestsFromError, judge, missing
from ..comparison.metrics import MetricKey
from ..comparison.thresholds import CompareSettings
from ..explain.changes import Changes, ChangesError
from ..explain.diff import Explanation
from ..explain.session import explain_metric
from ..glue import child
from ..results import RunResult
from .core import Estimate, Outcome, StepComparison, Three
from .repo import BisectCommit, Worktrees

__all__ = ["ABOracle", "explain_culprits", "label", "plugin_note", "pool", "three"]

MIN_SESSION_S = 20.0  # a session's budget is never below this (the first pass runs regardless)


def label(key: MetricKey) -> str:
    """A metric's name in the bisection: its run id and metric."""
    return f"{key.run} {key.metric}"


def three(d: Decision) -> Three:
    """The A/B verdict as the bisection's: regressed is different; unchanged and improved are
    the same (not the regression looked for); undecided is unknown."""
    if d.verdict == "regressed":
        return "different"
    return "unknown" if d.verdict == "undecided" else "same"


def pool(*parts: SessionPairs | None) -> SessionPairs:
    """The pairs of several sessions of the same two commits, as one session's; each session's
    generations stay generations of their own (other process pairs: numbered after the ones
    before)."""
    out = SessionPairs()
    offset = 0
    for part in parts:
        if part is None:
            continue
        for key, samples in part.paired.items():
            mine = out.of(key, samples.kind)
            mine.base.extend(samples.base)
            mine.head.extend(samples.head)
            out.firsts.setdefault(key, []).extend(part.firsts.get(key, []))
            out.generations.setdefault(key, []).extend(g + offset
                                                       for g in part.generations_of(key))
        offset = 1 + max((g for gs in out.generations.values() for g in gs), default=-1)
    return out


def _focused(samples: SessionPairs, focus: frozenset[str] | None) -> SessionPairs:
    if focus is None:
        return samples
    out = SessionPairs()
    for key, p in samples.paired.items():
        if label(key) in focus:
            out.paired[key] = Paired(key, p.kind, list(p.base), list(p.head))
            out.firsts[key] = list(samples.firsts.get(key, []))
            out.generations[key] = samples.generations_of(key)
    return out


def _estimate(d: Decision) -> Estimate:
    x, low, high, _ = d.in_x()
    return Estimate(three(d), x, low, high, d.estimate, d.low, d.high, d.pairs, d.kind)


def _side(message: str) -> str | None:
    for name in ("base", "head"):
        if f"the {name} side" in message:
            return name
    return None


@dataclass
class ABOracle:
    """Compares two commits of ``commits`` by a same-job A/B (the module docstring)."""

    commits: Sequence[BisectCommit]
    worktrees: Worktrees
    subdir: str  # the invocation directory relative to the repository's toplevel
    pytest_args: list[str]  # the selection, without opperf options
    fixed: dict[str, str]  # the children's fixed options (pytest_opperf.glue.child)
    settings: CompareSettings
    shim: Path
    logs: Path
    python: str = sys.executable
    with_plugin: bool = False  # the interpreter lacks the plugin's entry point: -p it
    timeout_s: float = 600.0
    time_left: Callable[[], float] = lambda: float("inf")
    clock: Callable[[], float] = time.monotonic
    sessions: int = field(default=0, init=False)
    # what a session found that biases its comparison (other compiled extensions outside the
    # checkouts: pytest_opperf.ab.extensions), each said once, with the commits it was seen on
    warnings: list[str] = field(default_factory=list, init=False)
    # the e2e runs both sides measured (with their work counts), per compared pair of positions
    counted: dict[tuple[int, int], dict[str, tuple[RunResult, RunResult]]] = field(
        default_factory=dict, init=False)
    # --tests-from: the selection's files, written into every checkout (pytest_opperf.ab.tests_from)
    tests: Staged | None = None
    imports: Judgement | None = field(default=None, init=False)  # the first step's origins
    _laid_out: set[str] = field(default_factory=set, init=False)

    def _spec(self, name: str, commit: BisectCommit) -> SideSpec:
        root = self.worktrees.checkout(commit.sha)
        cwd = root / self.subdir if self.subdir else root
        args = list(self.pytest_args)
        if self.tests is not None:
            if commit.sha not in self._laid_out:
                self.tests.lay_out(root)
                self._laid_out.add(commit.sha)
            args = [*self.tests.args, "--rootdir=."]  # the same ids on both sides
        command = [self.python, "-m", "pytest", "-p", "pytest_opperf.ab.side"]
        command += ["-p", "pytest_opperf.plugin"] if self.with_plugin else []
        command += ["--opperf", *child.argv_options(self.fixed), *args]
        env = child.environment(self.fixed, side_environment(self.shim, cwd))
        if self.tests is not None:
            env[PROBE_ENV] = ",".join(self.tests.imports)
        self.logs.mkdir(parents=True, exist_ok=True)
        log = self.logs / f"{self.sessions:03d}-{name}-{commit.short}.log"
        return SideSpec(name, command, cwd, env, log)

    def __call__(self, a: int, b: int, so_far: StepComparison | None,
                 focus: frozenset[str] | None) -> StepComparison:
        index = {"base": a, "head": b}
        broken: dict[int, str] = {}

        def outcome(o: TestOutcome) -> None:
            if o.failed and index[o.side] not in broken:
                broken[index[o.side]] = f"its test {o.nodeid} fails"

        self.sessions += 1
        budget = max(MIN_SESSION_S, min(self.settings.budget_s, self.time_left()))
        settings = dataclasses.replace(self.settings, budget_s=budget)
        started = self.clock()
        controller = Controller(self._spec("base", self.commits[a]),
                                self._spec("head", self.commits[b]), settings,
                                self.commits[a].short, self.commits[b].short,
                                timeout_s=self.timeout_s, on_outcome=outcome, clock=self.clock,
                                settle=False)  # a step decides its metrics, not the gate
        finished = False
        try:
            plan, errors = controller.start()
            if self.tests is not None:
                self._judge(controller, a, b, errors)
            for warning in controller.warnings:
                said = f"{self.commits[a].short} -> {self.commits[b].short}: {warning}"
                if not any(w.endswith(warning) for w in self.warnings):
                    self.warnings.append(said)
            for name, found in errors.items():
                if found:
                    where = found[0].get("nodeid") or "<rootdir>"
                    broken.setdefault(index[name], f"it cannot collect the tests ({where})")
            for name in ("base", "head"):
                if not controller.sides.ids.get(name):
                    broken.setdefault(index[name], "it collects no test of the selection")
            if not broken:
                controller.run()
                for run, pair in controller.counted.items():
                    self.counted.setdefault((a, b), {}).setdefault(run, pair)
            finished = True
        except SideFailure as exc:
            named = _side(str(exc))
            tail = f": {exc.tail[-1].strip()}" if exc.tail else ""
            for side in ([named] if named else ["base", "head"]):
                broken.setdefault(index[side], f"{exc}{tail}")
        finally:
            controller.close(grace_s=10.0 if finished else 1.0)
        elapsed = self.clock() - started
        previous = so_far.state if so_far is not None else None
        samples = pool(previous if isinstance(previous, SessionPairs) else None,
                       None if broken else controller.samples)
        focused = _focused(samples, focus)
        decisions = decide.final_decisions(focused, self.settings) if focused.paired else []
        return StepComparison(a, b, {label(d.key): _estimate(d) for d in decisions},
                          pairs=(so_far.pairs if so_far is not None else 0)
                          + (0 if broken else controller.pairs),
                          sessions=(so_far.sessions if so_far is not None else 0) + 1,
                          elapsed_s=(so_far.elapsed_s if so_far is not None else 0.0) + elapsed,
                          broken=broken, state=samples)


    def _judge(self, controller: Controller, a: int, b: int,
               errors: dict[str, list[Any]]) -> None:
        """Where each side imported the selection's modules from. A module neither side has (and
        neither collects), or one a side that collected takes from outside its checkout, ends
        the bisection (:class:`TestsFromError`); the first such check is kept for the report."""
        found = {n: m.get("origins") or {} for n, m in controller.collected.items()}
        labels = {"base": self.commits[a].short, "head": self.commits[b].short}
        broken = {n for n, e in errors.items() if e or not controller.sides.ids.get(n)}
        absent = missing(found, labels)
        if absent is not None and broken == {"base", "head"}:
            raise TestsFromError(absent)
        if broken:
            return  # a commit that cannot be measured is skipped, as without --tests-from
        roots = {"base": self.worktrees.checkout(self.commits[a].sha),
                 "head": self.worktrees.checkout(self.commits[b].sha)}
        judgement = judge(roots, found)
        if judgement.problem is not None:
            raise TestsFromError(f"{labels['base']} -> {labels['head']}: {judgement.problem}")
        if self.imports is None:
            self.imports = judgement


def plugin_note(tests_from: bool = False) -> str:
    """Where each side's plugin comes from, for the report (``tests_from``: the tests are not
    each commit's own)."""
    here = Path(__file__).resolve().parent.parent
    what = ("framework code, ini file and conftest (the tests: --tests-from)" if tests_from
            else "framework code, suites and conftest")
    return f"both sides run this pytest_opperf ({here}) against each commit's own {what}"


def explain_culprits(oracle: ABOracle, outcome: Outcome) -> tuple[dict[tuple[int, str],
                                                                       Explanation], list[str]]:
    """Each culprit's metrics explained between the culprit and the commit it was verified
    against (:func:`pytest_opperf.explain.session.explain_metric`, from the runs of that
    comparison), with more work the culprit's changed lines it runs through; by (culprit
    position, metric label).
    Call it while the worktrees are there. The notes say what could not be read."""
    out: dict[tuple[int, str], Explanation] = {}
    notes: list[str] = []
    for c in outcome.culprits:
        runs = oracle.counted.get((c.parent, c.commit), {})
        parent, commit = oracle.commits[c.parent], oracle.commits[c.commit]
        changes: Changes | None = None
        note = None
        try:
            changes = Changes.from_git(oracle.worktrees.checkout(commit.sha), parent.sha,
                                       commit.sha)
        except ChangesError as exc:
            note = f"the culprit's diff could not be read: {exc}"
            notes.append(f"explain: {commit.short}: {note}")
        for m in c.metrics:
            run, _, metric = m.rpartition(" ")
            out[(c.commit, m)] = explain_metric(metric, runs.get(run), changes, note)
    return out, notes
