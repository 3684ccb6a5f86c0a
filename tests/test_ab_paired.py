"""Paired A/B statistics: the signed-rank interval, the decision rule, [compare], CompareResult.

Synthetic, seeded paired samples only; nothing here reads a clock.
"""

import dataclasses
import json
import math

import numpy as np
import pytest

from pytest_opperf.ab import family, paired, signedrank
from pytest_opperf.ab.paired import CompareResult, Decision, Paired, decide, rule
from pytest_opperf.ab.signedrank import (
    hodges_lehmann,
    pairs_for_interval,
    signed_rank_cdf,
    walsh_interval,
)
from pytest_opperf.comparison.gate import add_compare
from pytest_opperf.comparison.keys import keys as table_keys
from pytest_opperf.comparison.metrics import MetricKey
from pytest_opperf.comparison.thresholds import (
    CompareSettings,
    Override,
    ThresholdsError,
    load_thresholds,
    parse_compare,
    parse_thresholds,
)
from pytest_opperf.comparison.verdict import Verdict, Violation
from pytest_opperf.results import ResultsError

RUN = "suites/test_ops.py::test_op[conv2d]"


def pairs(kind, ratio, noise, n, seed=0, metric="call_ms:conv2d", run=RUN, scale=1.0, shift=0.0):
    """n pairs: each base sample is scale x a machine factor; its head the same factor x ratio
    (or + shift, for shares), each side with its own lognormal noise of sigma ``noise``."""
    rng = np.random.default_rng(seed)
    machine = rng.lognormal(0.0, 0.05, n)  # shared within a pair: cancels
    if kind == "share":
        base = scale + rng.normal(0.0, noise, n)
        head = scale + shift + rng.normal(0.0, noise, n)
    else:
        base = scale * machine * rng.lognormal(0.0, noise, n)
        head = scale * ratio * machine * rng.lognormal(0.0, noise, n)
    return Paired(MetricKey(run, metric), kind, list(base), list(head))


def with_aa(metric, others=149, n=None, seed=1000):
    """``metric`` among ``others`` A/A metrics, so the correction is a realistic session's."""
    n = n or metric.pairs
    return [metric] + [
        pairs("time", 1.0, 0.02, n, seed=seed + i, metric=f"call_ms:op{i}", run=f"run{i}")
        for i in range(others)
    ]


DEFAULTS = CompareSettings()


def one(samples, settings=DEFAULTS):
    return decide(samples, settings)[0]


# --- the signed-rank distribution and the interval -----------------------------------


def test_signed_rank_distribution_by_hand():
    # n = 3: subsets of {1, 2, 3} sum to 0, 1, 2, 3, 3, 4, 5, 6
    assert signed_rank_cdf(3) == (1 / 8, 2 / 8, 3 / 8, 5 / 8, 6 / 8, 7 / 8, 1.0)
    # n = 10: the textbook critical value of the two-sided 5 % test is T <= 8
    cdf = signed_rank_cdf(10)
    assert cdf[8] == 25 / 1024 and cdf[9] > 0.025
    assert signedrank._trim(10, 0.05) == 8


