"""Files the plugin writes: results JSON, atomic saves that survive a kill, markdown, Chrome
trace."""

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pytest_opperf.records.reader import read_results
from tests.opperf_suites import e2e, inner_run_env  # noqa: F401

pytest_plugins = ["pytester"]


def test_save_and_json_hold_the_same_results(pytester):
    pytester.makepyfile(test_suite=e2e(steps=3))
    result = pytester.runpytest("--opperf", "--opperf-save=base.json", "--opperf-json=r.json")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["wrote json: */r.json", "wrote save: */base.json"])
    saved = read_results(pytester.path / "base.json")
    assert [r.id for r in saved.runs] == ["test_suite.py::test_train"]
    assert saved.gate["passed"] is True
    assert json.loads((pytester.path / "r.json").read_text())["runs"] == saved.to_dict()["runs"]


def test_an_empty_session_does_not_overwrite_a_baseline(pytester):
    (pytester.path / "base.json").write_text("precious")
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest("--opperf", "--opperf-save=base.json")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["note: --opperf-save base.json: not saved, no measured runs"])
    assert (pytester.path / "base.json").read_text() == "precious"


FULL_DISK = """
import pytest_opperf.records.atomic as atomic

_write = atomic.write_text_atomic

def _full(path, obj):
    raise OSError(28, "No space left on device")

def pytest_configure(config):
    atomic.write_text_atomic = _full

def pytest_unconfigure(config):
    atomic.write_text_atomic = _write
"""


def test_failed_write_at_the_end_is_reported_and_exit_4(pytester):
    pytester.makeconftest(FULL_DISK)
    pytester.makepyfile(test_suite=e2e(steps=2))
    result = pytester.runpytest("--opperf", "--opperf-json=r.json", "--opperf-trace=t.json")
    assert result.ret == 4
    result.stdout.fnmatch_lines(
        [
            "error: --opperf-json r.json: cannot write */r.json: *No space left on device",
            "error: --opperf-trace t.json: cannot write */t.json: *",
        ]
    )
    assert "Traceback" not in result.stdout.str()


def test_existing_directory_as_output_is_a_usage_error(pytester):
    (pytester.path / "r.json").mkdir()
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest("--opperf", "--opperf-json=r.json")
    assert result.ret == 4 and "--opperf-json r.json: is a directory" in result.stderr.str()


KILL_ON_RENAME = """
import os, signal
_replace = os.replace

def _die_before_rename(src, dst):
    if str(dst).endswith("base.json"):
        os.kill(os.getpid(), signal.SIGKILL)  # the new data is written and synced, not yet renamed
    return _replace(src, dst)

os.replace = _die_before_rename
"""


def test_killed_save_keeps_the_old_baseline(pytester):
    pytester.makepyfile(test_suite=e2e(steps=3))
    assert pytester.runpytest("--opperf", "--opperf-save=base.json").ret == 0
    before = (pytester.path / "base.json").read_bytes()
    pytester.makeconftest(KILL_ON_RENAME)
    pytester.makepyfile(test_suite=e2e(steps=4))
    result = pytester.runpytest_subprocess("--opperf", "--opperf-save=base.json")
    assert result.ret == -signal.SIGKILL
    assert (pytester.path / "base.json").read_bytes() == before
    assert read_results(pytester.path / "base.json").runs[0].batches == 3
    # what was killed was complete but never renamed into place
    (leftover,) = [p for p in pytester.path.iterdir() if p.name.startswith(".base.json.")]
    assert json.loads(leftover.read_text())["runs"][0]["batches"] == 4


WRITER = """
import sys
from pytest_opperf.records.atomic import write_json_atomic
path = sys.argv[1]
big = [float(i) for i in range(200_000)]
n = 0
while True:
    n += 1
    write_json_atomic(path, {"schema": "x", "n": n, "samples": big})
"""


