"""The gate: thresholds parsing, absolute limits and the regression rule, on hand-built results."""

import random
from dataclasses import replace

import pytest

from pytest_opperf.comparison.baseline_checks import ALWAYS_RECORDED
from pytest_opperf.comparison.gate import evaluate
from pytest_opperf.comparison.regression import compare_slower
from pytest_opperf.comparison.thresholds import (
    Regression,
    Thresholds,
    ThresholdsError,
    load_thresholds,
    parse_thresholds,
)
from pytest_opperf.comparison.verdict import Verdict
from pytest_opperf.device import CPU_HOST
from pytest_opperf.measure import op_run
from pytest_opperf.results import RunResult
from pytest_opperf.workcounts.workcount import LIBRARIES, WorkCounts, library_versions
from tests.opperf_factories import e2e_run, results

SECTION_7 = """
[regression]                 # against --opperf-baseline
max_slowdown = 0.10          # relative, per stat and for examples/sec
max_python_share_increase = 0.02
counts = "exact"             # per-step op counts must not change

[[limit]]
run = "suites/test_resnet50.py::*"
min_examples_per_sec = 40.0
max_python_share = 0.25

[[limit]]
run = "*"
stat = "conv2d*"
max_avg_ms = 5.0
"""


GATE = Thresholds(regression=Regression(time="gate"))  # time gates: dedicated, quiet hardware


def noisy(center, n=20, spread=0.03, seed=0):
    rng = random.Random(seed)
    return [center * (1 + rng.uniform(-spread, spread)) for _ in range(n)]


# --- thresholds file ---------------------------------------------------------------


def test_section_7_example_parses(tmp_path):
    path = tmp_path / "t.toml"
    path.write_text(SECTION_7)
    t = load_thresholds(path)
    assert t.regression == Regression(
        max_slowdown=0.10, max_python_share_increase=0.02, counts="exact"
    )
    assert [(lim.run, lim.stat, lim.min_examples_per_sec, lim.max_python_share, lim.max_avg_ms)
            for lim in t.limits] == [("suites/test_resnet50.py::*", None, 40.0, 0.25, None),
                                     ("*", "conv2d*", None, None, 5.0)]
    assert t.source == str(path)


def test_integer_is_a_fine_float():
    assert parse_thresholds({"regression": {"max_slowdown": 1}}).regression.max_slowdown == 1.0


@pytest.mark.parametrize(
    "doc, message",
    [
        ({"regresion": {}}, "unknown key 'regresion' in the top level"),
        ({"regression": {"max_slowdwn": 0.1}}, "unknown key 'max_slowdwn' in [regression]"),
        ({"limit": [{"run": "*", "max_avg": 1.0}]}, "unknown key 'max_avg' in [[limit]] #1"),
        (
            {"regression": {"max_slowdown": "0.1"}},
            "[regression] max_slowdown must be a number, got '0.1' (string)",
        ),
        (
            {"regression": {"max_slowdown": True}},
            "max_slowdown must be a number, got True (boolean)",
        ),
        ({"regression": {"min_samples": 2.5}}, "min_samples must be an integer"),
        ({"regression": {"counts": "loose"}}, "counts must be 'exact' or 'ignore', got 'loose'"),
        ({"regression": {"max_slowdown": -0.1}}, "max_slowdown must be in"),
        ({"regression": {"alpha": 0.0}}, "[regression] alpha must be in (0, 1], got 0.0"),
        ({"regression": []}, "[regression] must be a table"),
        ({"limit": {"run": "*"}}, "limit must be an array of tables"),
        ({"limit": [{"run": "*"}]}, "[[limit]] #1 sets no limit"),
        (
            {"limit": [{"run": 3, "max_avg_ms": 1.0}]},
            "[[limit]] #1 run must be a string, got 3 (integer)",
        ),
        (
            {"limit": [{"stat": "conv*", "min_examples_per_sec": 1.0}]},
            "min_examples_per_sec limits a run",
        ),
        (
            {"limit": [{"max_avg_ms": -1.0}]},
            "[[limit]] #1 max_avg_ms must be in [0, inf), got -1.0",
        ),
    ],
)
def test_bad_thresholds_name_key_and_file(doc, message):
    with pytest.raises(ThresholdsError) as info:
        parse_thresholds(doc, "ci/t.toml")
    assert message in str(info.value)
    assert str(info.value).startswith("ci/t.toml: ")


