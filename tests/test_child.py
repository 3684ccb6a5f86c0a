"""A child pytest of the plugin (an A/B side, the valgrind child) is a clean room: every option
declares what a child gets, a child takes only what its parent fixed (not the user's command line,
ini keys, addopts or PYTEST_ADDOPTS), and SIGTERM of the parent ends a valgrind child too."""

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from pytest_opperf.glue import child
from pytest_opperf.glue.options import CHILD_POLICIES, FLAGS, OPTIONS, VALUED_OPTIONS, child_options
from pytest_opperf.glue.settings import Settings
from tests.test_plugin_workcount import SUITE

pytest_plugins = ["pytester"]


def test_every_option_declares_a_child_policy(pytester):
    names = [name for name, *_ in OPTIONS] + [name.replace("_", "-") for name, *_ in FLAGS]
    assert child.policy_problems(CHILD_POLICIES, names) == []
    # and every --opperf-* option pytest knows is one of the table's: none added around it
    result = pytester.runpytest("--help")
    shown = {word.split("=")[0].rstrip(",;.:)") for line in result.stdout.lines
             for word in line.split() if word.startswith("--opperf-")}
    assert shown and shown == {f"--opperf-{name}" for name in CHILD_POLICIES}
    # and every ini key of the plugin is an option's (so it has a policy), or one of the two
    # that are no option: an output or input added as an ini key alone would fail here
    keys = {line.split()[0] for line in result.stdout.lines
            if line.startswith("  opperf_") and line.split()[0].isidentifier()}
    not_options = {"opperf_enabled",  # a child is always given --opperf
                   "opperf_executor_stat"}  # which stat is executor time: read by every side
    assert keys == {f"opperf_{name.replace('-', '_')}" for name in CHILD_POLICIES} | not_options


def test_a_policy_problem_is_named():
    assert child.policy_problems({"json": "passed"}, ["json", "trace"]) == [
        "--opperf-json: child policy 'passed', expected one of fixed|stripped",
        "--opperf-trace declares no child policy"]


def test_a_child_gets_the_fixed_options_and_nothing_else():
    options = child_options(Settings(workload="tiny", count_steps=3, nvtx=True))
    assert options == {"workload": "tiny", "device": "auto", "timing": "events",
                       "count-steps": "3", "count-timeout": "300", "record-benchmarks": "false",
                       "nvtx": "true", "l2-flush": "false"}
    assert {name for name, policy in CHILD_POLICIES.items() if policy == "fixed"} == {
        *options, "trace"}
    with pytest.raises(ValueError, match="--opperf-json is stripped for a child"):
        child_options(Settings(), json="out.json")
    assert child.argv_options(options, {"count-steps": "3", "nvtx": "false"}) == [
        "--opperf-workload=tiny", "--opperf-device=auto", "--opperf-timing=events",
        "--opperf-count-timeout=300", "--opperf-nvtx"]


def test_a_childs_environment_drops_the_users_options_and_outputs():
    env = child.environment({"workload": "tiny"}, {"PYTEST_ADDOPTS": "--opperf-history=h.db",
                                                   "GITHUB_STEP_SUMMARY": "/s", "HOME": "/h"})
    assert env == {"HOME": "/h", child.OPTIONS_ENV: '{"workload": "tiny"}'}
    assert child.parent_options(env) == {"workload": "tiny"}
    assert child.parent_options({}) is None
    with pytest.raises(child.ChildError, match="not JSON"):
        child.parent_options({child.OPTIONS_ENV: "{"})
    with pytest.raises(child.ChildError, match="not an object"):
        child.parent_options({child.OPTIONS_ENV: '{"workload": 1}'})


def test_every_opperf_option_is_stripped_from_a_childs_arguments():
    args = ["suites/", "--opperf", "--opperf-history", "h.db", "--opperf-json=x.json", "-k",
            "conv", "--opperf-record-benchmarks", "--opperf-shiny=1", "-x"]
    assert child.strip_opperf_args(args, VALUED_OPTIONS) == ["suites/", "-k", "conv", "-x"]


