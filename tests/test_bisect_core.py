"""The bisection's search (pytest_opperf.bisect.core) with fake A/B oracles: no git, no process."""

from __future__ import annotations

import math
import random

import pytest

from pytest_opperf.bisect.core import Estimate, StepComparison, bisect, three_way

C = math.log(1.05)  # what counts: a 5 % slowdown
METRIC = "suites/test_ops.py::test_op[conv2d] call_ms:conv2d"


def _verdict(lo: float, hi: float) -> str:
    if lo > C / 2 and hi >= C:
        return "different"
    return "same" if hi < C else "unknown"


class FakeOracle:
    """Each commit's true level of each metric (x units: log of the time); an answer is the
    difference of two levels, with ``sigma`` of noise per pair and ``pairs`` pairs per session
    (the interval: +-3.5 sigma/sqrt(n), about the A/B's corrected level), pooled when asked
    again. ``broken``: commits that cannot be measured."""

    def __init__(self, levels: dict[str, list[float]], sigma: float = 0.0, pairs: int = 12,
                 seed: int = 0, broken: dict[int, str] | None = None) -> None:
        self.levels = levels
        self.sigma = sigma
        self.pairs = pairs
        self.rng = random.Random(seed)
        self.broken = broken or {}
        self.calls: list[tuple[int, int, bool]] = []

    def __call__(self, a, b, so_far, focus):
        self.calls.append((a, b, so_far is not None))
        bad = {c: self.broken[c] for c in (a, b) if c in self.broken}
        if bad:
            return StepComparison(a, b, broken=bad, sessions=1)
        state = dict(so_far.state) if so_far is not None else {}
        metrics = {}
        for name, level in self.levels.items():
            if focus is not None and name not in focus:
                continue
            true = level[b] - level[a]
            xs = list(state.get(name, [])) + [true + self.rng.gauss(0, self.sigma)
                                              for _ in range(self.pairs)]
            state[name] = xs
            mean = sum(xs) / len(xs)
            half = 3.5 * self.sigma / math.sqrt(len(xs)) + 1e-9
            lo, hi = mean - half, mean + half
            metrics[name] = Estimate(_verdict(lo, hi), mean, lo, hi, math.exp(mean),
                                     math.exp(lo), math.exp(hi), len(xs))
        pairs = (so_far.pairs if so_far is not None else 0) + self.pairs
        return StepComparison(a, b, metrics, pairs=pairs, sessions=1, state=state)


def step_at(n: int, culprit: int, size: float) -> list[float]:
    return [0.0 if i < culprit else math.log(size) for i in range(n)]


@pytest.mark.parametrize("culprit", range(1, 17))
def test_a_deterministic_regression_is_found_and_verified_within_log2_n_plus_3_steps(culprit):
    n = 17  # GOOD and 16 commits after it
    oracle = FakeOracle({METRIC: step_at(n, culprit, 1.10)})
    out = bisect(n, oracle)
    assert out.status == "culprit", out.message
    assert [c.commit for c in out.culprits] == [culprit]
    assert out.culprits[0].verified and out.culprits[0].parent == culprit - 1
    assert len(out.steps) <= math.log2(16) + 3
    assert [s.kind for s in out.steps][0] == "confirm" and out.steps[-1].kind in ("verify", "rest")
    assert out.metrics == [METRIC]
    # the verification is a fresh comparison: new pairs, not pooled with the bisection's
    verify = next(i for i, s in enumerate(out.steps) if s.kind == "verify")
    assert oracle.calls[verify][2] is False


@pytest.mark.parametrize("seed", range(20))
def test_a_noisy_ten_percent_regression_is_found_within_log2_n_plus_3_steps(seed):
    n = 17
    culprit = random.Random(seed).randrange(1, n)
    oracle = FakeOracle({METRIC: step_at(n, culprit, 1.10), "other": [0.0] * n},
                        sigma=0.06, seed=seed)
    out = bisect(n, oracle)
    assert out.status == "culprit", out.message
    assert [c.commit for c in out.culprits] == [culprit]
    assert len(out.steps) <= math.log2(16) + 3
    assert out.metrics == [METRIC]  # the metric that did not move is no part of the search
    assert out.sessions >= len(out.steps) and out.pairs == 12 * out.sessions


