"""Through pytest: a gate that checked nothing never passes, and a baseline is never lost."""

import json

import pytest

from tests.opperf_suites import assert_one_line_usage_error, e2e, inner_run_env  # noqa: F401

pytest_plugins = ["pytester"]

THREE = e2e(name="test_a", steps=3) + '''

def test_b(opperf):
    with opperf.measure() as run:
        for _ in range(3):
            train_step()
            run.step(examples=4)

def test_c(opperf):
    with opperf.measure() as run:
        for _ in range(3):
            train_step()
            run.step(examples=4)
'''


def ids(path):
    return [r["id"] for r in json.loads(path.read_text())["runs"]]


# --- a gate that checked nothing must not pass -----------------------------------------


def test_run_ids_do_not_depend_on_the_invocation_directory(pytester):
    (pytester.path / "root").mkdir()
    (pytester.path / "suite").mkdir()
    (pytester.path / "suite" / "test_suite.py").write_text(e2e(steps=2))
    # files outside the rootdir: pytest names them after the argument they were collected from
    pytester.runpytest("--rootdir=root", "suite", "--opperf", "--opperf-json=a.json")
    pytester.runpytest("--rootdir=root", "suite/test_suite.py", "--opperf", "--opperf-json=b.json")
    assert (
        ids(pytester.path / "a.json")
        == ids(pytester.path / "b.json")
        == ["../suite/test_suite.py::test_train"]
    )


def test_a_baseline_of_another_workload_fails_the_gate_with_one_line(pytester):
    pytester.makepyfile(test_suite=e2e(steps=2))
    assert pytester.runpytest("--opperf", "--opperf-save=base.json").ret == 0
    pytester.makepyfile(test_other=e2e(name="test_other", steps=2))
    (pytester.path / "test_suite.py").unlink()
    result = pytester.runpytest("--opperf", "--opperf-baseline=base.json", "--opperf-markdown=r.md")
    assert result.ret == 1
    result.stdout.fnmatch_lines([
        "gate: FAILED (1 violation(s) in 1 checks; baseline */base.json)",
        "FAIL (session) baseline_match", "     baseline /*"])
    assert "**Gate: FAILED**" in (pytester.path / "r.md").read_text()


def test_an_interrupted_session_never_writes_gate_passed(pytester, monkeypatch):
    summary = pytester.path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    pytester.makepyfile(
        test_suite=e2e(name="test_a", steps=2) + "\ndef test_stop():\n    raise KeyboardInterrupt\n"
    )
    result = pytester.runpytest(
        "--opperf", "--opperf-markdown=r.md", "--opperf-json=r.json", no_reraise_ctrlc=True
    )
    assert result.ret == 2  # pytest's "interrupted"
    result.stdout.fnmatch_lines(
        ["gate: INCOMPLETE (session interrupted (*), not every run was measured; 0 checks*"]
    )
    for text in ((pytester.path / "r.md").read_text(), summary.read_text()):
        assert "PASSED" not in text and "**Gate: INCOMPLETE** (session interrupted" in text
    gate = json.loads((pytester.path / "r.json").read_text())["gate"]
    assert gate["passed"] is False and gate["incomplete"].startswith("session interrupted")


def test_exitfirst_is_an_incomplete_session(pytester):
    pytester.makepyfile(
        test_suite="def test_bad():\n    assert False\n" + e2e(name="test_z", steps=2)
    )
    result = pytester.runpytest("--opperf", "-x")
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        ["gate: INCOMPLETE (session interrupted (stopping after 1 failures)*"]
    )


# --- never lose a baseline ----------------------------------------------------------------


def save_three(pytester):
    pytester.makepyfile(test_suite=THREE)
    assert pytester.runpytest("--opperf", "--opperf-save=base.json").ret == 0
    base = pytester.path / "base.json"
    assert ids(base) == ["test_suite.py::test_a", "test_suite.py::test_b", "test_suite.py::test_c"]
    return base


@pytest.mark.parametrize("args, reason", [
    (["-k", "test_b"], "2 test(s) deselected"),
    (["-x"], "interrupted: stopping after 1 failures"),
    (["ctrl-c"], "interrupted: KeyboardInterrupt"),
])
def test_a_partial_session_keeps_the_runs_it_did_not_measure(pytester, args, reason):
    base = save_three(pytester)
    before = {r["id"]: r for r in json.loads(base.read_text())["runs"]}
    suite = THREE.replace(
        "examples=4", "examples=8"
    )  # the runs measured now differ from the saved ones
    if args[0] in (
        "-x",
        "ctrl-c",
    ):  # test_b stops the session: its run and test_c's are not measured
        stop = "assert 0" if args[0] == "-x" else "raise KeyboardInterrupt"
        suite = suite.replace("def test_b(opperf):\n", f"def test_b(opperf):\n    {stop}\n")
    pytester.makepyfile(test_suite=suite)
    result = pytester.runpytest(
        "--opperf",
        "--opperf-save=base.json",
        *[a for a in args if a != "ctrl-c"],
        no_reraise_ctrlc=True,
    )
    after = {r["id"]: r for r in json.loads(base.read_text())["runs"]}
    assert list(after) == list(before)  # nothing dropped, in the file's order
    measured = {"-k": ["test_suite.py::test_b"]}.get(args[0], ["test_suite.py::test_a"])
    for run_id in before:
        assert after[run_id]["examples"] == (24 if run_id in measured else 12)
    result.stdout.fnmatch_lines(
        [
            f"note: partial session ({reason}*): saved 1 measured run(s) and kept 2 run(s) "
            "of the existing baseline */base.json that this session did not measure"
        ]
    )


