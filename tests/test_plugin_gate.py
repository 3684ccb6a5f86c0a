"""The gate through pytest: A/A passes, real regressions fail with exit 1, bad inputs exit 4."""

import json

import pytest

from tests.opperf_suites import assert_one_line_usage_error, e2e, inner_run_env  # noqa: F401

pytest_plugins = ["pytester"]


def save_baseline(pytester, path="base.json", **suite):
    pytester.makepyfile(test_suite=e2e(**suite))
    result = pytester.runpytest("--opperf", f"--opperf-save={path}")
    assert result.ret == 0, result.stdout.str()
    return pytester.path / path


def test_a_a_over_repeated_runs_passes(pytester):
    base = save_baseline(pytester)
    for _ in range(3):
        result = pytester.runpytest("--opperf", f"--opperf-baseline={base}")
        assert result.ret == 0, result.stdout.str()
        result.stdout.fnmatch_lines([f"gate: PASSED (* checks; baseline {base})"])
        assert "opperf gate" not in result.stdout.str()


def test_three_times_slower_region_is_flagged_with_time_gated(pytester):
    base = save_baseline(pytester, relu_ms=1.0)
    pytester.makepyfile(test_suite=e2e(relu_ms=3.0))
    pytester.makefile(".toml", t='[regression]\ntime = "gate"\n')
    result = pytester.runpytest("--opperf", f"--opperf-baseline={base}", "--opperf-json=new.json",
                                "--opperf-thresholds=t.toml")
    assert result.ret == 1
    result.assert_outcomes(passed=1)  # the tests pass; the gate fails the session
    out = result.stdout.str()
    assert "gate: FAILED" in out
    result.stdout.fnmatch_lines(
        [
            "*= opperf gate =*",
            "FAIL test_suite.py::test_train step_ms:relu",
            "     relu median per-step time * ms vs baseline * ms "
            "(+*%, tolerance +10%, floor 0.05 ms)",
            "     value *, limit *, baseline *; "
            "Mann-Whitney U one-sided p=* (alpha 0.01, n=7 vs 7), median * -> *",
        ]
    )
    violations = json.loads((pytester.path / "new.json").read_text())["gate"]["violations"]
    # (unchanged stats are left alone in test_gate, on hand-made samples: sleeps on a busy
    # machine can really slow down between two runs)
    relu = next(v for v in violations if v["metric"] == "step_ms:relu")
    assert relu["value"] / relu["baseline"] == pytest.approx(3.0, rel=0.01)  # a fake clock: exact
    assert relu["limit"] == pytest.approx(relu["baseline"] * 1.1)
    assert set(relu) == {"run", "metric", "value", "limit", "baseline", "message", "statistic"}


def test_a_slower_region_against_a_stored_baseline_is_drift_by_default(pytester):
    base = save_baseline(pytester, relu_ms=1.0)
    pytester.makepyfile(test_suite=e2e(relu_ms=3.0))
    result = pytester.runpytest("--opperf", f"--opperf-baseline={base}", "--opperf-json=new.json",
                                "--opperf-markdown=r.md")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines([
        "--- drift against the baseline (advisory: time is gated in A/B only, or with time =*",
        "this machine ran the baseline's work *x slower (median of 6 time metrics); 3 metric(s)*",
        "*test_suite.py::test_train*",
        "  step_ms:relu * 2.99?x * yes",
        "gate: PASSED (*",
    ])
    gate = json.loads((pytester.path / "new.json").read_text())["gate"]
    assert gate["passed"] and not gate["drift"]["gating"]
    beyond = {r["metric"] for r in gate["drift"]["rows"] if r["beyond"]}
    assert beyond == {"step_ms:relu", "step_ms:ExecutorRunTimer", "examples_per_sec"}
    assert "### Drift against the baseline" in (pytester.path / "r.md").read_text()


def test_changed_per_step_count_is_flagged(pytester):
    base = save_baseline(pytester, relu_calls=1)
    pytester.makepyfile(test_suite=e2e(relu_calls=2))  # same time, twice the calls
    result = pytester.runpytest("--opperf", f"--opperf-baseline={base}")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["FAIL test_suite.py::test_train count:relu",
                                 "     relu runs 2 times per step, baseline 1",
                                 "     value 2, limit 1, baseline 1; per-step count (exact)"])


def test_absolute_limits_from_thresholds(pytester):
    pytester.makefile(".toml", thresholds='[[limit]]\nrun = "test_suite.py::*"\nstat = "conv2d"\n'
                                          'max_avg_ms = 0.5\n')
    pytester.makepyfile(test_suite=e2e(steps=3))
    result = pytester.runpytest("--opperf", "--opperf-thresholds=thresholds.toml")
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            "FAIL test_suite.py::test_train avg_ms:conv2d",
            "     conv2d avg * ms is above the limit 0.5 ms",
            "*; absolute limit",
        ]
    )


def test_gate_failure_adds_to_failing_tests_exit_1(pytester):
    pytester.makefile(".toml", thresholds='[[limit]]\nmax_python_share = 0.0\n')
    pytester.makepyfile(test_suite=e2e(steps=2) + "\ndef test_bad():\n    assert False\n")
    result = pytester.runpytest("--opperf", "--opperf-thresholds=thresholds.toml")
    assert result.ret == 1
    result.assert_outcomes(passed=1, failed=1)
    assert "FAIL test_suite.py::test_train python_share" in result.stdout.str()


