"""The A/B schedule: what runs on the two sides and when; visits, generations and the budget.

The two side processes (:mod:`.processes`) collect the tests; the controller holds the baton: one
side runs at a time. A visit of a test starts it on one side, then on the other (the generation's
start order), and pairs what both measure: an e2e run's steps, one pair a step, in an order drawn
per step; a per-op benchmark's blocks, both sides calibrated alike and warmed up (``WARMUP_S``),
then pairs of short blocks in an order drawn per pair, the second on the CPU the first ended on
(docs/ab-statistics.md, "Where a pair runs"). A test on one side only runs there alone. The rules,
over :mod:`.tuning`'s constants and :mod:`.decide`'s statistics:

1. **First pass.** Every test once, in the plan's order; the head's results are the session's.
2. **A benchmark's visit** looks at its pairs once they can bound an interval at the session's
   corrected level (and number ``min_pairs``), then every ``CHECK_EVERY``; it stops when the pairs
   of its start order decide on their own, at ``MAX_VISIT_PAIRS``, or, past that fewest, at its
   share of the time to its generation's deadline (``FIRST_VISIT_SHARE`` over the tests left,
   ``MIN_VISIT_S`` at least).
3. **Two deadlines.** The *ceiling* is ``[compare] budget_s`` from the start. The *reruns'
   budget* ends ``RERUN_SHARE`` of the first pass after it, or ``SMALL_SESSION_S`` from the start
   if that is later, never past the ceiling. A metric that wants pairs has them up to the ceiling
   when the gate's verdict waits for it (:func:`.decide.wanting_pairs`' ``"gate"``: a change to
   confirm, a metric that may end inconclusive, an e2e run's), within the reruns' budget if not.
4. **One allocation rule.** Each later generation, in two fresh processes started in the other
   order, runs the tests whose metrics want pairs: the gate's, then the others, each group the
   most such metrics per second of the test's last visit first, as many as fit before their
   deadline with a start of the sides after them (:func:`.cost.choose`). As the sides start anyway
   for the gate's tests, the others may fill a start's seconds past the reruns' budget.
5. **One stopping rule.** The session ends when a generation would run nothing: no metric wants
   pairs, or none that does fits before its deadline. A generation that leaves no time for another
   runs only the metrics that may still end regressed (the current start order's pairs are final
   then: :func:`.decide.may_regress`) or whose undecided verdict the gate waits for. Two caps:
   ``MAX_RERUNS`` generations; and once the reruns' budget has no room for every test that wants
   pairs, a session with a metric regressed ends, as the gate fails whatever the rest ends as
   (:func:`.decide.settled`; not with ``settle`` off, as bisect's, which decide what they chase).

Every visit is timed, and its seconds are its test's (the result's ``cost``, :mod:`.cost`). At the
start the compiled extension modules the sides loaded are compared (:mod:`.extensions`): those that
differ outside the checkouts are a warning (:attr:`Controller.warnings`) and the first note. No
pytest import: the glue (``session.py``) passes callbacks.
"""

from __future__ import annotations

import math
import os
import random
import statistics
import time
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..comparison.metrics import steady_steps
from ..records.handback import Envelope, HandBackError
from ..results import RunResult
from . import cost, decide, extensions, family, generations, paired, signedrank, tuning
from .pairs import e2e_samples
from .processes import Side, SideFailure, Sides, SideSpec, layout_pad, usable_cpus
from .samples import SessionPairs

__all__ = ["Controller", "Plan", "TestOutcome", "rerun_budget"]


def rerun_budget(first_pass_s: float) -> float:
    """The reruns' seconds after a first pass of ``first_pass_s``: ``tuning.RERUN_SHARE`` of it,
    or as many as take the session to ``tuning.SMALL_SESSION_S``, whichever is more."""
    return max(tuning.RERUN_SHARE * first_pass_s, tuning.SMALL_SESSION_S - first_pass_s)