def test_a_partial_session_refuses_to_replace_an_unreadable_baseline(pytester):
    base = save_three(pytester)
    base.write_text("{broken")
    result = pytester.runpytest("--opperf", "--opperf-save=base.json", "-k", "test_b")
    assert result.ret == 4
    result.stdout.fnmatch_lines(
        [
            "error: --opperf-save base.json: not saved: partial session (2 test(s) "
            "deselected), and the existing baseline cannot be read *not valid JSON*"
        ]
    )
    assert base.read_text() == "{broken"


def test_a_complete_session_replaces_the_baseline(pytester):
    base = save_three(pytester)
    pytester.makepyfile(test_suite=e2e(name="test_a", steps=2))
    result = pytester.runpytest("--opperf", "--opperf-save=base.json")
    assert result.ret == 0 and ids(base) == ["test_suite.py::test_a"]
    assert "partial session" not in result.stdout.str()


def test_save_to_a_new_directory_with_a_trailing_slash(pytester):
    pytester.makepyfile(test_suite=e2e(steps=2))
    result = pytester.runpytest("--opperf", "--opperf-save=new/dir/")
    assert result.ret == 0, result.stdout.str()
    assert ids(pytester.path / "new" / "dir" / "cpu-small.json") == ["test_suite.py::test_train"]
    (pytester.path / "afile").write_text("")
    assert_one_line_usage_error(pytester.runpytest("--opperf", "--opperf-save=afile/sub/"),
                                "--opperf-save afile/sub/", "afile is not a directory")


# --- what a suite hands the plugin ---------------------------------------------------------


@pytest.mark.parametrize(
    "body, message",
    [
        (
            'with opperf.measure(config={"lr": float("nan")}) as run:\n'
            "        run.step(examples=1)",
            "opperf.measure: run 'test_x.py::test_x': config['lr'] is nan, which JSON cannot hold",
        ),
        (
            'with opperf.measure(config={"shape": {1, 2}}) as run:\n        run.step(examples=1)',
            "config['shape'] is set {1, 2}, which JSON cannot hold",
        ),
        (
            'with opperf.measure() as run:\n        run.add_work("conv2d", flops=float("inf"))',
            "run 'test_x.py::test_x': add_work('conv2d', flops=...) "
            "expects a finite number >= 0, given inf",
        ),
        (
            "with opperf.measure() as run:\n        run.step(examples=-5)",
            "step(examples=...) expects an int >= 0, given -5",
        ),
        (
            'with opperf.measure(name="x"):\n        pass\n'
            '    with opperf.measure(name="x"):\n        pass',
            "name 'x' is already used by another window of this test",
        ),
        (
            "with opperf.measure():\n        with opperf.measure():\n            pass",
            "a window cannot open inside the open window 'test_x.py::test_x'",
        ),
    ],
)
def test_bad_values_fail_their_test_with_a_message_and_the_rest_is_written(pytester, body, message):
    pytester.makepyfile(
        test_x=f"def test_x(opperf):\n    {body}\n\n" + e2e(name="test_ok", steps=2)
    )
    result = pytester.runpytest("--opperf", "--opperf-json=r.json")
    result.assert_outcomes(passed=1, failed=1)
    assert message in result.stdout.str()
    first = (
        ["test_x.py::test_x#x"] if "already used" in message else []
    )  # the first window was fine
    assert ids(pytester.path / "r.json") == first + ["test_x.py::test_ok"]


def test_regions_on_other_threads_and_exits_out_of_order_are_said_in_the_report(pytester):
    pytester.makepyfile(test_x="""
        import threading
        from pytest_opperf import timers
        def test_x(opperf):
            with opperf.measure() as run:
                t = threading.Thread(target=lambda: timers.timer("backward").__enter__())
                t.start()
                t.join()
                a, b = timers.timer("a"), timers.timer("b")
                a.__enter__()
                b.__enter__()
                a.__exit__(None, None, None)
                run.step(examples=1)
    """)
    result = pytester.runpytest("--opperf")
    result.stdout.fnmatch_lines(
        [
            "note: 1 region(s) timed on other threads while this window was open "
            "are not recorded (only the window's own thread is): backward x1",
            "note: 1 region exit(s) out of order (first: 'a' closed while 'b' was still open "
            "inside it); stats first seen after it may have the wrong parent",
        ]
    )