def test_unreadable_thresholds_files(tmp_path):
    with pytest.raises(ThresholdsError, match="no such file"):
        load_thresholds(tmp_path / "absent.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[regression\n")
    with pytest.raises(ThresholdsError, match="not valid TOML"):
        load_thresholds(bad)


# --- the regression rule --------------------------------------------------------------


def test_three_times_slower_is_flagged():
    c = compare_slower(noisy(1.0), noisy(3.0, seed=1), Regression(), 0.05)
    assert c.regressed
    assert c.new / c.base == pytest.approx(3.0, rel=0.05)
    assert "Mann-Whitney U" in c.statistic and "(ratio 2.9" in c.statistic


def test_same_distribution_is_not_flagged():
    assert not compare_slower(noisy(1.0), noisy(1.0, seed=1), Regression(), 0.05).regressed


def test_significant_but_within_tolerance_is_not_flagged():
    # 5 % slower, every sample: real, but within max_slowdown 10 %
    c = compare_slower([1.0] * 10, [1.05] * 10, Regression(), 0.0)
    assert not c.regressed


def test_step_share_floor_and_op_tolerance():
    # e2e: +30 % on a 1 ms stat of 100 ms steps is 0.3 ms, below 1 % of the step
    base = e2e_run(stats={"relu": noisy(1.0), "conv2d": noisy(50.0)}, step_ms=[100.0] * 20)
    new = e2e_run(
        stats={"relu": noisy(1.3, seed=1), "conv2d": noisy(65.0, seed=1)}, step_ms=[100.0] * 20
    )
    loose = Thresholds(regression=Regression(max_slowdown=0.25, min_step_share=0.01, time="gate"))
    (x,) = evaluate(results(new), loose, results(base)).violations
    assert x.metric == "step_ms:conv2d" and "floor 1 ms" in x.message
    assert {
        v.metric
        for v in evaluate(
            results(new), Thresholds(regression=Regression(max_slowdown=0.25, time="gate")),
            results(base),
        ).violations
    } == {"step_ms:conv2d", "step_ms:relu"}
    # per-op benchmarks: their own tolerance, the e2e one left alone
    ops_base = op_run(
        "ops.py::test_relu", "relu", [ms / 1e3 for ms in noisy(1.0, n=50)], 10, CPU_HOST, "host"
    )
    ops_new = op_run(
        "ops.py::test_relu",
        "relu",
        [ms / 1e3 for ms in noisy(1.4, n=50, seed=1)],
        10,
        CPU_HOST,
        "host",
    )
    assert evaluate(
        results(ops_new),
        Thresholds(regression=Regression(max_slowdown=0.25, op_max_slowdown=0.5, time="gate")),
        results(ops_base),
    ).passed
    gated = Thresholds(regression=Regression(max_slowdown=0.25, time="gate"))
    assert not evaluate(results(ops_new), gated, results(ops_base)).passed


def test_floor_keeps_microsecond_stats_quiet():
    c = compare_slower(noisy(0.001), noisy(0.003, seed=1), Regression(), floor=0.05)
    assert not c.regressed  # 3x slower, but 2 us per step
    assert compare_slower(noisy(0.001), noisy(0.003, seed=1), Regression(), floor=0.0).regressed