@dataclass
class Plan:
    """What both sides collected: the tests run on both, and those on one side only."""

    common: list[str]
    added: list[str]  # on the head only: run there alone
    removed: list[str]  # on the base only: not run
    order: list[str]  # the head's order: common and added


@dataclass
class TestOutcome:
    """One side's answer at the end of a test: serialised reports, runs, whether it failed."""

    side: str
    nodeid: str
    visit: int
    reports: list[dict[str, Any]]
    runs: list[RunResult]
    failed: bool


@dataclass
class Controller:
    """Drives the two sides; :meth:`start` then :meth:`run`, and always :meth:`close`."""

    base_spec: SideSpec
    head_spec: SideSpec
    settings: paired.CompareSettings
    base_label: str
    head_label: str
    timeout_s: float = 600.0
    undecided: str = "inconclusive"  # --opperf-compare-undecided: which undecided metrics fail
    seed: int | None = None
    warmup_s: float = tuning.WARMUP_S
    clock: Callable[[], float] = time.monotonic
    on_outcome: Callable[[TestOutcome], None] = lambda outcome: None
    should_stop: Callable[[], bool] = lambda: False
    cpus: Sequence[int] | None = None  # where a pair's second block may be pinned (None: usable)
    settle: bool = True  # end once a metric regressed (decide.settled); bisect needs its metrics
    samples: SessionPairs = field(default_factory=SessionPairs)  # pairs tagged by start order
    notes: list[str] = field(default_factory=list)
    pairs: int = 0
    counted: dict[str, tuple[RunResult, RunResult]] = field(default_factory=dict)  # e2e, 1st visit

    def __post_init__(self) -> None:
        if self.seed is None:
            self.seed = int.from_bytes(os.urandom(4), "little")
        self.rng = random.Random(self.seed)
        self._cpus: list[int] = list(usable_cpus() if self.cpus is None else self.cpus)
        self._started = 0.0
        self._visits: dict[str, int] = {}
        self._plan: Plan | None = None
        self.sides = Sides(self.base_spec, self.head_spec, self.rng.choice(["base", "head"]),
                           self.timeout_s, self.clock, seed=self.seed)  # generation 0's first
        self._unvisited = 0  # tests the first pass has not reached (for the family size)
        self._visit_s: dict[str, float] = {}  # how long each test's last visit took
        self._test_s: dict[str, float] = {}  # how long all the visits of each test took
        self.warnings: list[str] = []  # notes that say the A/B is biased (also first in notes)

    # --- start ----------------------------------------------------------------------------

    def start(self) -> tuple[Plan, dict[str, list[dict[str, Any]]]]:
        """Spawn both sides and wait for their collection. Returns the plan and each side's
        collection errors (serialised reports); the glue decides what they mean."""
        self._started = self.clock()
        collected = self.collected = self.sides.spawn()  # each side's "collected" message
        base_ids, head_ids = self.sides.ids["base"], self.sides.ids["head"]
        base_set, head_set = set(base_ids), set(head_ids)
        plan = Plan(common=[i for i in head_ids if i in base_set],
                    added=[i for i in head_ids if i not in base_set],
                    removed=[i for i in base_ids if i not in head_set], order=head_ids)
        self._plan = plan
        self._check_extensions(collected)
        if not self.sides.placing:
            self.notes.append(self.sides.unplaced_note())
        errors = {name: list(message.get("errors", [])) for name, message in collected.items()}
        return plan, errors

    def _check_extensions(self, collected: dict[str, dict[str, Any]]) -> None:
        """Notes on the compiled extensions the two sides loaded, when they differ
        (:mod:`.extensions`): those outside the checkouts first, and among the warnings."""
        base, head = (extensions.parse(collected[n].get("extensions")) for n in ("base", "head"))
        if base is None or head is None:
            return  # a side that does not report them: nothing to compare
        check = extensions.compare(base, head)
        notes = extensions.notes(check)
        self.warnings += notes[:1] if check.environment else []
        self.notes[:0] = notes

    def restrict(self, keep: Collection[str]) -> Plan:
        """Only the tests in ``keep`` (a shard): the others run on neither side."""
        plan = self._plan
        assert plan is not None, "start() first"
        self._plan = Plan(*([i for i in ids if i in keep]
                            for ids in (plan.common, plan.added, plan.removed, plan.order)))
        return self._plan

    # --- the session ------------------------------------------------------------------------

    def run(self) -> paired.CompareResult:
        plan = self._plan
        assert plan is not None, "start() first"
        ceiling = self._started + self.settings.budget_s
        self._budget_end = self._reruns_end = ceiling
        schedule = list(plan.order)
        for index, nodeid in enumerate(schedule):
            if self.should_stop():
                self.notes.append("the session stopped early (-x/--maxfail): later tests were "
                                  "not compared")
                break
            self._remaining = self._unvisited = len(schedule) - index
            self._visit(nodeid, self._next_of(schedule, index), nodeid in set(plan.common))
        self._unvisited = 0
        now = self.clock()
        first_pass_s = now - self._started
        self._reruns_end = min(ceiling, now + rerun_budget(first_pass_s))
        rerun_s = self._reruns_end - now
        budget_exhausted = self._rerun(set(plan.common), ceiling)
        decisions = decide.final_decisions(self.samples, self.settings)
        if any(d.verdict == "undecided" for d in decisions) and self.clock() >= self._reruns_end:
            budget_exhausted = True
        self.notes.append(f"first pass {first_pass_s:.0f} s, then a budget of "
                          f"{max(0.0, rerun_s):.0f} s for running tests again")
        bias = [{**g, "layout": layout_pad(self.sides.seed, g["generation"])}
                for g in generations.generation_bias(self.samples)]
        means = [f"{g['geometric_mean']:.3f}" for g in bias
                 if g["geometric_mean"] is not None]
        if means:
            self.notes.append("process pairs' bias: geometric mean head/base of each "
                              f"generation's time metrics {', '.join(means)}")
        self.notes.append(f"order seed {self.seed}; {self.sides.generation + 1} generation(s) "
                          f"of side processes; {self.sides.layout_note()}")
        return paired.CompareResult(
            base=self.base_label, head=self.head_label, decisions=decisions, added=list(plan.added),
            removed=list(plan.removed), pairs=self.pairs, elapsed_s=self.clock() - self._started,
            budget_exhausted=budget_exhausted, notes=list(self.notes), generations=bias,
            cost=cost.costs(decisions, self._test_s, self._visits))

    def _rerun(self, common: set[str], ceiling: float) -> bool:
        """The generations after the first pass, by the allocation and stopping rules of the module
        docstring; returns whether the budget ended them with something left to run."""
        for _ in range(tuning.MAX_RERUNS):
            if self.should_stop():
                return False
            if (self.settle and not self._budget_holds(common)
                    and (settled := decide.settled(self.samples, self.settings))):
                self.notes.append(settled)
                return False
            tests, last, self._budget_end = self._generation(common, ceiling)
            if not tests:
                left = any(self._wanted(common))
                if last and left and not any(self._wanted(common, self.sides.first)):
                    self.notes.append("stopped early: no metric left undecided could end "
                                      "regressed in the generations the budget allows")
                return left
            if self.clock() + self.sides.spawn_s >= self._budget_end:
                return True  # a restart would measure nothing
            self._pass(tests)
            if last:
                return any(self._wanted(common))
        return False

    def _generation(self, common: set[str], ceiling: float) -> tuple[list[str], bool, float]:
        """The next generation's tests (the allocation rule: :func:`.cost.choose`), whether it is
        the last (the gate's tests, or with none the others, do not all fit before their deadline
        with a start of the sides after them: then only the metrics that may still end regressed,
        or that the gate waits for, count), and its deadline (the ceiling with a gate's test)."""
        gate, other = self._wanted(common)
        tests = self._choose(gate, other, ceiling)
        last = not set(gate or other) <= set(tests)
        if last:  # the pairs of the current start order are final
            gate, other = self._wanted(common, self.sides.first)
            tests = self._choose(gate, other, ceiling)
        return tests, last, ceiling if set(gate) & set(tests) else self._reruns_end

    def _budget_holds(self, common: set[str]) -> bool:
        """Whether the reruns' budget has room for a generation of every test whose metrics
        want pairs (with a start of the sides after it)."""
        wanted = [t for tests in self._wanted(common) for t in tests]
        room = self._reruns_end - self.clock() - 2 * self.sides.spawn_s
        return sum(self._visit_s.get(t, 0.0) for t in wanted) <= room

    def _choose(self, gate: dict[str, int], other: dict[str, int], ceiling: float) -> list[str]:
        now, starts = self.clock(), 2 * self.sides.spawn_s  # this generation's and the next's
        rooms = (ceiling - now - starts, self._reruns_end - now - starts)
        return cost.choose(gate, other, self._visit_s, rooms, self.sides.spawn_s)

    def _pass(self, tests: list[str]) -> None:
        """One generation: the sides restarted in the other order, ``tests`` run on both."""
        self.sides.restart()
        for index, nodeid in enumerate(tests):
            if self.clock() >= self._budget_end:
                break
            self._remaining = len(tests) - index
            self._visit(nodeid, self._next_of(tests, index), True)

    @staticmethod
    def _next_of(schedule: list[str], index: int) -> str | None:
        return schedule[index + 1] if index + 1 < len(schedule) else None

    def _wanted(self, common: set[str],
                final: str | None = None) -> tuple[dict[str, int], dict[str, int]]:
        """The tests with metrics that want pairs (:func:`.decide.wanting_pairs`, with ``final``),
        in the plan's order, each with how many: those with one the gate waits for, the others."""
        wanted = decide.wanting_pairs(self.samples, self.settings, final, self.undecided)
        gate = {cost.node_of(key.run) for key, why in wanted if why == "gate"}
        counts = Counter(cost.node_of(key.run) for key, _ in wanted)
        order = [t for t in (self._plan.order if self._plan else []) if t in counts and t in common]
        return ({t: counts[t] for t in order if t in gate},
                {t: counts[t] for t in order if t not in gate})

    def close(self, grace_s: float = 10.0) -> None:
        """End both processes (idempotent, never raises); ``grace_s`` for each to end by itself."""
        self.sides.close(grace_s)

    def kill(self) -> None:
        """End both processes at once."""
        self.sides.kill()

    # --- one test on both sides --------------------------------------------------------------

    def _visit(self, nodeid: str, next_id: str | None, both: bool) -> None:
        started = self.clock()
        visit = self._visits.get(nodeid, 0)
        self._visits[nodeid] = visit + 1
        names = self.sides.start_order() if both else ["head"]
        doing = f"running {nodeid}"
        state: dict[str, dict[str, Any]] = {}
        for name in names:
            side = self.sides[name]
            side.send({"cmd": "run", "nodeid": nodeid, "next": next_id, "first": visit == 0}, doing)
            state[name] = side.receive(self.timeout_s, doing)
        while True:
            active = [n for n in names if state[n].get("ev") != "done"]
            if not active:
                break
            kinds = {state[n].get("ev") for n in active}
            if len(active) == 2 and kinds == {"bench"}:
                self._bench_pairs(nodeid, state["base"], [self.sides[n] for n in active])
                order = active
            elif len(active) == 2 and kinds == {"step"}:
                order = self.rng.sample(active, 2)
            else:
                lone = next((n for n in active if state[n].get("ev") == "step"), active[0])
                if state[lone].get("ev") == "bench":
                    self._bench_alone(nodeid, self.sides[lone])
                order = [lone]
            for name in order:
                side = self.sides[name]
                side.send({"cmd": "go"}, doing)
                state[name] = side.receive(self.timeout_s, doing)
        outcomes = {}
        for name in names:
            message = state[name]
            try:  # a base side of an earlier release sends the envelope's fields unversioned
                back = Envelope.from_dict(message, f"the {name} side", "ab-side", True)
            except HandBackError as exc:
                raise SideFailure(f"results of the {name} side unreadable: {exc}",
                                  self.sides[name].tail()) from None
            outcome = TestOutcome(name, nodeid, visit, back.reports, back.runs, back.failed)
            outcomes[name] = outcome
            self.on_outcome(outcome)
        if both and not outcomes["base"].failed and not outcomes["head"].failed:
            self._e2e_pairs(outcomes["base"].runs, outcomes["head"].runs)
        self._visit_s[nodeid] = self.clock() - started
        self._test_s[nodeid] = self._test_s.get(nodeid, 0.0) + self._visit_s[nodeid]

    def _e2e_pairs(self, base_runs: list[RunResult], head_runs: list[RunResult]) -> None:
        base = {r.id: r for r in base_runs if r.kind == "e2e"}
        for head in head_runs:
            if head.kind != "e2e" or head.id not in base:
                continue
            self.counted.setdefault(head.id, (base[head.id], head))
            self.samples.add_steps(head.id, steady_steps(base[head.id]))
            if head.executor_stat:
                self.samples.add_step_stat(head.id, head.executor_stat)
            for s in e2e_samples(base[head.id], head):
                key = paired.MetricKey(s.run, s.metric)
                self.samples.of(key, s.kind)
                for x, y in zip(s.base, s.head, strict=True):
                    self.samples.add(key, s.kind, x, y, self.sides.first, self.sides.generation)
                self.pairs += len(s.base)

    # --- per-op benchmarks --------------------------------------------------------------------

    def _calibrate(self, sides: list[Side], doing: str) -> tuple[int, int]:
        """The iterations per round and rounds per block, the same on both sides (also the
        warm-up)."""
        answers = []
        for side in sides:
            side.send({"cmd": "calibrate", "min_round_s": tuning.MIN_ROUND_S}, doing)
            answers.append(side.receive(self.timeout_s, doing))
        iterations = max(int(a.get("iterations", 1)) for a in answers)
        per_call = max(float(a.get("round_s", 0.0)) / max(1, int(a.get("iterations", 1)))
                       for a in answers)
        round_s = per_call * iterations
        if round_s <= 0:
            return iterations, tuning.MAX_ROUNDS
        return iterations, max(1, min(tuning.MAX_ROUNDS, math.ceil(tuning.BLOCK_S / round_s)))

    def _pair(self, by_name: dict[str, Side], rounds: int, iterations: int,
              doing: str) -> dict[str, float]:
        """One block on each side, in an order drawn now; the second on the first's CPU; where
        both sides can, their arrays in the memory they share, placed alike by a seed drawn now
        (:mod:`.arena`)."""
        got: dict[str, float] = {}
        cpu: int | None = None
        place = self.rng.getrandbits(31) if self.sides.placing else None
        for name in self.rng.sample(["base", "head"], 2):
            got[name], ran_on = self._block(by_name[name], rounds, iterations, doing, cpu, place)
            if cpu is None and ran_on in self._cpus:
                cpu = ran_on
        return got

    def _block(self, side: Side, rounds: int, iterations: int, doing: str,
               cpu: int | None = None, place: int | None = None) -> tuple[float, int | None]:
        """The block's median per-call time (ms) and the CPU it ended on (None: unknown)."""
        order: dict[str, Any] = {"cmd": "block", "rounds": rounds, "iterations": iterations}
        if cpu is not None:
            order["cpu"] = cpu
        if place is not None:
            order["place"] = place
        side.send(order, doing)
        answer = side.receive(self.timeout_s, doing)
        values = answer.get("per_call_s")
        if answer.get("ev") != "block" or not isinstance(values, list) or not values:
            raise SideFailure(f"the {side.name} side answered {answer.get('ev')!r} to a block "
                              f"while {doing}",
                              side.tail())
        if answer.get("arena") and self.sides.placing:
            self.sides.placing = False  # both sides alike: no pair is placed from here on
            self.notes.append(f"from {doing} on, no per-op pair ran in shared memory: the "
                              f"{side.name} side stopped placing arrays ({answer['arena']})")
        ran_on = answer.get("cpu")
        ran_on = ran_on if isinstance(ran_on, int) and not isinstance(ran_on, bool) else None
        return statistics.median(float(v) for v in values) * 1e3, ran_on

    def _visit_deadline(self) -> float:
        """A benchmark's share of the time to its generation's deadline: ``FIRST_VISIT_SHARE`` of
        it over the tests left (in the first pass the rest stays for the tests still undecided),
        ``MIN_VISIT_S`` at least."""
        now = self.clock()
        left = max(1, getattr(self, "_remaining", 1))
        share = tuning.FIRST_VISIT_SHARE * (self._budget_end - now) / left
        return now + max(tuning.MIN_VISIT_S, share)

    def _family(self) -> family.Family:
        """The metrics the decision is corrected for, as far as known now: those with samples,
        and one for each test the first pass has not reached yet."""
        return self.samples.family().plus(self._unvisited - 1)

    def _bench_pairs(self, nodeid: str, message: dict[str, Any], sides: list[Side]) -> None:
        doing = f"benchmarking {nodeid}"
        key = paired.MetricKey(str(message.get("run", nodeid)),
                               f"call_ms:{message.get('stat', nodeid)}")
        target = self.samples.of(key, "time")
        deadline = self._visit_deadline()
        iterations, rounds = self._calibrate(sides, doing)
        by_name = {s.name: s for s in sides}
        warm_until = self.clock() + self.warmup_s
        while True:  # warm-up pairs, like real ones, thrown away
            self._pair(by_name, rounds, iterations, doing)
            if self.clock() >= warm_until:
                break
        start = len(target.base)
        need = self._visit_pairs(key)
        while True:
            got = self._pair(by_name, rounds, iterations, doing)
            self.samples.add(key, "time", got["base"], got["head"], self.sides.first,
                             self.sides.generation)
            self.pairs += 1
            done = len(target.base) - start
            if done >= tuning.MAX_VISIT_PAIRS or (done >= need and self.clock() >= deadline):
                break
            look = done >= need and (done - need) % tuning.CHECK_EVERY == 0
            # decided by the pairs of this start order on their own (a change is then shown too)
            part = self.samples.part(key, self.sides.first) if look else None
            if (part is not None
                    and decide.order_verdict(part, self.settings, self._family(),
                                             self.samples.generations_of(key, self.sides.first))
                    != "undecided"):
                break

    def _visit_pairs(self, key: paired.MetricKey) -> int:
        """The pairs a visit takes at least, its share of the budget spent or not, and its first
        look: ``min_pairs``, or the fewest that bound an interval where neither the session's
        corrected level nor unchanged's ``1 - 2 beta`` bounds one with fewer (fewer could never
        decide the metric: time spent for nothing); ``MAX_VISIT_PAIRS`` at most."""
        level = max(self._family().level(self.settings.alpha, key), 2 * self.settings.beta)
        fewest = max(signedrank.pairs_for_interval(level), self.settings.for_metric(key).min_pairs)
        return min(tuning.MAX_VISIT_PAIRS, fewest)

    def _bench_alone(self, nodeid: str, side: Side) -> None:
        doing = f"benchmarking {nodeid} (on the {side.name} side only)"
        iterations, rounds = self._calibrate([side], doing)
        for _ in range(1 + self.settings.min_pairs):  # a warm-up block, and what a pair would get
            self._block(side, rounds, iterations, doing)