@pytest.mark.parametrize("seed", range(10))
def test_a_3x_regression_spread_over_two_adjacent_commits_names_both_with_their_shares(seed):
    n = 17
    first = 3 + seed
    levels = [0.0 if i < first else math.log(3) / 2 if i == first else math.log(3)
              for i in range(n)]
    out = bisect(n, FakeOracle({METRIC: levels}, sigma=0.05, seed=seed))
    assert out.status == "culprit", out.message
    assert sorted(c.commit for c in out.culprits) == [first, first + 1]
    for c in out.culprits:
        assert c.share[METRIC] == pytest.approx(0.5, abs=0.1)


@pytest.mark.parametrize("seed", range(30))
def test_noise_never_names_a_culprit(seed):
    n = 17
    out = bisect(n, FakeOracle({METRIC: [0.0] * n, "b": [0.0] * n}, sigma=0.08, seed=seed))
    assert out.status == "not reproduced"
    assert not out.culprits and len(out.steps) == 1  # the confirmation only
    assert out.metrics == []


def test_not_reproduced_says_so():
    out = bisect(9, FakeOracle({METRIC: [0.0] * 9}, sigma=0.01))
    assert out.status == "not reproduced"
    assert out.message == "not reproduced: the good and the bad commit measure the same"


def test_not_reproduced_says_which_metric_stayed_undecided():
    # a 4 % slowdown with noise: never shown regressed, never shown below 5 % in 2 sessions
    levels = {METRIC: [0.0, math.log(1.04)], "quiet": [0.0, 0.0]}
    out = bisect(2, FakeOracle(levels, sigma=0.3, pairs=10, seed=2), max_attempts=2)
    assert out.status == "not reproduced" and not out.culprits
    assert out.message.startswith("not reproduced: no metric was shown to regress; ")
    assert f"2 stayed undecided after 2 session(s) (the most: {METRIC} " in out.message


def test_a_budget_spent_before_the_confirmation_is_undecided():
    out = bisect(9, FakeOracle({METRIC: step_at(9, 3, 1.5)}), time_left=lambda: 0.0)
    assert out.status == "undecided" and out.steps == []
    assert out.message == "undecided: the budget is spent before the confirmation"


def test_an_improvement_is_not_the_regression():
    out = bisect(9, FakeOracle({METRIC: step_at(9, 4, 0.8)}, sigma=0.01))
    assert out.status == "not reproduced" and not out.culprits


def test_a_broken_commit_in_the_range_is_skipped_and_said():
    n = 17
    broken = {8: "it cannot collect the tests (ImportError)"}
    out = bisect(n, FakeOracle({METRIC: step_at(n, 11, 1.5)}, broken=broken))
    assert out.status == "culprit", out.message
    assert [c.commit for c in out.culprits] == [11]
    assert out.skipped == broken


def test_a_broken_parent_of_the_culprit_leaves_a_range_not_a_culprit():
    n = 9
    out = bisect(n, FakeOracle({METRIC: step_at(n, 5, 1.5)}, broken={4: "its tests fail"}))
    assert out.status == "unverified" and not out.culprits
    assert [(r.lo, r.hi) for r in out.ranges] == [(3, 5)]
    assert "1 commit(s) between could not be measured" in out.message
    assert out.skipped == {4: "its tests fail"}


def test_a_broken_good_or_bad_commit_cannot_be_compared():
    out = bisect(5, FakeOracle({METRIC: [0.0] * 5}, broken={4: "its tests fail"}))
    assert out.status == "broken" and "the bad commit (its tests fail)" in out.message