def test_large_but_insignificant_difference_is_not_flagged():
    base = [1.0, 1.0, 5.0, 1.0, 5.0, 1.0, 5.0, 1.0]
    new = [5.0, 1.0, 5.0, 1.0, 5.0, 1.0, 5.0, 5.0]  # median 5 vs 1, but the samples overlap
    c = compare_slower(base, new, Regression(), 0.0)
    assert c.new > c.limit
    assert not c.regressed


def test_few_samples_use_separation_and_twice_the_tolerance():
    r = Regression(min_samples=5)
    assert compare_slower([1.0, 1.1], [3.0, 3.1], r, 0.0).regressed
    c = compare_slower([1.0, 3.5], [3.0, 3.1], r, 0.0)  # slower median, but overlapping
    assert not c.regressed and "few samples (n=2 vs 2 < 5): twice the tolerance" in c.statistic
    c = compare_slower([1.0, 1.0], [1.15, 1.15], r, 0.0)  # +15 %: beyond 10 %, within 20 %
    assert not c.regressed and c.limit == pytest.approx(1.2)
    assert compare_slower([1.0, 1.0], [1.25, 1.25], r, 0.0).regressed


# --- evaluate ---------------------------------------------------------------------------


def test_absolute_limits():
    run = e2e_run(
        "suites/test_resnet50.py::test_train",
        stats={"conv2d": [6.0] * 10, "relu": [9.0] * 10},
        step_ms=[1000.0] * 10,
        python_share=0.3,
    )
    t = parse_thresholds(
        {
            "limit": [
                {
                    "run": "suites/test_resnet50.py::*",
                    "min_examples_per_sec": 40.0,
                    "max_python_share": 0.25,
                },
                {"stat": "conv2d*", "max_avg_ms": 5.0},
                {"run": "other::*", "max_total_ms": 0.0},
            ]
        }
    )
    v = evaluate(results(run), t)
    assert sorted((x.metric, x.value, x.limit) for x in v.violations) == [
        ("avg_ms:conv2d", 6.0, 5.0), ("examples_per_sec", pytest.approx(32.0), 40.0),
        ("python_share", 0.3, 0.25)]
    assert all(x.baseline is None for x in v.violations)
    assert sorted(x.statistic for x in v.violations) == ["absolute limit", "absolute limit",
                                                          "absolute limit on the steady state"]
    assert v.checks == 3 and not v.passed


def test_regressions_against_baseline():
    base = e2e_run(stats={"conv2d": [50.0] + noisy(2.0), "relu": noisy(1.0, seed=2)},
                   step_ms=[80.0] + noisy(10.0, seed=3))
    new = e2e_run(stats={"conv2d": [50.0] + noisy(6.0, seed=4), "relu": noisy(1.0, seed=5)},
                  step_ms=[80.0] + noisy(14.0, seed=6))
    v = evaluate(results(new), GATE, results(base), "base.json")
    metrics = {x.metric: x for x in v.violations}
    assert set(metrics) == {"step_ms:conv2d", "examples_per_sec"}
    conv = metrics["step_ms:conv2d"]
    assert conv.baseline == pytest.approx(2.0, rel=0.05) and conv.value == pytest.approx(
        6.0, rel=0.05
    )
    assert conv.limit == pytest.approx(conv.baseline * 1.1)
    assert "Mann-Whitney" in conv.statistic
    assert metrics["examples_per_sec"].value < metrics["examples_per_sec"].limit
    assert v.baseline == "base.json"


def test_first_step_is_warm_up():
    # only the first step (startup) got slower: no stat regression
    base = e2e_run(stats={"conv2d": [5.0] + noisy(2.0)})
    new = e2e_run(stats={"conv2d": [500.0] + noisy(2.0, seed=1)})
    assert evaluate(results(new), GATE, results(base)).passed