def test_killing_a_writer_at_any_moment_leaves_a_whole_file(tmp_path):
    path = tmp_path / "base.json"
    path.write_text(json.dumps({"schema": "x", "n": 0, "samples": []}))
    for delay in (0.05, 0.13, 0.31):
        child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(WRITER), str(path)])
        time.sleep(delay)
        child.send_signal(signal.SIGKILL)
        child.wait()
        data = json.loads(path.read_text())  # never truncated: the old or a new whole file
        assert data["samples"] in ([], [float(i) for i in range(200_000)])


def test_markdown_report_and_step_summary(pytester, monkeypatch):
    summary = pytester.path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    pytester.makefile(".toml", t='[[limit]]\nstat = "relu"\nmax_avg_ms = 0.1\n')
    pytester.makepyfile(test_suite=e2e(steps=3))
    result = pytester.runpytest(
        "--opperf", "--opperf-markdown=report.md", "--opperf-thresholds=t.toml"
    )
    assert result.ret == 1
    text = (pytester.path / "report.md").read_text()
    lines = text.splitlines()
    assert lines[0] == "## opperf"
    assert lines[2].startswith("**Gate: FAILED** (1 violation(s) in 1 checks; thresholds ")
    assert lines[4].startswith("| run ") and "avg_ms:relu" in lines[6]
    assert "### `test_suite.py::test_train`" in text
    tables = [line for line in lines if line.startswith("|")]
    assert any(line.startswith("| &nbsp;&nbsp;Im2ColTimer") for line in tables)
    assert all(line.count("|") == tables[0].count("|") for line in tables[:3])
    assert summary.read_text() == "earlier step\n" + text  # appended, not replaced


def check_nesting(events):
    """Complete events of one thread nest like a call stack."""
    stack = []
    eps = 1e-6
    for e in sorted(events, key=lambda e: (e["ts"], -e["dur"])):
        while stack and e["ts"] >= stack[-1]["ts"] + stack[-1]["dur"] - eps:
            stack.pop()
        if stack:
            parent = stack[-1]
            assert e["ts"] + e["dur"] <= parent["ts"] + parent["dur"] + eps, (e, parent)
            assert e["args"]["depth"] == (parent["args"]["depth"] + 1 if "args" in parent else 1), (
                e,
                parent,
            )
        stack.append(e)


def test_chrome_trace_loads_and_nests(pytester):
    pytester.makepyfile(test_suite=e2e(steps=3), test_one_step=e2e(name="test_other", steps=1))
    result = pytester.runpytest("--opperf", "--opperf-trace=trace.json")
    assert result.ret == 0, result.stdout.str()
    doc = json.loads((pytester.path / "trace.json").read_text())
    events = doc["traceEvents"]
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {"test_suite.py::test_train", "test_one_step.py::test_other"}
    for pid in (1, 2):
        complete = [e for e in events if e["ph"] == "X" and e["pid"] == pid]
        for e in complete:
            assert {"name", "ph", "ts", "dur", "pid", "tid"} <= set(e)
        step = next(e for e in complete if e["cat"] == "step")
        regions = [e for e in complete if e is not step]
        # one step: one of each region (test_train traces step 2, after warm-up; test_other its
        # only step)
        assert sorted(e["name"] for e in regions) == [
            "CreateOpTimer",
            "ExecutorRunTimer",
            "Im2ColTimer",
            "conv2d",
            "relu",
        ]
        assert all(0 <= e["ts"] and e["ts"] + e["dur"] <= step["dur"] for e in regions)
        check_nesting(regions)
        by_name = {e["name"]: e for e in regions}
        assert (
            by_name["Im2ColTimer"]["args"]["depth"] == 3 and by_name["conv2d"]["args"]["depth"] == 2
        )
    assert {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"} == {
        "step 2", "step 1"}


def _opperf_lines(text):
    """The plugin's lines: its section's title, what it says in it and after it."""
    return [line for line in text.splitlines()
            if line.startswith(("opperf", "gate:", "warning:", "note:", "wrote ", "error:"))
            or (line.startswith("=") and "opperf" in line)]