def test_baseline_directory_picks_device_class_and_workload(pytester):
    (pytester.path / "baselines").mkdir()
    save_baseline(
        pytester, path="baselines"
    )  # a directory: written as <device_class>-<workload>.json
    assert (pytester.path / "baselines" / "cpu-small.json").exists()
    result = pytester.runpytest("--opperf", "--opperf-baseline=baselines")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["gate: PASSED (* checks; baseline */baselines/cpu-small.json)"])
    # another workload has no baseline yet: warn, check absolute limits only, do not fail
    result = pytester.runpytest("--opperf", "--opperf-baseline=baselines", "--opperf-workload=tiny")
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            "*OpPerfBaselineWarning: no baseline*",
            "warning: no baseline */baselines/cpu-tiny.json for device class 'cpu' and "
            "workload 'tiny': only absolute limits are checked",
        ]
    )


def test_missing_baseline_warning_can_be_an_error(pytester):
    (pytester.path / "baselines").mkdir()
    pytester.makepyfile(test_suite=e2e(steps=2))
    result = pytester.runpytest("--opperf", "--opperf-baseline=baselines",
                                "-W", "error::pytest_opperf.hookspec.OpPerfBaselineWarning")
    assert_one_line_usage_error(result, "warning turned into an error", "no baseline")


def test_baseline_from_other_hardware_is_drift_and_counts_still_gate(pytester):
    base = save_baseline(pytester, relu_calls=1)
    data = json.loads(base.read_text())
    data["machine"]["cpu"] = "Some Other CPU"
    base.write_text(json.dumps(data))
    pytester.makepyfile(test_suite=e2e(relu_calls=2))
    result = pytester.runpytest("--opperf", f"--opperf-baseline={base}")
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            "note: baseline * is from other hardware (cpu 'Some Other CPU' vs *)*",
            "*= opperf gate =*",
            "FAIL * count:relu",
        ]
    )


@pytest.mark.parametrize("content, fragments", [
    ("{truncated", ["not valid JSON"]),
    ('{"schema": "opperf/99", "runs": []}', ["unknown results schema 'opperf/99'"]),
    ('{"schema": "opperf/1", "runs": [{"id": 1}]}', ["malformed results file", "runs[0].id"]),
])
def test_corrupt_or_unknown_baseline_is_exit_4_before_tests_run(pytester, content, fragments):
    marker = pytester.path / "ran"
    pytester.makepyfile(f"def test_x(): open({str(marker)!r}, 'w').close()")
    (pytester.path / "base.json").write_text(content)
    result = pytester.runpytest("--opperf", "--opperf-baseline=base.json")
    assert_one_line_usage_error(result, "--opperf-baseline base.json", *fragments)
    assert not marker.exists()


@pytest.mark.parametrize(
    "content, fragments",
    [
        ("[regression]\nmax_slowdwn = 0.1\n", ["unknown key 'max_slowdwn' in [regression]"]),
        (
            '[regression]\nmax_slowdown = "10%"\n',
            ["max_slowdown must be a number, got '10%' (string)"],
        ),
        (
            "[[limit]]\nmin_examples_per_sec = true\n",
            ["min_examples_per_sec must be a number, got True"],
        ),
        ("[regression\n", ["not valid TOML"]),
    ],
)
def test_bad_thresholds_are_exit_4_before_tests_run(pytester, content, fragments):
    marker = pytester.path / "ran"
    pytester.makepyfile(f"def test_x(): open({str(marker)!r}, 'w').close()")
    (pytester.path / "t.toml").write_text(content)
    result = pytester.runpytest("--opperf", "--opperf-thresholds=t.toml")
    assert_one_line_usage_error(result, "--opperf-thresholds t.toml", "t.toml: ", *fragments)
    assert not marker.exists()


def test_internal_error_in_a_hook_never_passes_silently(pytester):
    pytester.makeconftest("""
        def pytest_opperf_modify_results(config, results):
            raise RuntimeError("hook bug")
    """)
    pytester.makepyfile(test_suite=e2e(steps=2))
    result = pytester.runpytest("--opperf")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["error: internal error in the gate: RuntimeError: hook bug"])
    assert "Traceback" not in result.stdout.str()


def test_a_baseline_without_machine_facts_does_not_gate_time(pytester):
    """A baseline that does not say which hardware it ran on is not known to be from this one:
    with time = "gate" its times are drift, in one warning line."""
    base = save_baseline(pytester, relu_ms=1.0)
    data = json.loads(base.read_text())
    data["machine"] = {}
    base.write_text(json.dumps(data))
    pytester.makepyfile(test_suite=e2e(relu_ms=3.0))
    pytester.makefile(".toml", t='[regression]\ntime = "gate"\n')
    result = pytester.runpytest("--opperf", f"--opperf-baseline={base}",
                                "--opperf-thresholds=t.toml", "--opperf-json=new.json")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["gate: PASSED (*",
                                 "warning: baseline * is from unknown hardware*"])
    gate = json.loads((pytester.path / "new.json").read_text())["gate"]
    assert [w for w in gate["warnings"] if "hardware" in w] == [
        f"baseline {base} is from unknown hardware (the baseline records no device_class, cpu): "
        'time is advisory drift, not gated (time = "gate" needs the same hardware and workload); '
        "counts and limits still gate"]
    assert not gate["drift"]["gating"] and gate["drift"]["beyond"] > 0