@pytest.mark.parametrize("n", [6, 13, 25, 40])
def test_signed_rank_distribution_matches_scipy(n):
    stats = pytest.importorskip("scipy.stats")
    cdf = signed_rank_cdf(n)
    for k in (0, n, n * (n + 1) // 8, n * (n + 1) // 4 - 1):
        # ranks 1..n, positive exactly for a subset summing to k: T+ = k
        chosen, rest = set(), k
        for r in range(n, 0, -1):
            if r <= rest:
                chosen.add(r)
                rest -= r
        x = [r if r in chosen else -r for r in range(1, n + 1)]
        p = stats.wilcoxon(x, alternative="less", method="exact").pvalue
        assert cdf[k] == pytest.approx(p, rel=1e-9), k


def test_interval_by_hand():
    # Walsh averages of 1, 2, 3: 1, 1.5, 2, 2, 2.5, 3; at a = 0.5, d = 1 (P(T+ <= 1) = 1/4)
    assert walsh_interval([3.0, 1.0, 2.0], 0.5) == (2.0, 1.5, 2.5)
    # 6 values: P(T+ <= 0) = 1/64 <= 0.025, so the 95 % interval is min..max of the Walsh averages
    assert walsh_interval([1.0, 2.0, 3.0, 4.0, 5.0, 9.0], 0.05) == (3.5, 1.0, 9.0)
    # 5 values: 1/32 > 0.025: no 95 % interval
    assert walsh_interval([1.0, 2.0, 3.0, 4.0, 5.0], 0.05)[1:] == (-math.inf, math.inf)


def test_normal_approximation_beyond_the_exact_range():
    # beyond EXACT_MAX_PAIRS the normal approximation picks the trim; at the boundary it is
    # within 1 % of the exact one and on the safe side (a slightly wider interval)
    exact = signedrank._trim.__wrapped__
    for n in (200, signedrank.EXACT_MAX_PAIRS):
        for a in (0.05, 0.05 / 150):
            d = exact(n, a)
            saved = signedrank.EXACT_MAX_PAIRS
            try:
                signedrank.EXACT_MAX_PAIRS = 0
                approx = exact(n, a)
            finally:
                signedrank.EXACT_MAX_PAIRS = saved
            assert 0.99 * d <= approx <= d, (n, a, d, approx)


def test_interval_covers_the_truth_at_its_level():
    rng = np.random.default_rng(7)
    a, trials = 0.1, 2000
    covered = 0
    for _ in range(trials):
        x = rng.standard_t(3, 20) + 0.3  # heavy tails, symmetric about 0.3
        _, lo, hi = walsh_interval(list(x), a)
        covered += lo <= 0.3 <= hi
    assert 0.88 <= covered / trials <= 0.95


# --- the acceptance cases ------------------------------------------------------------------


def test_ten_percent_slowdown_with_two_percent_noise_is_regressed():
    d = one(with_aa(pairs("time", 1.10, 0.02, 20)))
    assert d.verdict == "regressed"
    assert 1.07 < d.estimate < 1.13 and 1.0 < d.low < d.estimate < d.high
    assert "Bonferroni, 150 metrics" in d.statistic


def test_three_percent_slowdown_is_not_regressed_once_the_interval_is_narrow():
    d = one(with_aa(pairs("time", 1.03, 0.02, 200), n=200))
    assert d.verdict == "unchanged"
    assert d.low > 1.0  # the slowdown is real and shown...
    assert d.high < 1.05  # ...and shown to be smaller than what counts
    assert d.half_width < 0.01
    # with min_slowdown 0.02 the same 3 % counts
    assert (
        one(
            with_aa(pairs("time", 1.03, 0.02, 200), n=200), CompareSettings(min_slowdown=0.02)
        ).verdict
        == "regressed"
    )


def sessions(settings, count, metrics=150, n=20):
    """How many of ``count`` A/A sessions of ``metrics`` metrics (lognormal noise of 1-5 %
    per side, a different sigma per metric) have at least one regressed metric."""
    rng = np.random.default_rng(2024)
    alarms = 0
    for _ in range(count):
        sigma = rng.uniform(0.01, 0.05, (metrics, 1))
        machine = rng.lognormal(0.0, 0.1, (metrics, n))
        base = machine * rng.lognormal(0.0, 1.0, (metrics, n)) ** sigma
        head = machine * rng.lognormal(0.0, 1.0, (metrics, n)) ** sigma
        samples = [Paired(MetricKey(f"run{m}", f"call_ms:op{m}"), "time", b, h)
                   for m, (b, h) in enumerate(zip(base.tolist(), head.tolist(), strict=True))]
        alarms += any(d.verdict == "regressed" for d in decide(samples, settings))
    return alarms


def test_aa_sessions_raise_no_more_false_alarms_than_alpha():
    count = 1000
    # the rule as configured: no false alarm at all in 1000 sessions of 150 metrics
    assert sessions(CompareSettings(), count) == 0
    # no minimum slowdown, no floor: "regressed" is then just "significantly slower", and the
    # rate of sessions with any such metric is what the correction holds at alpha (one-sided:
    # about alpha/2); without the correction nearly every session of 150 metrics would have one
    strict = CompareSettings(min_slowdown=0.0, min_call_ms=0.0)
    rate = sessions(strict, count) / count
    assert 0.002 <= rate <= strict.alpha


@pytest.mark.parametrize("metrics", [1, 12, 239, 5000])
def test_the_fewest_pairs_for_an_interval_bound_it_and_one_fewer_does_not(metrics):
    a = 0.05 / metrics
    n = pairs_for_interval(a)
    agree = [0.01 * (i + 1) for i in range(n)]  # every pair says "slower": the tightest case
    assert math.isfinite(walsh_interval(agree, a)[1])
    assert walsh_interval(agree[:-1], a)[1:] == (-math.inf, math.inf)
    assert pairs_for_interval(0.05) == 6 and pairs_for_interval(0.05 / 239) == 14


def test_few_pairs_are_undecided():
    big = pairs("time", 1.5, 0.02, 5)
    d = one([big])
    assert d.verdict == "undecided" and "too few pairs (5 < min_pairs 10)" in d.statistic
    # min_pairs lowered: 5 pairs still give no interval at the corrected level of 150 metrics
    d = one(with_aa(pairs("time", 1.5, 0.02, 8)), CompareSettings(min_pairs=2))
    assert d.verdict == "undecided" and (d.low, d.high) == (0.0, math.inf)
    assert "too few pairs for a" in d.statistic
    # with one metric 8 pairs suffice for a 95 % interval
    assert one([pairs("time", 1.5, 0.02, 8)], CompareSettings(min_pairs=2)).verdict == "regressed"
    empty = one([Paired(MetricKey(RUN, "call_ms:conv2d"), "time")])
    assert empty.verdict == "undecided" and empty.pairs == 0 and "no pairs" in empty.statistic


def test_python_share_is_compared_as_a_difference():
    up = one(with_aa(pairs("share", 1.0, 0.005, 20, metric="python_share", scale=0.10, shift=0.02)))
    assert up.verdict == "regressed" and up.kind == "share"
    assert up.estimate == pytest.approx(0.02, abs=0.003) and up.low > 0.005 and up.limit == 0.01
    small = one(
        with_aa(
            pairs("share", 1.0, 0.002, 60, metric="python_share", scale=0.10, shift=0.004), n=60
        )
    )
    assert small.verdict == "unchanged" and small.high < 0.01
    # a 2-point increase of a 40 % share is 2 points, not 5 %: the difference is absolute
    big = one(
        with_aa(pairs("share", 1.0, 0.005, 20, metric="python_share", scale=0.40, shift=0.02))
    )
    assert big.verdict == "regressed"


def test_one_extra_op_per_step_is_a_count_regression():
    extra = Paired(MetricKey(RUN, "count:conv2d"), "count", [53.0] * 10, [54.0] * 10)
    fewer = Paired(MetricKey(RUN, "count:relu"), "count", [49.0] * 10, [48.0] * 10)
    same = Paired(MetricKey(RUN, "count:mul"), "count", [1.0] * 10, [1.0] * 10)
    d = decide([extra, fewer, same], CompareSettings())
    assert [x.verdict for x in d] == ["regressed", "regressed", "unchanged"]
    assert (d[0].base, d[0].head, d[0].estimate, d[0].low, d[0].high) == (53.0, 54.0, 1.0, 1.0, 1.0)
    assert d[1].estimate == -1.0 and d[0].statistic == "per-step count (exact)"
    # one step in ten disagreeing does not move the most common value
    noisy = Paired(MetricKey(RUN, "count:conv2d"), "count", [53.0] * 10, [53.0] * 9 + [54.0])
    n = one([noisy])
    assert n.verdict == "unchanged" and "most common" in n.statistic


def test_throughput_five_percent_lower_is_regressed():
    d = one(with_aa(pairs("rate", 0.95, 0.01, 30, metric="examples_per_sec", scale=18.0)))
    assert d.verdict == "regressed" and d.estimate < 1 and d.high < 1
    assert d.limit == pytest.approx(0.95)
    assert (
        one(with_aa(pairs("rate", 1.0, 0.01, 30, metric="examples_per_sec"))).verdict == "unchanged"
    )


def test_improvements_are_reported():
    d = one(with_aa(pairs("time", 0.85, 0.02, 20)))
    assert d.verdict == "improved" and d.high < 1
    # a shown but small speed-up is unchanged: it is not one that counts
    assert one(with_aa(pairs("time", 0.98, 0.005, 60), n=60)).verdict == "unchanged"


def test_floors_keep_microsecond_calls_unchanged():
    # a 2 us call 20 % slower: 0.4 us, below the 1 us floor -> counts only from +50 %
    tiny = one(with_aa(pairs("time", 1.20, 0.02, 60, scale=0.002), n=60))
    assert (
        tiny.verdict == "unchanged"
        and tiny.low > 1.1
        and tiny.limit == pytest.approx(1.5, rel=0.02)
    )
    # the same 20 % on a 1 ms call counts
    assert one(with_aa(pairs("time", 1.20, 0.02, 60, scale=1.0), n=60)).verdict == "regressed"
    # e2e stats use min_step_ms: a 0.04 ms/step softmax 50 % slower is 0.02 ms
    soft = pairs("time", 1.5, 0.02, 60, scale=0.04, metric="step_ms:softmax")
    assert one(with_aa(soft, n=60)).verdict == "unchanged"
    assert one(with_aa(soft, n=60), CompareSettings(min_step_ms=0.0)).verdict == "regressed"
    # no floor for metrics that are neither call_ms nor step_ms
    other = pairs("time", 1.2, 0.02, 60, scale=0.002, metric="avg_ms:conv2d")
    assert one(with_aa(other, n=60)).verdict == "regressed"


def test_step_share_floor_counts_a_stat_by_what_it_moves_the_step():
    # relu: 4 ms of a 400 ms step, 20 % slower: 0.8 ms, 0.2 % of the step
    relu = pairs("time", 1.20, 0.02, 60, scale=4.0, metric="step_ms:relu")
    relu.step_ms = 400.0
    assert one(with_aa(relu, n=60)).verdict == "regressed"  # no share floor by default
    share = CompareSettings(min_step_share=0.02)  # counts from 8 ms: 3x the stat
    d = one(with_aa(relu, n=60), share)
    assert d.verdict == "unchanged" and d.limit == pytest.approx(3.0, rel=0.05)
    assert "counts from 2 % of the 400 ms step" in d.statistic, d.statistic
    # the same 20 % on a stat of half the step moves it by 10 %: counts from 1.05x as before
    conv = pairs("time", 1.20, 0.02, 60, scale=200.0, metric="step_ms:conv2d")
    conv.step_ms = 400.0
    d = one(with_aa(conv, n=60), share)
    assert d.verdict == "regressed" and d.limit == pytest.approx(1.05)
    assert "counts from" not in d.statistic
    # a step not known (0), or a metric that is not an e2e stat: no share floor
    relu.step_ms = 0.0
    assert one(with_aa(relu, n=60), share).verdict == "regressed"
    call = pairs("time", 1.20, 0.02, 60, scale=4.0, metric="call_ms:relu")
    call.step_ms = 400.0
    assert one(with_aa(call, n=60), share).verdict == "regressed"
    # per metric, as an override
    relu.step_ms = 400.0
    only = CompareSettings(overrides=(Override(stat="relu", min_step_share=0.02),))
    assert one(with_aa(relu, n=60), only).verdict == "unchanged"


def test_the_rule_on_intervals():
    c = math.log(1.05)
    assert rule(0.03, 0.06, c) == "regressed"
    assert rule(0.02, 0.06, c) == "undecided"  # lo below c/2: significant but maybe small
    assert rule(-0.01, 0.06, c) == "undecided"
    assert rule(0.03, 0.04, c) == "unchanged"  # shown slower, by less than counts
    assert rule(-0.01, 0.04, c) == "unchanged"
    assert rule(-0.06, -0.03, c) == "improved"
    assert rule(-0.06, -0.02, c) == "unchanged"
    assert rule(-0.06, 0.06, c) == "undecided"
    # unchanged is ruled on the one-sided bound when given, the changes on the interval
    assert rule(-0.01, 0.06, c, 0.04) == "unchanged"
    assert rule(-0.01, 0.04, c, 0.05) == "undecided"
    assert rule(0.03, 0.06, c, 0.04) == "regressed"
    assert rule(-0.06, -0.03, c, -0.04) == "improved"


def test_unchanged_is_ruled_on_each_metrics_own_bound_whatever_the_family():
    # a metric at 1.00 with 7 % noise a side among 149 others: the corrected interval reaches the
    # threshold, the metric's own one-sided 99 % bound does not, and it is the same bound alone
    metric = pairs("time", 1.0, 0.07, 40, seed=8)
    among = one(with_aa(metric))
    alone = one([metric])
    assert among.high >= among.limit > among.beta_high, among
    assert among.verdict == "unchanged" and "one-sided 99% bound, not corrected" in among.statistic
    assert (alone.beta_low, alone.beta_high) == (among.beta_low, among.beta_high)
    assert alone.high - alone.low < among.high - among.low  # the correction still applies
    # with beta as small as the correction's level, the bound is the corrected interval's end
    strict = one(with_aa(metric), CompareSettings(beta=0.05 / 150 / 2))
    assert strict.verdict == "undecided" and strict.beta_high == pytest.approx(strict.high)


def test_a_metric_changed_by_what_counts_passes_as_unchanged_at_most_beta_of_the_time():
    # 300 metrics each exactly 5 % slower (c): each passes as unchanged with a chance of at most
    # beta = 1 %, however many there are; with the bound at the estimate half would
    changed = [pairs("time", 1.05, 0.03, 40, seed=s, metric=f"call_ms:op{s}", run=f"r{s}")
               for s in range(300)]
    ds = decide(changed, DEFAULTS)
    unchanged = sum(d.verdict == "unchanged" for d in ds)
    assert unchanged <= 8, unchanged  # binomial(300, 0.01): 3 expected, more than 8 at 0.4 %
    assert all(d.verdict != "unchanged" or d.beta_high < d.limit for d in ds)


def test_a_rates_bound_is_its_low_end():
    eps = pairs("rate", 1.0, 0.02, 40, seed=3, metric="examples_per_sec")
    d = one([eps])
    assert d.verdict == "unchanged" and d.bound == d.beta_low > d.limit
    assert d.beta_x()[1] == pytest.approx(paired.to_x("rate", d.beta_low))
    slower = one([pairs("rate", 0.955, 0.03, 40, seed=3, metric="examples_per_sec")])
    assert slower.verdict != "unchanged" and slower.beta_low <= slower.limit


def test_unusable_samples_are_undecided_with_the_reason():
    zero = Paired(MetricKey(RUN, "step_ms:fill_constant"), "time", [0.0] * 20, [0.01] * 20)
    nan = Paired(MetricKey(RUN, "python_share"), "share", [0.1] * 19 + [math.nan], [0.1] * 20)
    d = decide([zero, nan], CompareSettings())
    assert [x.verdict for x in d] == ["undecided", "undecided"]
    assert "at or below 0" in d[0].statistic and "non-finite" in d[1].statistic


def test_decide_is_deterministic_in_order_and_corrects_for_tested_metrics():
    samples = [
        pairs("time", 1.0, 0.02, n, seed=n, metric=f"call_ms:op{n}") for n in (12, 30, 12, 45)
    ]
    samples.append(Paired(MetricKey(RUN, "count:conv2d"), "count", [1.0] * 3, [1.0] * 3))
    first, again = decide(samples, CompareSettings()), decide(samples, CompareSettings())
    assert first == again
    assert [d.key.metric for d in first] == [p.key.metric for p in samples]
    assert all("Bonferroni, 4 metrics" in d.statistic for d in first[:4])
    assert "98.75% CI" in first[0].statistic


def test_the_headline_metrics_share_half_of_alpha_and_the_levels_add_up_to_alpha():
    rate = MetricKey("suites/test_resnet50.py::test_train[small]", "examples_per_sec")
    share = MetricKey(rate.run, "python_share")
    op = MetricKey(RUN, "call_ms:conv2d")
    assert family.headline(rate) and family.headline(share) and not family.headline(op)
    weighted = family.Family(headline=4, other=77)
    assert weighted.level(0.05, rate) == weighted.level(0.05, share) == pytest.approx(0.05 / 8)
    assert weighted.level(0.05, op) == pytest.approx(0.025 / 77)
    assert 4 * weighted.level(0.05, rate) + 77 * weighted.level(0.05, op) == pytest.approx(0.05)
    # one kind only: plain Bonferroni
    assert family.Family(0, 81).level(0.05, op) == family.Family(4, 0).level(0.05, rate) * 4 / 81
    assert weighted.plus(3) == family.Family(4, 80) and weighted.plus(-1) == weighted
    assert weighted.describe() == "Bonferroni, 81 metrics, weighted: 0.5 of alpha over 4 headline"
    # an e2e run's step (the step_ms of its executor stat) is a headline metric when named so
    step = MetricKey(rate.run, "step_ms:ExecutorRunTimer")
    assert not family.headline(step) and family.headline(step, {step})
    steps = family.Family.of([(rate, "rate"), (step, "time"), (op, "time")], [step])
    assert (steps.headline, steps.other) == (2, 1) and steps.plus(1).steps == {step}
    assert steps.level(0.05, step) == steps.level(0.05, rate) == pytest.approx(0.025 / 2)
    assert family.Family.of([(rate, "rate"), (step, "time"), (op, "time")]).headline == 1


def test_a_headline_metric_is_decided_at_its_weighted_level():
    # examples/sec 6 % lower among 80 A/A metrics: 60 pairs give it an interval at alpha/2 that
    # plain Bonferroni over the 81 metrics (alpha/81) would make wider
    base = pairs("rate", 1.0 / 1.06, 0.08, 60, seed=7, metric="examples_per_sec")
    samples = with_aa(base, others=80, n=60)
    weighted = decide(samples, CompareSettings())
    plain = decide(samples, CompareSettings(), family.Family(0, 81))
    assert "weighted: 0.5 of alpha over 1 headline" in weighted[0].statistic
    assert "97.5% CI" in weighted[0].statistic and "99.938% CI" in plain[0].statistic
    assert weighted[0].half_width < plain[0].half_width
    # the others pay with a level of alpha/2 over 80 instead of alpha over 81
    assert weighted[1].half_width > plain[1].half_width


def test_paired_validation():
    p = Paired(MetricKey(RUN, "call_ms:conv2d"), "time")
    p.add(1, 2)
    assert (p.base, p.head, p.pairs) == ([1.0], [2.0], 1)
    with pytest.raises(ValueError, match="kind must be one of"):
        Paired(MetricKey(RUN, "x"), "speed")
    with pytest.raises(ValueError, match="1 base and 2 head"):
        Paired(MetricKey(RUN, "x"), "time", [1.0], [1.0, 2.0])
    assert MetricKey(RUN, "call_ms:conv2d/GemmTimer").stat == "conv2d/GemmTimer"
    assert MetricKey(RUN, "python_share").stat is None


# --- [compare] ------------------------------------------------------------------------------


def test_compare_defaults_and_every_key():
    assert parse_thresholds({}).compare == CompareSettings()
    keys = table_keys(CompareSettings)
    assert set(keys) == {
        "min_slowdown",
        "max_python_share_increase",
        "alpha",
        "beta",
        "budget_s",
        "min_call_ms",
        "min_step_ms",
        "min_step_share",
        "min_pairs",
    }
    assert keys["min_slowdown"].default == 0.05 == CompareSettings().min_slowdown
    assert CompareSettings().max_python_share_increase == 0.01
    table = {
        "min_slowdown": 0.1,
        "max_python_share_increase": 0.02,
        "alpha": 0.01,
        "beta": 0.05,
        "budget_s": 300,
        "min_call_ms": 0.002,
        "min_step_ms": 0.1,
        "min_pairs": 20,
        "override": [{"run": "suites/test_ops.py::*", "stat": "momentum", "min_slowdown": 0.2}],
    }
    s = parse_thresholds({"compare": table}, "t.toml").compare
    assert (
        s.min_slowdown,
        s.max_python_share_increase,
        s.alpha,
        s.beta,
        s.budget_s,
        s.min_call_ms,
        s.min_step_ms,
        s.min_pairs,
    ) == (0.1, 0.02, 0.01, 0.05, 300.0, 0.002, 0.1, 20)
    assert s.overrides == (
        Override(run="suites/test_ops.py::*", stat="momentum", min_slowdown=0.2),
    )


def test_overrides_apply_by_glob_last_one_wins():
    s = CompareSettings(overrides=(Override(run="a*", min_slowdown=0.2, min_pairs=30),
                                   Override(run="ab", stat="conv*", min_slowdown=0.3)))
    assert s.for_metric(MetricKey("ab", "call_ms:conv2d")).min_slowdown == 0.3
    assert s.for_metric(MetricKey("ab", "call_ms:conv2d")).min_pairs == 30
    assert (
        s.for_metric(MetricKey("ab", "examples_per_sec")).min_slowdown == 0.2
    )  # no stat: not matched by stat
    assert s.for_metric(MetricKey("b", "call_ms:conv2d")).min_slowdown == 0.05
    noisy = pairs("time", 1.10, 0.02, 40, run="ab")
    assert one([noisy], s).verdict == "unchanged"  # 10 % is below the override's 30 %


@pytest.mark.parametrize(("key", "bad", "message"), [
    ("min_slowdown", 1.0, r"\[compare\] min_slowdown must be in \[0, 1\), got 1.0"),
    ("min_slowdown", -0.1, r"min_slowdown must be in \[0, 1\)"),
    ("max_python_share_increase", 1.5, r"max_python_share_increase must be in \[0, 1\]"),
    ("alpha", 0.0, r"alpha must be in \(0, 1\), got 0.0"),
    ("alpha", 1, r"alpha must be in \(0, 1\)"),
    ("beta", 0.5, r"beta must be in \(0, 0.5\), got 0.5"),
    ("beta", 0, r"beta must be in \(0, 0.5\)"),
    ("budget_s", 0, r"budget_s must be in \(0, inf\)"),
    ("min_call_ms", -1e-3, r"min_call_ms must be in \[0, inf\)"),
    ("min_step_ms", math.inf, r"min_step_ms must be a finite number"),
    ("min_pairs", 1, r"min_pairs must be in \[2, 1e\+06\], got 1"),
    ("min_pairs", 10.0, r"min_pairs must be an integer, got 10.0 \(number\)"),
    ("min_slowdown", "5%", r"min_slowdown must be a number, got '5%' \(string\)"),
    ("alpha", True, r"alpha must be a number, got True \(boolean\)"),
])
def test_compare_values_are_range_checked(key, bad, message):
    with pytest.raises(ThresholdsError, match=r"^t\.toml: .*" + message):
        parse_thresholds({"compare": {key: bad}}, "t.toml")
    if key not in ("alpha", "beta", "budget_s"):  # per-run values: the same check in an override
        with pytest.raises(
            ThresholdsError, match=r"\[\[compare.override\]\] #1 " + message.split("] ", 1)[-1]
        ):
            parse_thresholds({"compare": {"override": [{"run": "x", key: bad}]}}, "t.toml")


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            {"min_slowdow": 0.1},
            r"t.toml: unknown key 'min_slowdow' in \[compare\] \(known keys: min_slowdown, ",
        ),
        (
            {"override": [{"run": "x", "alpha": 0.1}]},
            r"unknown key 'alpha' in \[\[compare.override\]\] #1",
        ),
        (
            {"override": [{"run": "x"}]},
            r"\[\[compare.override\]\] #1 sets nothing \(give one of min_slowdown",
        ),
        (
            {"override": [{"stat": 3, "min_pairs": 4}]},
            r"#1 stat must be a string, got 3 \(integer\)",
        ),
        ({"override": {"run": "x"}}, r"compare.override must be an array of tables"),
        ({"override": ["x"]}, r"\[\[compare.override\]\] #1 must be a table, got string"),
    ],
)
def test_compare_table_errors(table, message):
    with pytest.raises(ThresholdsError, match=message):
        parse_thresholds({"compare": table}, "t.toml")
    with pytest.raises(ThresholdsError, match=r"\[compare\] must be a table, got integer"):
        parse_thresholds({"compare": 3}, "t.toml")