def test_aa_noise_never_flags():
    alarms = 0
    for seed in range(50):
        base = e2e_run(stats={"conv2d": noisy(2.0, seed=seed), "relu": noisy(0.3, seed=seed + 100)},
                       step_ms=noisy(10.0, seed=seed + 200))
        new = e2e_run(
            stats={"conv2d": noisy(2.0, seed=seed + 300), "relu": noisy(0.3, seed=seed + 400)},
            step_ms=noisy(10.0, seed=seed + 500),
        )
        alarms += len(evaluate(results(new), GATE, results(base)).violations)
    assert alarms == 0


def share_run(executor_ms, step_ms=None):
    """A run whose executor takes ``executor_ms`` of each 10 ms step."""
    step_ms = step_ms or [10.0] * len(executor_ms)
    run = e2e_run(stats={"ExecutorRunTimer": executor_ms}, step_ms=step_ms)
    run.executor_stat = "ExecutorRunTimer"
    run.python_share = 1 - sum(executor_ms) / sum(step_ms)
    return run


def test_python_share_tolerance_is_absolute():
    base = share_run(noisy(8.0))  # Python share 0.2
    assert evaluate(
        results(share_run(noisy(7.85, seed=1))), GATE, results(base)
    ).passed  # +1.5 points
    v = evaluate(
        results(share_run(noisy(7.6, seed=1))), GATE, results(base)
    )  # +4 points, every step
    (x,) = v.violations
    assert (x.metric, x.baseline) == ("python_share", pytest.approx(0.2, abs=0.01))
    assert x.value == pytest.approx(0.24, abs=0.01) and x.limit == pytest.approx(x.baseline + 0.02)
    assert x.statistic.startswith("per-step Python share: Mann-Whitney U")


def test_one_slow_step_does_not_move_the_python_share_verdict():
    base = share_run(noisy(8.0))
    steps = [10.0] * 20
    steps[5] = 30.0  # one 20 ms hiccup outside the executor: whole-window share +8 points
    new = share_run(noisy(8.0, seed=1), steps)
    assert new.python_share > base.python_share + 0.05
    assert evaluate(results(new), GATE, results(base)).passed


def test_a_steady_state_python_share_regression_is_caught_whatever_the_warm_up_did():
    # The steps after warm-up spend 1 more point outside the executor; a faster
    # warm-up step (model building) keeps the whole-window share below baseline.
    base = share_run([100.0] + noisy(9.9, n=19, spread=0.002), [200.0] + [10.0] * 19)
    new = share_run([150.0] + noisy(9.8, n=19, spread=0.002, seed=1), [200.0] + [10.0] * 19)
    assert new.python_share < base.python_share
    tight = Thresholds(regression=Regression(max_python_share_increase=0.005, time="gate"))
    (x,) = evaluate(results(new), tight, results(base)).violations
    assert x.metric == "python_share" and x.statistic.startswith(
        "per-step Python share: Mann-Whitney U"
    )
    assert x.value == pytest.approx(0.02, abs=0.002) and x.baseline == pytest.approx(
        0.01, abs=0.002
    )
    assert evaluate(results(new), GATE, results(base)).passed  # within the default 2 points


def test_python_share_without_steps_compares_the_headline():
    base, new = e2e_run(stats={}, python_share=0.2), e2e_run(stats={}, python_share=0.25)
    (x,) = evaluate(results(new), GATE, results(base)).violations
    assert x.metric == "python_share" and x.statistic.startswith("no per-step samples")


def test_counts_are_exact():
    base = e2e_run(counts={"conv2d": 53, "relu": 49})
    new = e2e_run(counts={"conv2d": 54, "relu": 49, "dropout": 1})
    v = evaluate(results(new), GATE, results(base))
    assert sorted((x.metric, x.value, x.baseline) for x in v.violations) == [
        ("count:conv2d", 54, 53), ("count:dropout", 1, 0)]
    ignore = Thresholds(Regression(counts="ignore"))
    assert evaluate(results(new), ignore, results(base)).passed


