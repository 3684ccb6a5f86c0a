"""What each test of an A/B session cost: pairs and seconds per test, from the controller's clock to
the JSON and the A/B section."""

from __future__ import annotations

import json
import math
from collections import Counter

import pytest

from pytest_opperf.ab import render, tuning
from pytest_opperf.ab.cost import Cost, choose, costs, node_of
from pytest_opperf.ab.paired import CompareResult, Decision
from pytest_opperf.comparison.metrics import MetricKey
from pytest_opperf.results import ResultsError
from tests.test_ab_controller import AA_UNDECIDED, controller, run_session


def _decision(run: str, metric: str, pairs: int) -> Decision:
    return Decision(MetricKey(run, metric), "time", "unchanged", 1.0, 1.0, 1.0, 0.99, 1.01, pairs,
                    "", 1.05)


def test_a_metrics_seconds_are_its_tests_and_the_costliest_test_comes_first():
    decisions = [_decision("t::e2e", "step_ms:relu", 27), _decision("t::e2e", "count:relu", 9),
                 _decision("t::e2e#eval", "step_ms:relu", 12),  # an extra window: the same test
                 _decision("t::op", "call_ms:op", 40), _decision("t::cheap", "call_ms:op", 16)]
    rows = costs(decisions, {"t::e2e": 96.0, "t::op": 12.5, "t::cheap": 1.0, "t::alone": 3.0},
                 {"t::e2e": 9, "t::op": 2, "t::cheap": 1, "t::alone": 1})
    # one row per test with a decision (t::alone ran on the head only), the most expensive first;
    # its pairs: the most any of its metrics got
    assert rows == [Cost("t::e2e", 3, 27, 9, 96.0), Cost("t::op", 1, 40, 2, 12.5),
                    Cost("t::cheap", 1, 16, 1, 1.0)]
    assert node_of("t::e2e#eval") == node_of("t::e2e") == "t::e2e"


class PerTestClock:
    """A clock that moves only when told to: ``per_visit[test]`` seconds per visit of a test (half
    at each side's answer), a tick per reading; counts the visits it saw."""

    def __init__(self, per_visit: dict[str, float]) -> None:
        self.now = 1000.0
        self.per_visit = per_visit
        self.visits: Counter[str] = Counter()

    def __call__(self) -> float:
        self.now += 1e-4
        return self.now

    def outcome(self, outcome) -> None:
        self.now += self.per_visit[outcome.nodeid] / 2
        self.visits[outcome.nodeid] += outcome.side == "head"


def test_each_test_is_charged_the_seconds_of_all_its_visits_on_both_sides(tmp_path, monkeypatch):
    # A/A too noisy to decide: both tests run again in the next generation (the budget of the
    # reruns is ample, the generations few), so that each test has several visits to add up
    monkeypatch.setattr(tuning, "SMALL_SESSION_S", 1000.0)
    monkeypatch.setattr(tuning, "MAX_RERUNS", 2)
    clock = PerTestClock({"t::cheap": 2.0, "t::dear": 7.0})
    ids = {"base": ["t::cheap", "t::dear"], "head": ["t::cheap", "t::dear"]}
    c = controller(tmp_path, {"base": 1.0, "head": 1.0}, ids, clock=clock,
                   on_outcome=clock.outcome, **AA_UNDECIDED)
    result = run_session(c)
    assert max(clock.visits.values()) >= 2, clock.visits  # the last visit alone would not do
    expected = {t: n * clock.per_visit[t] for t, n in clock.visits.items()}
    assert [c.test for c in result.cost] == sorted(expected, key=lambda t: -expected[t])
    for row in result.cost:
        assert row.visits == clock.visits[row.test]
        assert row.seconds == pytest.approx(expected[row.test], abs=0.05)
        (d,) = [d for d in result.decisions if d.key.run == row.test]
        assert (row.metrics, row.pairs) == (1, d.pairs)
    assert sum(row.seconds for row in result.cost) <= result.elapsed_s
    # in the JSON and back
    data = json.loads(json.dumps(result.to_dict()))
    assert data["cost"][0] == {"test": result.cost[0].test, "metrics": 1,
                               "pairs": result.cost[0].pairs, "visits": result.cost[0].visits,
                               "seconds": result.cost[0].seconds}
    assert CompareResult.from_dict(data).cost == result.cost


def _result(rows: list[Cost]) -> CompareResult:
    return CompareResult("REV abc", "working tree", [_decision(c.test, "call_ms:op", c.pairs)
                                                     for c in rows], pairs=100, elapsed_s=300.0,
                         cost=rows)


ROWS = [Cost(f"suites/test_ops.py::test_op[conv2d-{i}]", 1, 20 + i, 2, 100.0 - i) for i in range(8)]


