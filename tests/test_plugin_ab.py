"""A/B sessions end to end: a synthetic suite in a temporary git repository, base against head.

The head is the working tree (uncommitted changes), the base the commit
before them (``--opperf-compare=HEAD``) or a clone (DIR). Injected changes are
3x, so that the verdicts hold on a busy machine; what is asserted beyond
them holds by construction (the order of events, files, exit statuses).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.ab_suites import alive, git, make_repo, suite, worktrees
from tests.opperf_suites import assert_one_line_usage_error, inner_run_env  # noqa: F401
from tests.results_schema import assert_valid

pytest_plugins = ["pytester"]

HEAD_PACKAGE = Path(__file__).resolve().parent.parent / "pytest_opperf"


def ab(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(
        "--opperf", "--opperf-compare-timeout=60", "-p", "no:cacheprovider", *args
    )


def compare_json(pytester: pytest.Pytester) -> dict:
    data = json.loads((pytester.path / "out.json").read_text())
    assert_valid(data)  # the published results format, compare object included
    return data


@pytest.fixture
def traces(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Path]:
    paths = {name: tmp_path_factory.mktemp(name) for name in ("where", "pids")}
    for name, path in paths.items():
        monkeypatch.setenv(f"AB_{name.upper()}", str(path))
    return paths


def test_rev_mode_catches_a_3x_slower_head_and_imports_each_sides_own_code(pytester, traces):
    make_repo(pytester.path, {"test_s.py": suite(n=2000)}, {"test_s.py": suite(n=6000)})
    result = ab(pytester, "--opperf-compare=HEAD", "--opperf-json=out.json")
    out = result.stdout.str()
    assert result.ret == 1, out
    result.assert_outcomes(passed=2)  # the head's test reports are the session's
    assert "opperf A/B: base REV" in out and "2 test(s) on both sides" in out
    assert "Traceback" not in out
    for metric in ("test_s.py::test_op call_ms:busy", "test_s.py::test_e2e step_ms:relu",
                   "test_s.py::test_e2e examples_per_sec"):
        assert f"FAIL {metric}\n" in out, out
    data = compare_json(pytester)
    assert data["compare"]["base"].startswith("REV ") and data["compare"]["added"] == []
    assert {r["id"] for r in data["runs"]} == {"test_s.py::test_op", "test_s.py::test_e2e"}
    op = next(r for r in data["runs"] if r["kind"] == "op")
    assert (
        op["config"]["benchmark"]["ab"] is True
    )  # rounds chosen by the controller, not calibrated
    e2e = next(r for r in data["runs"] if r["kind"] == "e2e")
    assert e2e["batches"] == 4 and len(e2e["step_ms"]) == 4
    verdicts = {(d["run"], d["metric"]): d["verdict"] for d in data["compare"]["decisions"]}
    assert verdicts[("test_s.py::test_e2e", "count:relu")] == "unchanged"
    # 3 pairs per run of the e2e test (4 steps, the first is warm-up): it ran again on both sides
    # until it had min_pairs (10), so at least 4 times (more where the machine is loaded and a
    # metric stays undecided); the session's result is the first run's
    pairs = {(d["run"], d["metric"]): d["pairs"] for d in data["compare"]["decisions"]}
    runs = pairs[("test_s.py::test_e2e", "step_ms:relu")] // 3
    assert pairs[("test_s.py::test_e2e", "step_ms:relu")] == 3 * runs and runs >= 4
    # the base side imported the base's framework from its worktree, both sides the head's plugin
    base_rf, base_plugin = (traces["where"] / "base").read_text().split()
    head_rf, head_plugin = (traces["where"] / "head").read_text().split()
    base_root, head_root = Path(base_rf).parent.parent, Path(head_rf).parent.parent
    assert "opperf-ab-" in base_rf and base_root.name.rstrip("-") == "base", base_rf
    assert len(str(base_root)) == len(str(head_root))  # the worktree padded to the head's length
    assert (
        Path(head_rf).resolve() == (pytester.path / "reference_framework" / "__init__.py").resolve()
    )
    assert base_plugin == head_plugin == str(HEAD_PACKAGE / "__init__.py")
    # nothing left: the worktree, its directory, the side processes
    assert len(worktrees(pytester.path)) == 1
    assert not Path(base_rf).exists()
    # each run after the first was in two fresh side processes, started in the other order
    assert f"; {runs} generation(s) of side processes" in data["compare"]["notes"][-1]
    pids = [int(p.name) for p in traces["pids"].iterdir()]
    assert len(pids) == 2 * runs and not any(alive(pid) for pid in pids)


def test_dir_mode_uses_the_checkout_as_it_is(pytester, traces, tmp_path_factory):
    make_repo(pytester.path, {"test_s.py": suite(n=6000)}, {"test_s.py": suite(n=2000)})
    base = tmp_path_factory.mktemp("base-checkout") / "repo"
    git(pytester.path, "clone", "-q", str(pytester.path), str(base))
    result = ab(
        pytester, f"--opperf-compare={base}", "--opperf-json=out.json", "test_s.py::test_op"
    )
    out = result.stdout.str()
    assert result.ret == 0, out  # the head is 3x faster: improved, not a failure
    data = compare_json(pytester)
    assert data["compare"]["base"] == f"DIR {base.resolve()}"
    (decision,) = data["compare"]["decisions"]
    assert (decision["run"], decision["metric"], decision["verdict"]) == (
        "test_s.py::test_op",
        "call_ms:busy",
        "improved",
    )
    assert (traces["where"] / "base").read_text().split()[0] == str(
        base / "reference_framework" / "__init__.py"
    )
    assert base.is_dir()  # a given checkout is left alone


# The head's conftest (uncommitted: not in the base's clone) registers two extension modules, one
# in the head's checkout and one outside both checkouts (files of other bytes than any other).
EXTENSIONS_CONFTEST = """
import importlib.machinery, os, sys, types

SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]
HERE = os.path.dirname(__file__)
# each side's own build of an extension outside its checkout; the head's code also loads one of
# its checkout's
for name, where in (("_opperf_env_ext", os.path.join(os.environ["AB_ELSEWHERE"],
                                                     os.path.basename(HERE))),
                    ("reference_framework._kernels", os.path.join(HERE, "reference_framework")))[
                        :{count}]:
    os.makedirs(where, exist_ok=True)
    path = os.path.join(where, name.rpartition(".")[2] + SUFFIX)
    with open(path, "wb") as f:
        f.write((name + HERE).encode())
    module = types.ModuleType(name)
    module.__file__ = path
    sys.modules[name] = module
"""


def test_extensions_the_sides_load_differently_are_said(pytester, tmp_path_factory, monkeypatch):
    make_repo(pytester.path, {"test_s.py": suite(n=6000),
                              "conftest.py": EXTENSIONS_CONFTEST.replace("{count}", "1")},
              {"test_s.py": suite(n=2000),
               "conftest.py": EXTENSIONS_CONFTEST.replace("{count}", "2")})
    base = tmp_path_factory.mktemp("base-checkout") / "repo"
    git(pytester.path, "clone", "-q", str(pytester.path), str(base))
    monkeypatch.setenv("AB_ELSEWHERE", str(tmp_path_factory.mktemp("elsewhere")))
    result = ab(pytester, f"--opperf-compare={base}", "--opperf-json=out.json",
                "test_s.py::test_op")
    out = result.stdout.str()
    assert result.ret == 0, out  # a warning, not a failure
    loud = ("the two sides load other compiled extensions from outside their checkouts: "
            "_opperf_env_ext (other bytes): an environment difference, not the code's")
    notes = compare_json(pytester)["compare"]["notes"]
    assert notes[0].startswith(loud), notes
    assert ("the two sides' code loads other compiled extensions (the change under test): "
            "reference_framework._kernels (on the head only)") in notes
    assert f"opperf: A/B: {loud}" in out  # and after the report, in red


def test_the_sides_hold_a_baton_and_the_wait_is_not_in_the_window(pytester, monkeypatch):
    make_repo(pytester.path, {"test_s.py": suite(n=3000, steps=6)})
    marks = pytester.path.parent / f"marks-{pytester.path.name}"
    monkeypatch.setenv("AB_MARKS", str(marks))
    result = ab(pytester, "--opperf-compare=HEAD", "--opperf-json=out.json")
    assert result.ret in (0, 1), result.stdout.str()  # A/A: the verdicts do not matter here
    events = marks.read_text().split()
    assert {e[:-1] for e in events} == {"base", "head"}
    for before, after in zip(
        events[::2], events[1::2], strict=True
    ):  # never both inside timed work
        assert before.endswith("+") and after == before[:-1] + "-", events
    steps = [
        e for e in events[-4 * 6 :]
    ]  # the e2e test runs last: its 6 steps alternate side by side
    sides = [e[:-1] for e in steps[::2]]
    assert all(sides[i] != sides[i + 1] for i in range(0, len(sides), 2)), sides
    data = compare_json(pytester)
    e2e = next(r for r in data["runs"] if r["kind"] == "e2e")
    # the head's window holds its own steps only: its wall time is the sum of its steps (the other
    # side's steps, which took as long, are left out)
    assert e2e["wall_s"] * 1e3 == pytest.approx(sum(e2e["step_ms"]), rel=0.05, abs=2.0)


def test_added_and_removed_tests_are_reported_not_failures(pytester):
    make_repo(
        pytester.path,
        {"test_a.py": "def test_same():\n    pass\n\ndef test_old():\n    pass\n"},
        {"test_a.py": "def test_same():\n    pass\n\ndef test_new():\n    pass\n"},
    )
    result = ab(pytester, "--opperf-compare=HEAD", "--opperf-json=out.json")
    out = result.stdout.str()
    assert result.ret == 0, out
    result.assert_outcomes(passed=2)  # the head's tests, test_new included
    assert "1 test(s) on both sides, 1 on the head only, 1 on the base only" in out
    data = compare_json(pytester)
    assert data["compare"]["added"] == ["test_a.py::test_new"]
    assert data["compare"]["removed"] == ["test_a.py::test_old"]


def test_undecided_metrics_show_in_the_gate_line_and_fail_on_request(pytester):
    make_repo(
        pytester.path,
        {
            "test_s.py": suite(n=500, steps=3),
            "thresholds.toml": "[compare]\nmin_pairs = 100000\nbudget_s = 0.001\n",
        },
    )
    result = ab(
        pytester,
        "--opperf-compare=HEAD",
        "--opperf-thresholds=thresholds.toml",
        "test_s.py::test_e2e",
        "--opperf-compare-undecided=warn",  # an A/A estimate may lie past the threshold
    )
    out = result.stdout.str()
    assert result.ret == 0, out
    undecided = [line for line in out.splitlines() if line.startswith("gate: PASSED (")]
    assert len(undecided) == 1 and "; A/B: " in undecided[0], out
    assert re.search(r" undecided( \(\d+ inconclusive\))?: test_s.py::test_e2e::\S+, "
                     r"test_s.py::test_e2e::\S+, test_s.py::test_e2e::\S+, \+\d+ more\)$",
                     undecided[0]), undecided[0]
    result = ab(
        pytester,
        "--opperf-compare=HEAD",
        "--opperf-thresholds=thresholds.toml",
        "test_s.py::test_e2e",
        "--opperf-compare-undecided=fail",
    )
    out = result.stdout.str()
    assert result.ret == 1, out
    assert "FAIL test_s.py::test_e2e step_ms:relu\n     A/B undecided after" in out


# --- faults ---------------------------------------------------------------------------------


BROKEN = {
    "fails": "def test_a():\n    assert 1 == 2, 'broken on the base'\n",
    "dies": "import os\n\ndef test_a():\n    os._exit(9)\n",
    "hangs": "import time\n\ndef test_a():\n    time.sleep(120)\n",
}


@pytest.mark.parametrize("fault", sorted(BROKEN))
def test_a_broken_base_fails_the_session_in_one_line(pytester, traces, fault):
    record = ("import os\nif os.environ.get('OPPERF_AB_SIDE'):\n"
              "    open(os.path.join(os.environ['AB_PIDS'], str(os.getpid())), 'w').close()\n")
    make_repo(pytester.path, {"conftest.py": record, "test_a.py": BROKEN[fault]},
              {"test_a.py": "def test_a():\n    pass\n"})
    result = pytester.runpytest_subprocess(
        "--opperf", "--opperf-compare=HEAD", "--opperf-compare-timeout=10"
    )
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == 1, out
    assert "Traceback" not in out
    expected = {
        "fails": "FAIL test_a.py::test_a ab:base",  # the message on the next line(s)
        "dies": "opperf: A/B aborted: the base side exited with status 9 "
        "while running test_a.py::test_a",
        "hangs": "opperf: A/B aborted: the base side hangs: no answer in 10 s "
        "while running test_a.py::test_a",
    }
    lines = [line for line in out.splitlines() if line.startswith(expected[fault][:40])]
    assert len(lines) == 1 and lines[0].startswith(expected[fault]), out
    assert fault != "fails" or "     the base side's test_a.py::test_a failed" in out
    pids = [int(p.name) for p in traces["pids"].iterdir()]
    assert len(pids) == 2 and not any(alive(pid) for pid in pids)
    assert len(worktrees(pytester.path)) == 1


def test_a_base_that_cannot_be_collected_is_a_usage_error(pytester):
    make_repo(
        pytester.path, {"test_a.py": "def test_a(:\n"}, {"test_a.py": "def test_a():\n    pass\n"}
    )
    result = pytester.runpytest_subprocess("--opperf", "--opperf-compare=HEAD")
    assert result.ret == 4
    (error,) = [line for line in result.stderr.lines if line.startswith("ERROR:")]
    assert error.startswith("ERROR: opperf: --opperf-compare=HEAD: the base REV ")
    assert error.endswith(
        " (HEAD) cannot collect the tests: test_a.py: SyntaxError: invalid syntax"
    )
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    assert len(worktrees(pytester.path)) == 1


@pytest.mark.parametrize(
    "sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["SIGINT", "SIGTERM", "SIGHUP"]
)
def test_an_interrupted_session_leaves_no_process_and_no_worktree(pytester, traces, sig):
    make_repo(pytester.path, {"test_s.py": suite(n=200, steps=10 ** 6)})
    command = [
        sys.executable,
        "-m",
        "pytest",
        "--opperf",
        "--opperf-compare=HEAD",
        "-p",
        "no:cacheprovider",
        "test_s.py::test_e2e",
    ]
    tmp = pytester.path / "tmp"  # its own: other A/B sessions on this machine use /tmp too
    tmp.mkdir()
    main = subprocess.Popen(
        command,
        cwd=pytester.path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp)},
        # as a terminal starts it: under nohup the session would inherit SIGHUP ignored, and it
        # keeps an ignored signal ignored (trap_signals)
        preexec_fn=lambda: signal.signal(sig, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 60
        while len(list(traces["pids"].iterdir())) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(list(traces["pids"].iterdir())) == 2, "the sides did not start"
        time.sleep(0.3)  # well inside the step loop
        main.send_signal(sig)
        out, _ = main.communicate(timeout=60)
    finally:
        if main.poll() is None:
            main.kill()
    assert main.returncode == 2, out  # interrupted
    assert "Traceback" not in out
    pids = [int(p.name) for p in traces["pids"].iterdir()]
    assert not any(alive(pid) for pid in pids)
    assert len(worktrees(pytester.path)) == 1
    assert not list(tmp.glob("opperf-ab-*"))


# --- bad input: one line, exit status 4, before any test runs ------------------------------


@pytest.mark.parametrize(
    "args, fragments",
    [
        (
            ["--opperf-compare=no-such-rev"],
            [
                "--opperf-compare=no-such-rev",
                "'no-such-rev' is neither a directory nor a revision of the repository",
            ],
        ),
        (
            ["--opperf-compare=elsewhere"],
            ["--opperf-compare=elsewhere", "is no checkout of this project", "it has no test_a.py"],
        ),
        (
            ["--opperf-compare=HEAD", "--opperf-compare-python=/no/such/python"],
            ["--opperf-compare-python=/no/such/python", "interpreter /no/such/python does not run"],
        ),
        *(
            (
                ["--opperf-compare=HEAD", f"--opperf-compare-timeout={value}"],
                ["--opperf-compare-timeout", f"'{value}'"],
            )
            for value in ("0", "inf", "1e10", "nan", "-5", "abc", "infinity")
        ),
    ],
    ids=["rev", "dir", "python", "timeout-0", "timeout-inf", "timeout-1e10", "timeout-nan",
         "timeout-negative", "timeout-text", "timeout-infinity"],
)
def test_bad_input_is_a_usage_error(pytester, args, fragments):
    make_repo(pytester.path, {"test_a.py": "def test_a():\n    pass\n"})
    (pytester.path / "elsewhere").mkdir()
    result = pytester.runpytest("--opperf", *args, "test_a.py")
    if fragments[0] == "--opperf-compare-timeout":  # argparse's own message, before any test
        text = result.stdout.str() + result.stderr.str()
        assert result.ret == 4 and fragments[1] in result.stderr.str()
        assert "expected a number of seconds in (0, 604800]" in result.stderr.str()
        assert "INTERNALERROR" not in text and "Traceback" not in text
        return
    assert_one_line_usage_error(result, *fragments)
    assert len(worktrees(pytester.path)) == 1


@pytest.mark.parametrize("value", ["inf", "1e10", "nan", "-1"])
def test_a_bad_timeout_in_the_ini_file_is_one_line(pytester, value):
    pytester.makeini(f"[pytest]\nopperf_compare_timeout = {value}\n")
    pytester.makepyfile(test_a="def test_a():\n    raise AssertionError('ran')\n")
    result = pytester.runpytest("--opperf")
    assert_one_line_usage_error(result, "ini opperf_compare_timeout",
                                f"expected a number of seconds in (0, 604800], got '{value}'")


def test_compare_needs_opperf(pytester):
    make_repo(pytester.path, {"test_a.py": "def test_a():\n    pass\n"})
    result = pytester.runpytest("--opperf-compare=HEAD")
    assert_one_line_usage_error(result, "--opperf-compare needs --opperf")


def test_a_base_on_another_interpreter_is_said_in_the_report_and_the_json(pytester, traces):
    """--opperf-compare-python: a base interpreter whose numpy differs (a wrapper that puts a
    numpy 0.0.1 distribution first on the path) is named in a note and the compare object."""
    make_repo(pytester.path, {"test_s.py": suite(n=200)})
    fake = pytester.path / "fake-site"
    info = fake / "numpy-0.0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: numpy\nVersion: 0.0.1\n")
    wrapper = pytester.path / "base-python"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH="{fake}:$PYTHONPATH" exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    result = ab(pytester, "--opperf-compare=HEAD", f"--opperf-compare-python={wrapper}",
                "--opperf-json=out.json", "--opperf-markdown=out.md", "test_s.py::test_op")
    out = result.stdout.str()
    assert "Traceback" not in out
    data = compare_json(pytester)
    interpreters = data["compare"]["interpreters"]
    assert interpreters["base"] == {"executable": str(wrapper), "python": interpreters["head"][
        "python"], "numpy": "0.0.1"}
    assert interpreters["head"]["executable"] == sys.executable
    note = data["compare"]["notes"][0]
    assert note.startswith("the base side runs another Python or numpy: base Python ")
    assert "numpy 0.0.1" in note
    assert "note: the base side runs another Python or numpy" in out
    assert "- note: the base side runs another Python or numpy" in (
        pytester.path / "out.md").read_text()


def test_collecting_only_runs_no_side_and_makes_no_worktree(pytester, traces):
    make_repo(pytester.path, {"test_s.py": suite(n=200)})
    result = ab(pytester, "--opperf-compare=HEAD", "--opperf-json=out.json", "--collect-only")
    out = result.stdout.str()
    assert result.ret == 0, out
    result.stdout.fnmatch_lines(["*<Function test_e2e>*", "opperf: no test ran (--collect-only): "
                                 "the opperf gate did not run and no file was written"])
    assert "opperf A/B" not in out
    assert list(traces["pids"].iterdir()) == []  # no side ran a test
    assert len(worktrees(pytester.path)) == 1 and not (pytester.path / "out.json").exists()


def test_a_second_sigterm_during_the_cleanup_prints_no_traceback(pytester, traces):
    """A job runner that cancels sends SIGTERM, and often again soon after: the first ends the
    session as Ctrl-C does, the second must not break the cleanup (sides, worktree, temp
    directory) or print a traceback."""
    make_repo(pytester.path, {"test_s.py": suite(n=200, steps=10 ** 6)})
    tmp = pytester.path / "tmp"  # its own: other A/B sessions on this machine use /tmp too
    tmp.mkdir()
    main = subprocess.Popen(
        [sys.executable, "-m", "pytest", "--opperf", "--opperf-compare=HEAD", "-p",
         "no:cacheprovider", "test_s.py::test_e2e"],
        cwd=pytester.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "TMPDIR": str(tmp)},
    )
    try:
        deadline = time.monotonic() + 60
        while len(list(traces["pids"].iterdir())) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(list(traces["pids"].iterdir())) == 2, "the sides did not start"
        main.send_signal(signal.SIGTERM)
        time.sleep(0.05)
        main.send_signal(signal.SIGTERM)
        out, _ = main.communicate(timeout=60)
    finally:
        if main.poll() is None:
            main.kill()
    assert main.returncode == 2, out  # interrupted, as by the first signal alone
    assert "Traceback" not in out and "INTERNALERROR" not in out, out
    pids = [int(p.name) for p in traces["pids"].iterdir()]
    assert not any(alive(pid) for pid in pids)
    assert len(worktrees(pytester.path)) == 1
    assert not list(tmp.glob("opperf-ab-*"))


def test_both_sides_freeze_their_collected_heap(pytester):
    suite = ("import gc\n\ndef test_frozen():\n"
             "    assert gc.get_freeze_count() > 1000, gc.get_freeze_count()\n")
    make_repo(pytester.path, {"test_f.py": suite})
    result = ab(pytester, "--opperf-compare=HEAD")
    assert result.ret == 0, result.stdout.str()  # a failure on the base side would be ab:base
    result.assert_outcomes(passed=1)


def test_a_killed_sessions_worktree_is_reclaimed_by_the_next_session(pytester, traces):
    """SIGKILL (an OOM kill, a CI cancellation) leaves the base worktree and its directory: the
    next A/B session of the repository removes them and says so in one line."""
    quick = "def test_q():\n    pass\n"
    make_repo(pytester.path, {"test_s.py": suite(n=200, steps=10 ** 6), "test_q.py": quick})
    tmp = pytester.path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    main = subprocess.Popen(
        [sys.executable, "-m", "pytest", "--opperf", "--opperf-compare=HEAD", "-p",
         "no:cacheprovider", "test_s.py::test_e2e"],
        cwd=pytester.path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        deadline = time.monotonic() + 60
        while len(list(traces["pids"].iterdir())) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(list(traces["pids"].iterdir())) == 2, "the sides did not start"
        main.kill()  # SIGKILL: no cleanup runs
        main.wait(timeout=60)
    finally:
        if main.poll() is None:
            main.kill()
    sides = [int(p.name) for p in traces["pids"].iterdir()]
    deadline = time.monotonic() + 60
    while any(alive(pid) for pid in sides) and time.monotonic() < deadline:
        time.sleep(0.1)  # the sides end when their controller's socket closes
    for pid in sides:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
    (killed,) = tmp.glob("opperf-ab-*")
    assert len(worktrees(pytester.path)) == 2 and (killed / "base").is_dir()  # left behind
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setenv("TMPDIR", str(tmp))
    try:
        result = ab(pytester, "--opperf-compare=HEAD", "test_q.py")
    finally:
        monkeypatch.undo()
    out = result.stdout.str() + "\n" + result.stderr.str()
    assert result.ret == 0, out
    (line,) = [line for line in out.splitlines() if " A/B: reclaimed " in line]
    assert line.startswith(f"opperf: A/B: reclaimed what 1 killed run(s) of this repository "
                           f"left (pid {main.pid}, gone): 1 git worktree(s) removed, and {killed}")
    assert worktrees(pytester.path) == [f"worktree {pytester.path.resolve()}"]
    assert not killed.exists() and not list(tmp.glob("opperf-ab-*"))