def test_throughput_needs_the_steps_to_agree():
    # headline examples/sec fell 30 % because of startup only: per-step times are unchanged
    base = e2e_run(step_ms=[10.0] + noisy(10.0), wall_s=0.2)
    new = e2e_run(step_ms=[100.0] + noisy(10.0, seed=1), wall_s=0.29)
    assert new.examples_per_sec < base.examples_per_sec * 0.9
    assert evaluate(results(new), GATE, results(base)).passed


def others(verdict: Verdict) -> list[str]:
    """The warnings but the one for runs without work counts on both sides (these runs have
    none)."""
    return [w for w in verdict.warnings if "work counts not compared" not in w]


def test_other_hardware_makes_gated_time_advisory_with_one_warning():
    base = results(
        e2e_run(stats={"conv2d": noisy(1.0)}), machine={"cpu": "A", "device_class": "cpu"}
    )
    new = results(
        e2e_run(stats={"conv2d": noisy(3.0, seed=1)}), machine={"cpu": "B", "device_class": "cpu"}
    )
    v = evaluate(new, GATE, base, "b.json")
    (warning,) = others(v)
    assert "baseline b.json is from other hardware (cpu 'A' vs 'B'): time is advisory" in warning
    assert v.passed and v.drift is not None and not v.drift.gating
    assert [r.metric for r in v.drift.beyond] == ["step_ms:conv2d"]
    same = results(e2e_run(stats={"conv2d": noisy(3.0, seed=1)}),
                   machine={"cpu": "A", "device_class": "cpu"})
    assert [x.metric for x in evaluate(same, GATE, base, "b.json").violations] == ["step_ms:conv2d"]


def test_unmatched_runs_are_noted():
    v = evaluate(results(e2e_run("a"), e2e_run("c")), None, results(e2e_run("b"), e2e_run("c")))
    assert v.passed  # half the session's runs are in the baseline: enough
    assert "1 run(s) have no baseline run: a" in v.notes[0]
    assert "1 baseline run(s) not measured in this session: b" in v.notes[1]


def test_a_baseline_that_matches_no_run_fails_the_gate():
    v = evaluate(results(e2e_run("suite.py::test_train[tiny]")), None,
                 results(e2e_run("suite.py::test_train[small]")), "b.json")
    (x,) = v.violations
    assert (x.run, x.metric, x.value, x.limit) == ("(session)", "baseline_match", 0.0, 0.5)
    assert x.message.startswith(
        "baseline b.json has a run for only 0 of the session's 1 run(s) (at least 50% "
        "expected): a wrong baseline, another workload or suite, or run ids that changed"
    )
    assert (
        "'suite.py::test_train[tiny]' is not in it; its ids look like 'suite.py::test_train[small]'"
        in x.message
    )
    assert "\n" not in x.message


def test_a_baseline_that_matches_too_few_runs_fails_and_the_share_is_configurable():
    new = results(
        *(e2e_run(f"torchsuite/t.py::test_{i}") for i in range(3)), e2e_run("t.py::test_0")
    )
    base = results(*(e2e_run(f"t.py::test_{i}") for i in range(3)))
    (x,) = evaluate(new, None, base, "b.json").violations
    assert (
        x.metric == "baseline_match"
        and x.value == 0.25
        and "only 1 of the session's 4 run(s)" in x.message
    )
    lenient = Thresholds(Regression(min_baseline_share=0.2))
    assert evaluate(new, lenient, base, "b.json").passed


def test_a_session_without_runs_against_a_baseline_fails():
    (x,) = evaluate(results(), None, results(e2e_run("a")), "b.json").violations
    assert x.metric == "baseline_match"
    assert x.message == "the session measured no runs: nothing was compared with baseline b.json"
    assert evaluate(results(), None, None).passed  # no baseline: nothing was promised