def test_an_undecided_comparison_gets_more_pairs_pooled_up_to_max_attempts():
    n = 3
    # 6 % slowdown with noise: undecided with few pairs, decided with more
    oracle = FakeOracle({METRIC: [0.0, 0.0, math.log(1.12)]}, sigma=0.2, pairs=10, seed=1)
    out = bisect(n, oracle, max_attempts=6)
    confirm = out.steps[0]
    assert confirm.attempts > 1 and confirm.comparison.metrics[METRIC].pairs == 10 * (
        confirm.attempts)
    assert [c[2] for c in oracle.calls[:confirm.attempts]] == [False] + [True] * (
        confirm.attempts - 1)
    assert out.status == "culprit"


def test_an_undecided_step_ends_as_a_range_after_max_attempts():
    n = 5
    levels = [0.0, 0.0, math.log(1.10), math.log(1.10), math.log(1.10)]
    oracle = FakeOracle({METRIC: levels}, sigma=0.5, pairs=10, seed=3)
    out = bisect(n, oracle, max_attempts=1)
    assert out.status in ("not reproduced", "unverified", "culprit")
    assert all(s.attempts == 1 for s in out.steps)


def test_the_budget_ends_the_bisection_with_what_it_has():
    n = 17
    calls = []

    def left():
        return 100.0 - 40.0 * len(calls)

    fake = FakeOracle({METRIC: step_at(n, 9, 1.5)})

    def oracle(a, b, so_far, focus):
        calls.append((a, b))
        return fake(a, b, so_far, focus)

    out = bisect(n, oracle, time_left=left)
    assert len(calls) == 3 and out.status == "unverified"
    assert "the budget is spent" in out.message


def test_levels_chain_each_tested_commit_against_good():
    n = 17
    out = bisect(n, FakeOracle({METRIC: step_at(n, 6, 1.25)}))
    levels = out.levels[METRIC]
    assert levels[0] == 0.0
    for i, x in levels.items():
        assert x == pytest.approx(0.0 if i < 6 else math.log(1.25))


def test_three_way_over_the_focus():
    same = Estimate("same", 0, -0.01, 0.01, 1, 0.99, 1.01, 10)
    diff = Estimate("different", 0.1, 0.05, 0.15, 1.1, 1.05, 1.16, 10)
    assert three_way({"a": same, "b": diff}, None) == "different"
    assert three_way({"a": same, "b": diff}, frozenset({"a"})) == "same"
    assert three_way({"a": same}, frozenset({"a", "missing"})) == "unknown"
    assert three_way({}, None) == "unknown"


class OffsetConfirmation(FakeOracle):
    """Intervals of a fixed half-width; the confirmation reads ``offset`` above the true step,
    within its noise (the offset under the two half-widths added in quadrature)."""

    def __init__(self, levels, half: float, offset: float) -> None:
        super().__init__(levels)
        self.half = half
        self.offset = offset

    def __call__(self, a, b, so_far, focus):
        self.calls.append((a, b, so_far is not None))
        n = len(next(iter(self.levels.values())))
        metrics = {}
        for name, level in self.levels.items():
            x = level[b] - level[a] + (self.offset if (a, b) == (0, n - 1) else 0.0)
            lo, hi = x - self.half, x + self.half
            metrics[name] = Estimate(_verdict(lo, hi), x, lo, hi, math.exp(x), math.exp(lo),
                                     math.exp(hi), self.pairs)
        return StepComparison(a, b, metrics, pairs=self.pairs, sessions=1)


def test_a_confirmation_within_noise_above_the_culprit_compares_no_rest_of_the_range():
    n, culprit = 41, 34
    levels = {METRIC: step_at(n, culprit, 1.5)}
    # the culprit's upper bound is under the confirmation's estimate, yet the difference (0.02)
    # is within the two intervals' noise (0.015 each: 0.021 together)
    out = bisect(n, OffsetConfirmation(levels, half=0.015, offset=0.02))
    assert [c.commit for c in out.culprits] == [culprit] and out.culprits[0].verified
    assert "rest" not in [s.kind for s in out.steps]
    assert len(out.steps) <= math.log2(n - 1) + 3
    # a difference beyond that noise is part of the step elsewhere: the rest is compared
    out = bisect(n, OffsetConfirmation(levels, half=0.015, offset=0.03))
    assert [s.kind for s in out.steps][-1] == "rest"