# --- pytest-benchmark ------------------------------------------------------------------------

BENCHMARKS = """
import pytest

NOW_S = [0.0]

def clock():
    NOW_S[0] += 1e-3
    return NOW_S[0]

pytestmark = pytest.mark.benchmark(timer=clock)

def test_op(opperf_benchmark):
    opperf_benchmark.pedantic(sum, args=(range(3),), rounds=5)

def test_plain(benchmark):
    benchmark.pedantic(sum, args=(range(3),), rounds=4)

def test_other():
    pass
"""


def test_benchmark_only_runs_opperf_benchmarks(pytester):
    pytester.makepyfile(test_b=BENCHMARKS)
    result = pytester.runpytest("--opperf", "--opperf-json=r.json", "--benchmark-only", "-rs")
    result.assert_outcomes(passed=2, skipped=1)  # test_other is no benchmark
    result.stdout.fnmatch_lines(
        ["SKIPPED [1] test_b.py: Skipping non-benchmark (--benchmark-only active)."]
    )
    assert ids(pytester.path / "r.json") == ["test_b.py::test_op"]


def test_plain_benchmark_fixtures_are_counted_or_recorded_on_request(pytester):
    pytester.makepyfile(test_b=BENCHMARKS)
    result = pytester.runpytest("--opperf", "--opperf-json=r.json")
    result.stdout.fnmatch_lines(
        [
            "note: 1 test(s) use pytest-benchmark's plain `benchmark` fixture and are not in "
            "the opperf results (use opperf_benchmark, or --opperf-record-benchmarks *"
        ]
    )
    assert ids(pytester.path / "r.json") == ["test_b.py::test_op"]
    result = pytester.runpytest("--opperf", "--opperf-json=r.json", "--opperf-record-benchmarks")
    assert "plain `benchmark` fixture" not in result.stdout.str()
    runs = {r["id"]: r for r in json.loads((pytester.path / "r.json").read_text())["runs"]}
    plain = runs["test_b.py::test_plain"]
    assert (plain["kind"], plain["batches"], plain["stats"][0]["name"]) == ("op", 4, "test_plain")
    assert (
        plain["stats"][0]["samples_ms"] == [pytest.approx(1.0)] * 4
    )  # the fake clock: 1 ms per round
    assert plain["config"]["timer"] == "pytest-benchmark"


def test_aliasing_benchmark_to_opperf_benchmark_is_a_usage_error(pytester):
    pytester.makeconftest("import pytest\n@pytest.fixture\ndef benchmark(opperf_benchmark):\n"
                          "    return opperf_benchmark\n")
    pytester.makepyfile(test_b=BENCHMARKS)
    result = pytester.runpytest("--opperf")
    assert result.ret == 4 and "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    (error,) = [
        line for line in result.stderr.lines if line.startswith("ERROR:")
    ]  # at collection: stderr
    assert (
        "the `benchmark` fixture is redefined on top of opperf_benchmark (in conftest.py)" in error
        and "--opperf-record-benchmarks" in error
    )


def test_an_xdist_session_with_untimed_benchmarks_keeps_the_saved_op_runs(pytester):
    pytester.makepyfile(test_b=BENCHMARKS, test_suite=e2e(steps=2))
    assert pytester.runpytest("--opperf", "--opperf-save=base.json").ret == 0
    assert ids(pytester.path / "base.json") == ["test_b.py::test_op", "test_suite.py::test_train"]
    result = pytester.runpytest("--opperf", "--opperf-save=base.json", "-n", "2")
    assert ids(pytester.path / "base.json") == ["test_b.py::test_op", "test_suite.py::test_train"]
    result.stdout.fnmatch_lines(
        [
            "note: partial session (1 per-op benchmark(s) untimed): saved 1 measured run(s) "
            "and kept 1 run(s) of the existing baseline *"
        ]
    )


def test_a_run_a_hook_made_unwritable_is_left_out_with_an_error_and_the_rest_is_written(pytester):
    pytester.makeconftest("""
        def pytest_opperf_modify_results(config, results):
            results.runs[0].config["loss"] = float("nan")
    """)
    pytester.makepyfile(test_a=e2e(name="test_a", steps=2), test_b=e2e(name="test_b", steps=2))
    result = pytester.runpytest("--opperf", "--opperf-json=r.json", "--opperf-markdown=r.md")
    assert result.ret == 4
    result.stdout.fnmatch_lines(
        [
            "error: run 'test_a.py::test_a' not written: run['config']['loss'] is nan, "
            "which JSON cannot hold (give a finite number)"
        ]
    )
    assert (
        ids(pytester.path / "r.json") == ["test_b.py::test_b"] and (pytester.path / "r.md").exists()
    )