def test_collecting_only_writes_nothing_and_gates_nothing(pytester, monkeypatch):
    pytester.makepyfile(test_suite=e2e(steps=2))
    assert pytester.runpytest("--opperf", "--opperf-save=base.json").ret == 0
    summary = pytester.path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    # a baseline the collected test would not match: a gate would fail baseline_match
    pytester.makepyfile(test_suite=e2e(name="test_other", steps=2))
    pytester.makefile(".toml", t='[[limit]]\nrun = "nothing*"\nmax_python_share = 0.5\n')
    outputs = ["json=r.json", "markdown=r.md", "trace=t.json", "save=new.json",
               "history=h.sqlite"]
    result = pytester.runpytest("--opperf", "--collect-only", "--opperf-baseline=base.json",
                                "--opperf-thresholds=t.toml", *(f"--opperf-{o}" for o in outputs))
    out = result.stdout.str()
    assert result.ret == 0, out
    assert _opperf_lines(out) == ["opperf: no test ran (--collect-only): the opperf gate did not "
                                  "run and no file was written"], out
    assert "<Function test_other>" in out
    for name in ("r.json", "r.md", "t.json", "new.json", "h.sqlite", "summary.md"):
        assert not (pytester.path / name).exists(), name


def test_collecting_only_still_checks_the_inputs(pytester):
    pytester.makepyfile(test_suite=e2e(steps=2))
    result = pytester.runpytest("--opperf", "--collect-only", "--opperf-baseline=absent.json")
    assert result.ret == 4


@pytest.mark.parametrize("args", [[], ["--opperf-workload=tiny"]], ids=["default", "tiny"])
def test_collecting_the_suites_only_is_one_line_and_exit_0(tmp_path, args):
    """``pytest suites/ --opperf --collect-only``: the suites' conftest sets the CI gate's
    thresholds and baselines as defaults, which must not gate a session that runs nothing."""
    root = Path(__file__).resolve().parent.parent
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "GITHUB_", "OPPERF_"))}
    env["GITHUB_STEP_SUMMARY"] = str(tmp_path / "summary.md")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "suites/", "--opperf",
         "--opperf-device=cpu", "--collect-only", "-q", f"--opperf-history={tmp_path / 'h.db'}",
         f"--opperf-json={tmp_path / 'r.json'}", *args],
        cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert _opperf_lines(done.stdout) == [
        "opperf: no test ran (--collect-only): the opperf gate did not run and no file was "
        "written"], done.stdout[-3000:]
    assert "suites/test_resnet50.py::test_train[" in done.stdout
    assert list(tmp_path.iterdir()) == []


def test_a_non_ascii_run_id_is_the_same_bytes_in_every_locale(pytester, monkeypatch):
    """Under LC_ALL=C with PYTHONUTF8=0 Python decodes ``test_é.py`` with surrogate escapes;
    the run id was written as ``test_\\udcc3\\udca9.py::...``, another id than a UTF-8
    session's, which matched no baseline run. Both sessions write the same bytes."""
    pytester.makepyfile(**{"test_\u00e9t\u00e9": e2e(steps=3)})
    written = {}
    for name, env in (("utf8", {"LC_ALL": "C.UTF-8", "LANG": "C.UTF-8", "PYTHONUTF8": "1"}),
                      ("c", {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0",
                             "PYTHONCOERCECLOCALE": "0", "PYTHONIOENCODING": "ascii"})):
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        result = pytester.runpytest_subprocess("--opperf", f"--opperf-json={name}.json",
                                               "-p", "no:cacheprovider")
        assert result.ret == 0, result.stdout.str() + result.stderr.str()
        written[name] = re.findall(rb'"id": "[^"]*"', (pytester.path / f"{name}.json").read_bytes())
    assert written["utf8"] == written["c"] == [b'"id": "test_\\u00e9t\\u00e9.py::test_train"']