def test_compare_in_a_thresholds_file(tmp_path):
    path = tmp_path / "t.toml"
    path.write_text(
        "[compare]\nmin_slowdown = 0.1\n\n[[compare.override]]\nrun = 'suites/*'\nstat = 'relu'\n"
        "min_slowdown = 0.25\n"
    )
    t = load_thresholds(path)
    assert t.compare.min_slowdown == 0.1 and t.compare.overrides[0].stat == "relu"
    assert parse_compare({}, "x") == CompareSettings()


# --- CompareResult -------------------------------------------------------------------------


def result():
    samples = [pairs("time", 1.10, 0.02, 20, metric="call_ms:conv2d"),
               pairs("time", 1.00, 0.02, 20, seed=1, metric="call_ms:relu"),
               pairs("time", 0.85, 0.02, 20, seed=2, metric="call_ms:pool2d"),
               pairs("time", 1.30, 0.05, 4, seed=3, metric="call_ms:mul"),
               pairs("share", 1.0, 0.005, 20, seed=4, metric="python_share", scale=0.1, shift=0.02),
               Paired(MetricKey(RUN, "count:conv2d"), "count", [53.0] * 4, [54.0] * 4)]
    return CompareResult(
        "REV abc1234 (origin/main)",
        "working tree",
        decide(samples, CompareSettings()),
        added=["suites/test_new.py::test_x"],
        removed=[],
        pairs=104,
        elapsed_s=12.5,
        budget_exhausted=True,
        notes=["a note"],
    )