def test_the_terminal_says_the_cost_in_one_line_the_costliest_tests_first():
    result = _result(ROWS)
    for width in (40, 60, 100, 200):
        lines = render.terminal_lines(result, width)
        (line,) = [line for line in lines if line.startswith("cost: ")]
        assert len(line) <= width
        assert line.startswith("cost: 8 test(s), 772.0 s of visits; costliest "[:width - 3])
    assert render.cost_line(result, 200, "suites/test_ops.py::") == (
        "cost: 8 test(s), 772.0 s of visits; costliest test_op[conv2d-0] 100.0 s/20 pairs, "
        "test_op[conv2d-1] 99.0 s/21 pairs, +6 more")
    # too narrow for two names: the costliest alone (its name's middle cut if need be)
    assert render.cost_line(result, 100, "suites/test_ops.py::") == (
        "cost: 8 test(s), 772.0 s of visits; costliest test_op[conv2d-0] 100.0 s/20 pairs, "
        "+7 more")
    assert render.cost_line(_result([])) is None  # a file of an older writer: no line


def test_the_markdown_lists_the_costliest_tests_and_counts_the_rest():
    text = render.markdown(_result(ROWS))
    table = [line for line in text.splitlines() if line.startswith("| `suites") or "more |" in line]
    assert table[:2] == ["| `suites/test_ops.py::test_op[conv2d-0]` | 1 | 20 | 2 | 100.0 |",
                         "| `suites/test_ops.py::test_op[conv2d-1]` | 1 | 21 | 2 | 99.0 |"]
    assert len(table) == render.COST_ROWS + 1
    assert table[-1] == f"| +3 more | 3 | | 6 | {sum(c.seconds for c in ROWS[5:]):.1f} |"
    assert "772.0 s in the visits of 8 test(s), both sides, of the session's 300.0 s" in text
    assert "Cost per test" not in render.markdown(_result([]))


def test_a_compare_object_without_cost_reads_and_a_malformed_one_is_refused():
    data = _result(ROWS[:1]).to_dict()
    old = {k: v for k, v in data.items() if k != "cost"}  # a file of an older writer
    assert CompareResult.from_dict(old).cost == []
    for bad in ({**data["cost"][0], "seconds": -1.0}, {**data["cost"][0], "pairs": 1.5},
                {**data["cost"][0], "visits": True}, {**data["cost"][0], "seconds": math.inf},
                {k: v for k, v in data["cost"][0].items() if k != "test"}):
        with pytest.raises(ResultsError, match=r"compare.cost is not a list of \{test, metrics"):
            CompareResult.from_dict({**data, "cost": [bad]}, "r.json")


def test_choose_takes_the_most_metrics_per_second_that_fit_the_gates_tests_first():
    seconds = {"t::must": 4.0, "t::e2e": 12.0, "t::cheap": 1.0, "t::op": 3.0}
    gate = {"t::must": 1}
    other = {"t::e2e": 6, "t::cheap": 1, "t::op": 1}
    # 6 s left in the budget after the gate's test: cheap (1/s) first, then op (0.33/s) fits;
    # e2e (0.5/s) does not fit and is skipped for it
    assert choose(gate, other, seconds, (100.0, 10.0), 0.0) == ["t::must", "t::cheap", "t::op"]
    # room for the e2e test: it has the most metrics per second after cheap
    assert choose(gate, other, seconds, (100.0, 17.5), 0.0) == ["t::must", "t::cheap", "t::e2e"]
    # the gate's test fits before the ceiling, none of the others before the budget's end
    assert choose(gate, other, seconds, (100.0, 4.5), 0.0) == ["t::must"]
    # nothing the gate waits for: the others alone; no room at all: nothing
    assert choose({}, other, seconds, (100.0, 4.0), 5.0) == ["t::cheap", "t::op"]
    assert choose(gate, other, seconds, (3.0, 0.5), 5.0) == []
    # within the gate's tests too, the most metrics per second first, a test that does not fit
    # skipped for a cheaper one
    many = {"t::e2e": 6, "t::must": 1, "t::cheap": 1}
    assert choose(many, {}, seconds, (6.0, 0.0), 0.0) == ["t::cheap", "t::must"]


def test_past_the_budget_the_others_fill_a_start_of_the_sides_beside_the_gates_tests():
    seconds = {"t::e2e": 12.0, "t::clone": 0.6, "t::scope": 0.3, "t::ops": 2.0, "t::other": 5.0}
    undecided = {"t::clone": 1, "t::scope": 1, "t::ops": 1, "t::other": 1}
    # the sides start in 3 s: the two cheap visits and the 2 s one fit, not the 5 s one
    assert choose({"t::e2e": 3}, undecided, seconds, (100.0, -1.0), 3.0) == [
        "t::e2e", "t::scope", "t::clone", "t::ops"]
    # in 1.2 s, the most metrics per second first
    assert choose({"t::e2e": 3}, undecided, seconds, (100.0, -1.0), 1.2) == [
        "t::e2e", "t::scope", "t::clone"]
    # none fits: the gate's test alone; no gate's test: nothing taken along
    assert choose({"t::scope": 1}, {"t::other": 1}, seconds, (100.0, -1.0), 3.0) == ["t::scope"]
    assert choose({}, undecided, seconds, (100.0, -1.0), 3.0) == []
