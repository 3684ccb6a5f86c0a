"""Work counts through pytest: a counting pass's counts are saved, gate a later session against
that baseline (an extra call per op fails at its stat), and follow the options."""

import json

from tests.opperf_suites import assert_one_line_usage_error, inner_run_env  # noqa: F401

pytest_plugins = ["pytester"]

SUITE = """
import os
from pytest_opperf import timers

EXTRA = int(os.environ.get("OPPERF_TEST_EXTRA_CALLS", "0"))


def helper(x):
    return x * 2


def op(n):
    with timers.timer("elementwise_add", kernel=True):
        for i in range(n):
            helper(i)
        for _ in range(EXTRA):
            helper(0)


def step():
    with timers.timer("ExecutorRunTimer"):
        op(10)
        with timers.timer("relu", kernel=True):
            sum(range(5))


def test_train(opperf):
    with opperf.measure() as run:
        for _ in range(4):
            step()
            run.step(examples=2)
    run.counting_pass(step)
"""


def test_an_extra_call_per_op_fails_against_a_baseline_at_its_stat(pytester, monkeypatch):
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest("--opperf", "--opperf-save=base.json")
    assert result.ret == 0, result.stdout.str()
    work = json.loads((pytester.path / "base.json").read_text())["runs"][0]["work"]
    assert work["steps"] == 2 and work["stats"]["elementwise_add"]["py_calls"] == 10
    result.stdout.fnmatch_lines(["work per step (counting pass: 2 steps, * s): * bytecodes | "
                                 "* Python calls | * C calls; outside every timed region: *"])
    result = pytester.runpytest("--opperf", "--opperf-baseline=base.json")
    assert result.ret == 0, result.stdout.str()
    monkeypatch.setenv("OPPERF_TEST_EXTRA_CALLS", "1")
    result = pytester.runpytest("--opperf", "--opperf-baseline=base.json", "--opperf-json=new.json")
    assert result.ret == 1, result.stdout.str()
    result.stdout.fnmatch_lines([
        "FAIL test_suite.py::test_train py_calls:elementwise_add",
        "     +10.0% Python calls in elementwise_add: 11 per step, baseline 10 (exact)",
    ])
    failed = {v["metric"] for v in json.loads((pytester.path / "new.json").read_text())["gate"][
        "violations"]}
    assert failed == {"py_calls:elementwise_add", "bytecodes:elementwise_add"}


def test_count_steps_zero_counts_nothing(pytester):
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest("--opperf", "--opperf-count-steps=0", "--opperf-json=r.json")
    assert result.ret == 0, result.stdout.str()
    assert "work" not in json.loads((pytester.path / "r.json").read_text())["runs"][0]
    assert "work per step" not in result.stdout.str()


def test_without_opperf_the_pass_calls_nothing(pytester):
    pytester.makepyfile(test_suite=SUITE.replace("run.counting_pass(step)",
                                                 "run.counting_pass(lambda: 1 / 0)"))
    result = pytester.runpytest()
    assert result.ret == 0, result.stdout.str()


def test_bad_count_options_are_one_line(pytester):
    pytester.makepyfile(test_suite=SUITE)
    for option, fragment in (("--opperf-count-steps=-1", "--opperf-count-steps"),
                             ("--opperf-count-steps=1001", "--opperf-count-steps"),
                             ("--opperf-count-timeout=0", "--opperf-count-timeout")):
        result = pytester.runpytest("--opperf", option)
        assert result.ret == 4, result.stdout.str()
        assert fragment in result.stderr.str()
    pytester.makeini("[pytest]\nopperf_count_steps = many\n")
    assert_one_line_usage_error(pytester.runpytest("--opperf"), "opperf_count_steps")


def test_instructions_per_step_are_counted_under_valgrind(pytester):
    import shutil

    if shutil.which("valgrind") is None:
        import pytest

        pytest.skip("valgrind is not installed")
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest_subprocess("--opperf", "--opperf-instructions",
                                           "--opperf-json=r.json", timeout=300)
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    work = json.loads((pytester.path / "r.json").read_text())["runs"][0]["work"]
    assert work["instructions"] > 1000 and "valgrind" in work["instructions_cpu"]
    result.stdout.fnmatch_lines(["CPU instructions per step: * (valgrind, on *)"])