def test_limit_globs_that_match_nothing_are_warned_about():
    t = parse_thresholds({"limit": [{"run": "suites/*", "min_examples_per_sec": 1.0},
                                    {"run": "*", "stat": "conv2D", "max_avg_ms": 1.0},
                                    {"run": "*", "stat": "conv2d", "max_avg_ms": 100.0}]})
    v = evaluate(results(e2e_run("suite.py::test_train")), t)
    assert v.passed and v.checks == 1
    assert v.warnings == [
        "[[limit]] #1 (run = 'suites/*') matches no run of this session: it checked nothing",
        "[[limit]] #2 (run = '*', stat = 'conv2D') matches no stat of the runs it matches: "
        "its stat limits checked nothing",
    ]


def test_a_python_share_limit_above_one_is_rejected():
    with pytest.raises(
        ThresholdsError,
        match=r"\[\[limit\]\] #1 max_python_share is a share of wall time and "
        r"must be in \[0, 1\], got 5.0",
    ):
        parse_thresholds({"limit": [{"max_python_share": 5}]})
    assert parse_thresholds({"limit": [{"max_python_share": 1}]}).limits[0].max_python_share == 1.0


def test_an_averages_fallback_does_not_leak_into_later_messages():
    base = e2e_run(stats={"a": noisy(1.0), "b": noisy(1.0)})
    new = e2e_run(stats={"a": noisy(3.0, seed=1), "b": noisy(3.0, seed=2)})
    base.stats = [replace(base.stats[0], samples_ms=None), base.stats[1]]  # a: averages compared
    x, y = evaluate(results(new), GATE, results(base)).violations
    assert (x.metric, y.metric) == ("avg_ms:a", "step_ms:b")
    assert "a average time" in x.message and "b median per-step time" in y.message


def test_op_runs_use_call_samples_and_the_op_floor():
    base = op_run(
        "ops.py::test_relu", "relu", [s / 1e3 for s in noisy(0.010, n=200)], 10, CPU_HOST, "host"
    )
    slow = op_run(
        "ops.py::test_relu",
        "relu",
        [s / 1e3 for s in noisy(0.030, n=200, seed=1)],
        10,
        CPU_HOST,
        "host",
    )
    same = op_run(
        "ops.py::test_relu",
        "relu",
        [s / 1e3 for s in noisy(0.010, n=200, seed=2)],
        10,
        CPU_HOST,
        "host",
    )
    (x,) = evaluate(results(slow), GATE, results(base)).violations
    assert x.metric == "call_ms:relu" and x.value == pytest.approx(0.030, rel=0.05)
    assert evaluate(results(same), GATE, results(base)).passed
    # op runs have no counts, throughput or Python share checks
    assert evaluate(results(same), GATE, results(base)).checks == 1


def test_verdict_round_trip():
    v = evaluate(
        results(e2e_run(counts={"relu": 2})), None, results(e2e_run(counts={"relu": 1})), "b.json"
    )
    back = Verdict.from_dict(v.to_dict())
    assert back.violations == v.violations and back.baseline == "b.json" and not back.passed
    assert v.to_dict()["passed"] is False


# --- the policy: time against a stored baseline is drift unless time = "gate" ------------


def test_time_against_a_stored_baseline_is_advisory_drift_by_default():
    base = e2e_run(stats={"conv2d": [50.0] + noisy(2.0), "relu": noisy(1.0, seed=2)},
                   step_ms=[80.0] + noisy(10.0, seed=3))
    new = e2e_run(stats={"conv2d": [50.0] + noisy(6.0, seed=4), "relu": noisy(1.0, seed=5)},
                  step_ms=[80.0] + noisy(14.0, seed=6))
    v = evaluate(results(new), None, results(base), "base.json")
    assert v.passed and v.checks == len(set(base.counts) | set(new.counts))  # counts only
    assert v.drift is not None and not v.drift.gating
    rows = {r.metric: r for r in v.drift.rows}
    assert set(rows) == {"step_ms:conv2d", "step_ms:relu", "examples_per_sec", "python_share"}
    assert rows["step_ms:conv2d"].slowdown == pytest.approx(3.0, rel=0.05)
    assert rows["examples_per_sec"].slowdown == pytest.approx(1.4, rel=0.05)  # time per example
    assert rows["step_ms:conv2d"].beyond and not rows["step_ms:relu"].beyond
    assert v.drift.rows[0].metric == "step_ms:conv2d"  # the furthest from the machine factor
    # the same comparison with time = "gate" fails on what the drift marks beyond the rule
    gated = evaluate(results(new), GATE, results(base), "base.json")
    assert {x.metric for x in gated.violations} == {r.metric for r in v.drift.beyond}
    assert gated.drift is not None and gated.drift.gating


