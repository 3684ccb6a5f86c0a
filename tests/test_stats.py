"""pytest_opperf.core.stats against hand-computed values and scipy.stats (mannwhitneyu, t)."""

import math
import random

import pytest
from scipy.stats import mannwhitneyu

from pytest_opperf.core.stats import (
    Samples,
    _u_counts,
    mann_whitney_u,
    median,
    most_common,
    normal_sf,
    student_t_quantile,
)


def test_median_odd_and_even():
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 3.0, 2.0]) == 2.5
    with pytest.raises(ValueError):
        median([])


def test_samples_summary_hand_computed():
    s = Samples([10.0, 2.0, 3.0, 4.0, 1.0])
    assert (s.n, s.min, s.max, s.median) == (5, 1.0, 10.0, 3.0)
    assert Samples([4.0, 1.0, 3.0, 2.0]).median == 2.5  # between the two middle values
    assert Samples([5.0]).median == 5.0
    with pytest.raises(ValueError):
        Samples([])


def test_most_common_and_agreement():
    assert most_common([2, 2, 2]) == (2, True)
    assert most_common([2, 3, 2, 2]) == (2, False)
    assert most_common([3, 1, 3, 1]) == (1, False)  # ties go to the smallest


def test_normal_sf_values():
    assert normal_sf(0.0) == pytest.approx(0.5)
    assert normal_sf(1.959963984540054) == pytest.approx(0.025, rel=1e-9)
    assert normal_sf(10.0) == pytest.approx(7.619853024160527e-24, rel=1e-9)


def test_u_distribution_counts_by_hand():
    # m = n = 2: the 6 orderings give U = 0, 1, 2, 2, 3, 4
    assert _u_counts(2, 2) == [1, 1, 2, 1, 1]
    assert sum(_u_counts(3, 7)) == math.comb(10, 3)
    assert _u_counts(3, 7) == _u_counts(7, 3)


def test_u_and_exact_p_by_hand():
    # x entirely above y (n=3 each): U = 9, p = 1 / C(6, 3)
    r = mann_whitney_u([4.0, 5.0, 6.0], [1.0, 2.0, 3.0])
    assert (r.u, r.method) == (9.0, "exact")
    assert r.p_value == pytest.approx(1 / 20)
    assert mann_whitney_u([1.0, 2.0, 3.0], [4.0, 5.0, 6.0]).p_value == pytest.approx(1.0)


def test_all_ties_give_no_evidence():
    r = mann_whitney_u([1.0] * 10, [1.0] * 10)
    assert (r.u, r.p_value, r.method) == (50.0, 1.0, "asymptotic")


@pytest.mark.parametrize("seed", range(40))
def test_matches_scipy(seed):
    rng = random.Random(seed)
    n1, n2 = rng.randint(1, 30), rng.randint(1, 30)
    digits = rng.choice([0, 1, 6])  # 0 and 1 give many ties
    shift = rng.choice([0.0, 0.5, 2.0])
    x = [round(rng.gauss(shift, 1), digits) for _ in range(n1)]
    y = [round(rng.gauss(0, 1), digits) for _ in range(n2)]
    for method in ("auto", "asymptotic"):
        ours = mann_whitney_u(x, y, method=method)
        ref = mannwhitneyu(x, y, alternative="greater", method=method)
        assert ours.u == pytest.approx(ref.statistic)
        assert ours.p_value == pytest.approx(ref.pvalue, rel=1e-9, abs=1e-15)
    if len(set(x + y)) == n1 + n2:
        ours = mann_whitney_u(x, y, method="exact")
        ref = mannwhitneyu(x, y, alternative="greater", method="exact")
        assert ours.p_value == pytest.approx(ref.pvalue, rel=1e-9, abs=1e-15)


def test_without_continuity_matches_scipy():
    x, y = (
        [1.2, 3.4, 2.2, 5.0, 4.4, 0.3, 2.9, 3.3, 7.1],
        [0.1, 1.0, 2.0, 1.5, 0.7, 3.0, 0.2, 2.5, 1.9],
    )
    ours = mann_whitney_u(x, y, method="asymptotic", continuity=False)
    ref = mannwhitneyu(x, y, alternative="greater", method="asymptotic", use_continuity=False)
    assert ours.p_value == pytest.approx(ref.pvalue, rel=1e-12)


def test_bad_input():
    with pytest.raises(ValueError, match="non-empty"):
        mann_whitney_u([], [1.0])
    with pytest.raises(ValueError, match="ties"):
        mann_whitney_u([1.0, 2.0], [2.0, 3.0], method="exact")
    with pytest.raises(ValueError, match="method"):
        mann_whitney_u([1.0], [2.0], method="bogus")


@pytest.mark.parametrize("df", [1, 2, 3, 4, 5, 8, 13, 30, 101])
@pytest.mark.parametrize("p", [0.5, 0.9, 0.975, 0.99975])
def test_student_t_quantile_matches_scipy(p, df):
    from scipy.stats import t

    assert student_t_quantile(p, df) == pytest.approx(t.ppf(p, df), rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("p, df", [(0.4, 3), (1.0, 3), (0.975, 0)])
def test_student_t_quantile_refuses_what_it_cannot_give(p, df):
    with pytest.raises(ValueError, match="student_t_quantile needs"):
        student_t_quantile(p, df)
