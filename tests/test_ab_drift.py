"""A machine whose speed drifts during the session: the paired A/B is not fooled, a
sequential comparison (all base samples, then all head samples) is.

The machine is a fake clock: a sample takes the true cost x the machine's speed
factor at that moment x 1 % lognormal noise, and the clock advances by it.
Whole sessions on the CI machine class drift by about +-10 %; here the factor
moves by 20 % over the session, slowly (about 0.2 % from one pair to the next).
"""

import math

import numpy as np
import pytest

from pytest_opperf.ab.paired import Paired, decide
from pytest_opperf.comparison.metrics import MetricKey
from pytest_opperf.comparison.regression import compare_slower
from pytest_opperf.comparison.thresholds import CompareSettings, Regression

PAIRS = 60
COST_MS = 2.0
SESSION_MS = 2 * PAIRS * COST_MS * 1.1  # about how long the session's samples take


class DriftingMachine:
    """A fake clock whose speed factor follows ``drift(fraction of the session elapsed)``."""

    def __init__(self, drift, seed):
        self.drift = drift
        self.rng = np.random.default_rng(seed)
        self.now_ms = 0.0

    def sample(self, cost_ms: float) -> float:
        ms = cost_ms * self.drift(self.now_ms / SESSION_MS) * self.rng.lognormal(0.0, 0.01)
        self.now_ms += ms
        return ms


def slower_over_time(f):  # a neighbour's load builds up, the CPU throttles
    return 1.0 + 0.2 * f


def faster_over_time(f):  # a neighbour's job finishes
    return 1.2 - 0.2 * f


def paired_ab(machine, head_cost):
    """Base and head interleaved pair by pair, in a random order within each pair."""
    p = Paired(MetricKey("suites/test_ops.py::test_op[conv2d]", "call_ms:conv2d"), "time")
    for _ in range(PAIRS):
        if machine.rng.random() < 0.5:
            b = machine.sample(COST_MS)
            h = machine.sample(head_cost)
        else:
            h = machine.sample(head_cost)
            b = machine.sample(COST_MS)
        p.add(b, h)
    return decide([p], CompareSettings())[0]


def sequential(machine, head_cost):
    """All base samples first, then all head samples, through the stored-baseline rule."""
    base = [machine.sample(COST_MS) for _ in range(PAIRS)]
    head = [machine.sample(head_cost) for _ in range(PAIRS)]
    return compare_slower(base, head, Regression(max_slowdown=0.05), floor=0.0)


@pytest.mark.parametrize("seed", range(10))
def test_aa_on_a_machine_getting_slower(seed):
    ab = paired_ab(DriftingMachine(slower_over_time, seed), COST_MS)
    assert ab.verdict == "unchanged" and ab.high < 1.05 and abs(ab.estimate - 1) < 0.01
    seq = sequential(DriftingMachine(slower_over_time, seed), COST_MS)
    assert seq.regressed  # a false regression: the machine drifted, not the code
    assert seq.new / seq.base > 1.05


@pytest.mark.parametrize("seed", range(10))
def test_ten_percent_slower_on_a_machine_getting_faster(seed):
    ab = paired_ab(DriftingMachine(faster_over_time, seed), COST_MS * 1.10)
    assert ab.verdict == "regressed" and abs(ab.estimate - 1.10) < 0.01
    seq = sequential(DriftingMachine(faster_over_time, seed), COST_MS * 1.10)
    assert not seq.regressed  # a missed regression: the drift ate it
    assert math.isclose(seq.new / seq.base, 1.0, abs_tol=0.05)


def test_the_paired_interval_holds_the_true_ratio_under_either_drift():
    for drift in (slower_over_time, faster_over_time):
        for ratio in (1.0, 1.1):
            d = paired_ab(DriftingMachine(drift, 99), COST_MS * ratio)
            assert d.low <= ratio <= d.high, (drift.__name__, ratio, d)
            assert d.half_width < 0.01  # drift cancels in the pair: only the 1 % noise is left