def test_the_machine_factor_is_the_median_slowdown_and_ranks_the_metric_that_moved():
    names = [f"op{i}" for i in range(9)]
    base = e2e_run(stats={n: noisy(1.0, seed=i) for i, n in enumerate(names)},
                   step_ms=noisy(20.0, seed=50))
    # a machine 1.9x slower on everything, and op4 a further 1.3x
    new = e2e_run(stats={n: noisy(1.9 * (1.3 if n == "op4" else 1.0), seed=i + 10)
                         for i, n in enumerate(names)}, step_ms=noisy(38.0, seed=51))
    drift = evaluate(results(new), None, results(base)).drift
    assert drift is not None and drift.machine_factor == pytest.approx(1.9, rel=0.05)
    top = drift.rows[0]
    assert top.metric == "step_ms:op4" and top.relative == pytest.approx(1.3, rel=0.06)
    assert "this machine ran the baseline's work 1.9" in drift.factor_text()
    assert "x slower (median of 10 time metrics)" in drift.factor_text()


def test_counts_and_limits_stay_hard_against_a_stored_baseline():
    base = e2e_run(stats={"conv2d": noisy(2.0)}, counts={"relu": 49})
    new = e2e_run(stats={"conv2d": noisy(2.0, seed=1)}, counts={"relu": 50}, python_share=0.4)
    t = parse_thresholds({"limit": [{"max_python_share": 0.25}]})
    v = evaluate(results(new), t, results(base), "b.json")
    assert sorted(x.metric for x in v.violations) == ["count:relu", "python_share"]
    assert all(x.statistic != "" for x in v.violations)


def test_time_gate_fails_a_three_times_slower_step_on_the_same_hardware():
    base = e2e_run(stats={"conv2d": noisy(5.0)}, step_ms=noisy(10.0, seed=1))
    new = e2e_run(stats={"conv2d": noisy(15.0, seed=2)}, step_ms=noisy(30.0, seed=3))
    assert evaluate(results(new), None, results(base)).passed
    failed = {x.metric for x in evaluate(results(new), GATE, results(base)).violations}
    assert failed == {"step_ms:conv2d", "examples_per_sec"}


def test_another_workload_makes_gated_time_advisory():
    base = results(e2e_run(stats={"conv2d": noisy(1.0)}))
    base.session = {"workload": "full"}
    new = results(e2e_run(stats={"conv2d": noisy(3.0, seed=1)}))
    new.session = {"workload": "small"}
    v = evaluate(new, GATE, base, "b.json")
    assert v.passed
    assert others(v) == ['baseline b.json is from another workload (small vs baseline full): '
                          'time is advisory drift, not gated (time = "gate" needs the same '
                          'hardware and workload); counts and limits still gate']


def test_the_drift_survives_the_results_file():
    base = e2e_run(stats={"conv2d": noisy(1.0)})
    new = e2e_run(stats={"conv2d": noisy(1.5, seed=1)})
    v = evaluate(results(new), None, results(base), "b.json")
    back = Verdict.from_dict(v.to_dict())
    assert back.drift == v.drift


# --- work counts against a baseline whose versions are unknown ---------------------------------

WORK = {"conv2d": {"bytecodes": 1000, "py_calls": 100, "c_calls": 50}}
VERSIONS = {"python": "3.11.7", "cpus": "2", "numpy": "2.0.2"}