def test_summary_line():
    r = result()
    assert [d.verdict for d in r.decisions] == [
        "regressed",
        "unchanged",
        "improved",
        "undecided",
        "regressed",
        "regressed",
    ]
    mean = math.exp(sum(math.log(d.estimate) for d in r.decisions[:4]) / 4)
    assert (
        r.summary()
        == f"3 regressed, 1 unchanged, 1 undecided, 1 improved; geometric mean head/base {mean:.3f}"
    )
    assert (
        CompareResult("a", "b", []).summary() == "0 regressed, 0 unchanged, 0 undecided, 0 improved"
    )


def test_to_dict_is_strict_json_and_round_trips():
    r = result()
    data = json.loads(json.dumps(r.to_dict(), allow_nan=False))
    assert data["verdicts"] == {"regressed": 3, "undecided": 1, "improved": 1, "unchanged": 1}
    assert data["summary"] == r.summary() and data["budget_exhausted"] is True
    undecided = data["decisions"][3]
    assert (undecided["low"], undecided["high"], undecided["verdict"]) == (0.0, None, "undecided")
    back = CompareResult.from_dict(data, "r.json")
    assert back == r
    empty = Decision(
        MetricKey(RUN, "call_ms:x"),
        "time",
        "undecided",
        math.nan,
        math.nan,
        math.nan,
        0.0,
        math.inf,
        0,
        "no interval: no pairs",
    )
    again = CompareResult.from_dict(
        json.loads(json.dumps(CompareResult("a", "b", [empty]).to_dict()))
    )
    assert math.isnan(again.decisions[0].base) and again.decisions[0].high == math.inf
    # a file of an older writer: no bounds, and the corrected interval stands in for them
    decided = data["decisions"][1]
    assert decided["verdict"] == "unchanged" and decided["beta_high"] < decided["high"]
    old = json.loads(json.dumps(data))
    for d in old["decisions"]:
        d.pop("beta_low", None)
        d.pop("beta_high", None)
    older = CompareResult.from_dict(old, "old.json").decisions[1]
    assert math.isnan(older.beta_high) and older.beta_x() == older.in_x()[1:3]
    assert "beta_high" not in older.to_dict()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda d: d.pop("head"),
            r"r.json: malformed compare object: compare.head is missing or not a string",
        ),
        (lambda d: d.update(pairs="3"), r"compare.pairs is missing or not an integer"),
        (
            lambda d: d["decisions"][0].update(verdict="bad"),
            r"compare.decisions\[0\].verdict must be one of",
        ),
        (
            lambda d: d["decisions"][1].update(low="x"),
            r"compare.decisions\[1\].low is not a number or null",
        ),
        (lambda d: d.update(added=[1]), r"compare.added is missing or not a list of strings"),
        (
            lambda d: d["decisions"][1].update(beta_high="x"),
            r"compare.decisions\[1\].beta_high is not a number or null",
        ),
        (
            lambda d: d["decisions"][1].update(low=1.5, high=1.2),
            r"compare.decisions\[1\].low must not be above compare.decisions\[1\].high, "
            r"got 1.5 > 1.2",
        ),
        (
            lambda d: d["decisions"][1].update(beta_low=2.0, beta_high=1.0),
            r"compare.decisions\[1\].beta_low must not be above",
        ),
        (
            lambda d: d["decisions"][0].update(inconclusive="yes"),
            r"compare.decisions\[0\].inconclusive is not a boolean",
        ),
        (
            lambda d: d["decisions"][0].update(inconclusive=True),
            r"compare.decisions\[0\].inconclusive is true for a regressed metric",
        ),
    ],
)
def test_from_dict_names_what_is_wrong(change, message):
    data = result().to_dict()
    change(data)
    with pytest.raises(ResultsError, match=message):
        CompareResult.from_dict(data, "r.json")