def test_instructions_without_valgrind_warn_and_keep_everything_else(pytester, monkeypatch):
    pytester.makepyfile(test_suite=SUITE)
    monkeypatch.setenv("PATH", str(pytester.path))  # no valgrind on it
    result = pytester.runpytest("--opperf", "--opperf-instructions", "--opperf-json=r.json")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["warning: --opperf-instructions: *valgrind*: no CPU "
                                 "instructions counted"])
    work = json.loads((pytester.path / "r.json").read_text())["runs"][0]["work"]
    assert work["stats"] and "instructions" not in work


def test_a_failing_child_is_one_warning_line(pytester):
    import shutil

    if shutil.which("valgrind") is None:
        import pytest

        pytest.skip("valgrind is not installed")
    # the test fails when it runs again, under valgrind: the first run leaves a file behind
    suite = SUITE.replace("    run.counting_pass(step)",
                          "    if MARK.exists():\n        raise AssertionError('second run')\n"
                          "    MARK.write_text('x')\n    run.counting_pass(step)")
    pytester.makepyfile(test_suite="import pathlib\nMARK = pathlib.Path(__file__).with_name("
                        "'ran-once')\n" + suite)
    result = pytester.runpytest_subprocess("--opperf", "--opperf-instructions",
                                           "--opperf-json=r.json", timeout=300)
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    result.stdout.fnmatch_lines(["warning: CPU instructions of test_suite.py::test_train not "
                                 "counted: * under valgrind exited with status 1*"])
    work = json.loads((pytester.path / "r.json").read_text())["runs"][0]["work"]
    assert work["stats"] and "instructions" not in work


def test_ab_compares_work_counts_exactly_and_names_the_added_call(pytester):
    from tests.ab_suites import make_repo, suite

    base = suite(after="run.counting_pass(lambda: busy(10))")
    head = suite(after="run.counting_pass(lambda: [busy(10), busy(1)])")
    make_repo(pytester.path, {"test_s.py": base}, {"test_s.py": head})
    result = pytester.runpytest_subprocess(
        "--opperf", "--opperf-compare=HEAD", "--opperf-compare-timeout=60", "-p",
        "no:cacheprovider", "--opperf-json=out.json", "test_s.py::test_e2e", timeout=600)
    out = result.stdout.str()
    assert result.ret == 1, out
    decisions = {d["metric"]: d for d in json.loads((pytester.path / "out.json").read_text())[
        "compare"]["decisions"]}
    added = decisions["py_calls:(outside)"]
    assert (added["verdict"], added["head"] - added["base"]) == ("regressed", 1)
    assert decisions["bytecodes:(outside)"]["verdict"] == "regressed"
    assert "Python calls in (outside): " in out and "(A/B, exact)" in out


def test_a_step_that_removes_the_tracer_loses_its_counts_and_the_gate_warns(pytester, monkeypatch):
    pytester.makepyfile(test_suite=SUITE.replace(
        "            sum(range(5))\n",
        "            sum(range(5))\n        if os.environ.get('OPPERF_TEST_UNTRACE'):\n"
        "            import sys\n            sys.settrace(None)\n"))
    assert pytester.runpytest("--opperf", "--opperf-save=base.json").ret == 0
    monkeypatch.setenv("OPPERF_TEST_UNTRACE", "1")
    monkeypatch.setenv("OPPERF_TEST_EXTRA_CALLS", "10")  # ten times the work: unseen, not passed
    result = pytester.runpytest("--opperf", "--opperf-baseline=base.json", "--opperf-json=new.json")
    result.stdout.fnmatch_lines([
        "*note: counting pass: no work counts, step 1 of 2 changed the tracing the counts come "
        "from: it called sys.settrace()*",
        "*warning: 1 run(s) have no work counts but their baseline runs have: not compared*"
        "test_suite.py::test_train*"])
    assert "work" not in json.loads((pytester.path / "new.json").read_text())["runs"][0]
    assert result.ret == 0  # the timed gate passes; the lost counts are the warning