def test_a_child_ignores_the_users_outputs_history_and_gate_wherever_given(pytester,
                                                                          monkeypatch):
    pytester.makepyfile(test_suite=SUITE)
    pytester.path.joinpath("t.toml").write_text(
        '[[limit]]\nrun = "*"\nmin_examples_per_sec = 1e12\n')
    pytester.makeini("[pytest]\nopperf_history = h.db\nopperf_markdown = m.md\n"
                     "addopts = --opperf-thresholds=t.toml --opperf-json=a.json\n")
    # the user's session: every one of these is applied (the limit fails it)
    result = pytester.runpytest_subprocess("--opperf", "--opperf-trace=t.json")
    assert result.ret == 1, result.stdout.str()
    assert all((pytester.path / name).exists() for name in ("h.db", "m.md", "a.json", "t.json"))
    for name in ("h.db", "m.md", "a.json", "t.json"):
        (pytester.path / name).unlink()
    # a child: only what its parent fixed
    monkeypatch.setenv(child.OPTIONS_ENV, json.dumps({"workload": "tiny", "count-steps": "1"}))
    monkeypatch.setenv("PYTEST_ADDOPTS", "--opperf-save=s.json")
    result = pytester.runpytest_subprocess("--opperf", "--opperf-trace=t.json",
                                           "--opperf-baseline=nothing.json")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    assert not [p.name for p in pytester.path.iterdir()
                if p.name in ("h.db", "m.md", "a.json", "t.json", "s.json")]
    result.stdout.fnmatch_lines(["*gate: PASSED (0 checks*"])


def test_a_bad_child_role_is_one_line(pytester, monkeypatch):
    pytester.makepyfile(test_suite=SUITE)
    monkeypatch.setenv(child.OPTIONS_ENV, json.dumps({"workload": "huge"}))
    result = pytester.runpytest_subprocess("--opperf")
    assert result.ret == 4
    assert "--opperf-workload (fixed by the parent): expected one of" in result.stderr.str()


needs_valgrind = pytest.mark.skipif(shutil.which("valgrind") is None,
                                    reason="valgrind is not installed")


@needs_valgrind
def test_the_valgrind_child_keeps_out_of_the_users_history_and_limits(pytester, monkeypatch):
    """The user's PYTEST_ADDOPTS names a history and an ini addopts a limit the child (slow under
    valgrind) would fail: one session in the history, and the instructions counted."""
    pytester.makepyfile(test_suite=SUITE.replace("def test_train(opperf):",
                                                 "@pytest.mark.parametrize('p', ['a#b c\\'d'])\n"
                                                 "def test_train(opperf, p):").replace(
        "import os\n", "import os\nimport pytest\n"))
    pytester.path.joinpath("t.toml").write_text(
        '[[limit]]\nrun = "*"\nmax_python_share = 0.9999\n')
    pytester.makeini("[pytest]\naddopts = --opperf-thresholds=t.toml\n")
    monkeypatch.setenv("PYTEST_ADDOPTS", f"--opperf-history={pytester.path / 'h.db'}")
    result = pytester.runpytest_subprocess("--opperf", "--opperf-instructions",
                                           "--opperf-json=r.json", timeout=300)
    out = result.stdout.str() + result.stderr.str()
    assert "not counted" not in out, out
    runs = json.loads((pytester.path / "r.json").read_text())["runs"]
    assert runs[0]["id"].endswith("[a#b c'd]")
    assert runs[0]["work"]["instructions"] > 1000, out
    import sqlite3

    with sqlite3.connect(pytester.path / "h.db") as db:
        assert db.execute("select count(*) from opperf_sessions").fetchone() == (1,)


def test_sigterm_ends_a_child_under_valgrind_too(tmp_path):
    """The child runs in a session of its own (SIGTERM to the parent's group does not reach it):
    the parent kills it before it ends, and ends by the signal."""
    pid_file = tmp_path / "child.pid"
    script = textwrap.dedent(f"""
        import sys
        from pytest_opperf.workcounts import valgrind_run
        valgrind_run.problem = lambda: None
        valgrind_run.command = lambda argv, out: argv
        child = [sys.executable, "-c",
                 "import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); "
                 "time.sleep(60)"]
        valgrind_run.run_counted(child, {str(tmp_path / 'out')!r}, timeout_s=60)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], cwd=os.getcwd())
    deadline = time.monotonic() + 30
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    grandchild = int(pid_file.read_text())
    parent.send_signal(signal.SIGTERM)
    assert parent.wait(timeout=30) == -signal.SIGTERM
    for _ in range(100):
        try:
            os.kill(grandchild, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        os.kill(grandchild, signal.SIGKILL)
        pytest.fail("the child under valgrind outlived its parent's SIGTERM")