def test_violations_one_per_regressed_metric_and_one_per_inconclusive_unless_warn():
    r = result()
    (mul,) = [d for d in r.decisions if d.key.metric == "call_ms:mul"]
    assert mul.verdict == "undecided" and mul.past_threshold  # 1.30x on 4 pairs: too few
    r.decisions[r.decisions.index(mul)] = dataclasses.replace(mul, inconclusive=True)
    regressed = [(RUN, "call_ms:conv2d"), (RUN, "python_share"), (RUN, "count:conv2d")]
    verdict = Verdict()
    add_compare(verdict, r, undecided="warn")
    assert [(x.run, x.metric) for x in verdict.violations] == regressed
    verdict = Verdict()
    add_compare(verdict, r)
    assert [(x.run, x.metric) for x in verdict.violations] == [*regressed, (RUN, "call_ms:mul")]
    assert "A/B inconclusive after 4 pair(s): head/base 1.3" in verdict.violations[-1].message
    assert "(its estimate is past the threshold, its interval" in verdict.violations[-1].message
    assert verdict.inconclusive == 1 and verdict.undecided_metrics[0] == f"{RUN}::call_ms:mul"
    # inconclusive with its estimate short of the threshold: the message says what showed it
    short = dataclasses.replace(mul, estimate=1.03, low=1.004, high=1.07, inconclusive=True)
    verdict = Verdict()
    add_compare(verdict, dataclasses.replace(r, decisions=[short]))
    (v,) = verdict.violations
    assert "(its interval shows a slowdown and reaches the threshold, its interval too wide" in (
        v.message)
    json.dumps(verdict.to_dict(), allow_nan=False)
    empty = paired.Paired(paired.MetricKey(RUN, "call_ms:add"), "time")  # no pairs: no numbers
    r.decisions.append(paired.decide([empty], paired.CompareSettings())[0])
    verdict = Verdict()
    add_compare(verdict, r, undecided="fail")
    assert [x.metric for x in verdict.violations][3:] == ["call_ms:mul", "call_ms:add"]
    assert "(--opperf-compare-undecided=fail)" in verdict.violations[-1].message
    json.dumps(verdict.to_dict(), allow_nan=False)
    v = verdict.violations
    assert all(isinstance(x, Violation) for x in v)
    conv = r.decisions[0]
    assert (v[0].value, v[0].baseline, v[0].statistic) == (conv.head, conv.base, conv.statistic)
    assert v[0].limit == pytest.approx(conv.base * 1.05)
    assert v[0].message == (
        f"conv2d median time per call {conv.head:.4g} ms vs base {conv.base:.4g} ms: "
        f"head/base {conv.estimate:.3f} [{conv.low:.3f}, {conv.high:.3f}] (counts from 1.050)"
    )
    assert v[1].message.startswith("Python share of the steps") and "points [" in v[1].message
    assert v[2].message == "conv2d runs 54 times per step, base 53 (A/B, exact)"
    assert v[2].limit == 53.0