def counted_run(bytecodes: int, versions: dict[str, str]) -> RunResult:
    run = e2e_run()
    stats = {"conv2d": dict(WORK["conv2d"], bytecodes=bytecodes)}
    run.work = WorkCounts(stats, 2, 1.0, dict(versions), [])
    return run


def work_warnings(verdict: Verdict) -> list[str]:
    return [w for w in verdict.warnings if "work counts" in w]


def test_work_counts_gate_when_both_sides_record_the_same_versions():
    v = evaluate(results(counted_run(2000, VERSIONS)), None,
                 results(counted_run(1000, VERSIONS)), "b.json")
    assert [x.metric for x in v.violations] == ["bytecodes:conv2d"] and not work_warnings(v)


@pytest.mark.parametrize("recorded, said", [
    ({}, "the baseline run records no python, cpus"),
    ({"python": "3.11.7", "numpy": "2.0.2"}, "the baseline run records no cpus"),
], ids=["empty", "a-key-missing"])
def test_a_baseline_without_versions_makes_work_counts_advisory_in_one_warning(recorded, said):
    v = evaluate(results(counted_run(2000, VERSIONS)), None,
                 results(counted_run(1000, recorded)), "b.json")
    assert v.passed and not v.violations
    assert work_warnings(v) == [
        "work counts of 1 run(s) are advisory: the versions they depend on are not recorded on "
        f"both sides (save a new baseline to gate them): suite.py::test_train ({said})"]
    assert any("+100.0% bytecodes in conv2d" in n for n in v.notes), v.notes  # still shown


def test_a_library_one_side_did_not_import_is_no_unknown_version():
    """Libraries are recorded when the process imported them (by any test): that a baseline
    lacks torch says nothing about the versions its counts depend on."""
    v = evaluate(results(counted_run(2000, {**VERSIONS, "torch": "2.5.0"})), None,
                 results(counted_run(1000, VERSIONS)), "b.json")
    assert [x.metric for x in v.violations] == ["bytecodes:conv2d"] and not work_warnings(v)


def test_the_versions_always_recorded_are_those_library_versions_records_for_every_run():
    assert set(library_versions()) - set(LIBRARIES) == set(ALWAYS_RECORDED)


# --- time against a baseline whose hardware is unknown ----------------------------------------


@pytest.mark.parametrize("machine, said", [
    ({}, "the baseline records no device_class, cpu"),
    ({"device_class": "cpu"}, "the baseline records no cpu"),
], ids=["no-machine", "no-cpu"])
def test_unknown_hardware_makes_gated_time_advisory_with_one_warning(machine, said):
    base = results(e2e_run(stats={"conv2d": noisy(1.0)}), machine=machine)
    new = results(e2e_run(stats={"conv2d": noisy(3.0, seed=1)}))
    v = evaluate(new, GATE, base, "b.json")
    assert v.passed and v.drift is not None and not v.drift.gating
    assert [r.metric for r in v.drift.beyond] == ["step_ms:conv2d"]
    assert others(v) == [f'baseline b.json is from unknown hardware ({said}): time is advisory '
                          'drift, not gated (time = "gate" needs the same hardware and workload); '
                          'counts and limits still gate']
    advisory = evaluate(new, None, base, "b.json")
    assert advisory.passed and not others(advisory)
    assert f"baseline b.json is from unknown hardware ({said}): its times are drift only, " \
           "as always" in advisory.notes


def test_a_fact_that_neither_side_records_is_no_unknown_hardware():
    base = results(e2e_run(stats={"conv2d": noisy(1.0)}), machine={"device_class": "cpu"})
    new = results(e2e_run(stats={"conv2d": noisy(3.0, seed=1)}), machine={"device_class": "cpu"})
    v = evaluate(new, GATE, base, "b.json")
    assert [x.metric for x in v.violations] == ["step_ms:conv2d"] and not others(v)