def test_ci_thresholds_compare_table():
    from pathlib import Path

    s = load_thresholds(Path(__file__).parent.parent / "ci" / "thresholds.toml").compare
    assert (s.min_slowdown, s.max_python_share_increase, s.alpha, s.beta) == (0.05, 0.01, 0.05,
                                                                                0.01)
    assert (s.min_call_ms, s.min_step_ms, s.min_pairs, s.budget_s) == (0.002, 0.1, 10, 480.0)
    assert s.min_step_share == 0.025


def sequential_sessions(ratio, count, metrics=150, noise=0.02, start=10, block=5, most=100):
    """The controller's loop in miniature: every metric starts with ``start`` pairs; after
    each look the undecided ones get ``block`` more, up to ``most``. Metric 0 has the true
    ratio ``ratio``, the others are A/A. Returns metric 0's verdicts and how many sessions
    had a false alarm among the others."""
    verdicts, false_alarms = [], 0
    for seed in range(count):
        rng = np.random.default_rng(seed)
        base = rng.lognormal(0.0, noise, (metrics, most))
        head = rng.lognormal(0.0, noise, (metrics, most))
        head[0] *= ratio
        n = [start] * metrics
        while True:
            samples = [
                Paired(
                    MetricKey(f"run{m}", f"call_ms:op{m}"),
                    "time",
                    base[m, : n[m]].tolist(),
                    head[m, : n[m]].tolist(),
                )
                for m in range(metrics)
            ]
            ds = decide(samples, CompareSettings())
            grow = [m for m, d in enumerate(ds) if d.verdict == "undecided" and n[m] < most]
            if not grow:
                break
            for m in grow:
                n[m] += block
        verdicts.append(ds[0].verdict)
        false_alarms += any(d.verdict == "regressed" for d in ds[1:])
    return verdicts, false_alarms


def test_the_sequential_loop_decides_and_keeps_its_error_rates():
    # 2 % noise per side; "lo > 0" would call the 3 % slowdown regressed in most sessions
    aa, alarms = sequential_sessions(1.0, 40)
    assert aa.count("unchanged") == 40 and alarms == 0
    three, alarms = sequential_sessions(1.03, 40)
    assert three.count("regressed") <= 6 and three.count("unchanged") >= 34 and alarms == 0
    five, _ = sequential_sessions(1.05, 40)
    assert five.count("regressed") >= 38
    ten, _ = sequential_sessions(1.10, 20)
    assert ten.count("regressed") == 20


def test_hodges_lehmann_by_hand():
    # the Walsh averages of (0, 0, 0, 0.05, 0.06): six 0s, three 0.025s, three 0.03s, 0.05,
    # 0.055 and 0.06; their median, the 8th of 15, is 0.025 (the median of the values is 0)
    assert hodges_lehmann([0.0, 0.0, 0.0, 0.05, 0.06]) == pytest.approx(0.025)
    assert hodges_lehmann([3.0, 1.0]) == 2.0  # the Walsh averages 1, 2, 3
    with pytest.raises(ValueError, match="at least one value"):
        hodges_lehmann([])
