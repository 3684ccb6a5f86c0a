"""One envelope back (pytest_opperf/records/handback.py): its format, and that each of the three
children (an xdist worker, an A/B side, the valgrind child) hands its runs back in it."""

import json
import os
import subprocess
import sys

import pytest

from pytest_opperf.ab.protocol import FD_ENV, pair
from pytest_opperf.glue import child
from pytest_opperf.records import handback
from pytest_opperf.records.handback import Envelope, HandBackError
from pytest_opperf.workcounts import instructions
from tests.opperf_factories import e2e_run
from tests.opperf_suites import inner_run_env  # noqa: F401
from tests.test_plugin_workcount import SUITE

pytest_plugins = ["pytester"]

WINDOW = """
def test_w(opperf):
    with opperf.measure() as run:
        for _ in range(3):
            run.step(examples=2)
"""


def test_an_envelope_round_trips_with_every_field():
    back = Envelope("ab-side", [e2e_run("t.py::a")], untimed=1, plain=2, deselected=3,
                    device={"gpu_model": "X"}, nodeid="t.py::a", failed=True,
                    reports=[{"when": "call"}], windows=["t.py::a"])
    data = json.loads(back.dumps())
    assert data["envelope"] == handback.VERSION and data["role"] == "ab-side"
    again = Envelope.loads(back.dumps(), "test", "ab-side")
    assert [r.id for r in again.runs] == ["t.py::a"]
    assert (again.untimed, again.plain, again.deselected, again.device, again.nodeid,
            again.failed, again.reports, again.windows) == (
        1, 2, 3, {"gpu_model": "X"}, "t.py::a", True, [{"when": "call"}], ["t.py::a"])


def test_an_envelope_of_another_version_or_role_is_refused_with_the_reason():
    data = Envelope("xdist-worker").to_dict()
    with pytest.raises(HandBackError, match="envelope version 2, this release reads 1"):
        Envelope.from_dict({**data, "envelope": 2}, "w", "xdist-worker")
    with pytest.raises(HandBackError, match="an envelope of 'xdist-worker', expected 'ab-side'"):
        Envelope.from_dict(data, "w", "ab-side")
    with pytest.raises(HandBackError, match="'windows' is not a list of str"):
        Envelope.from_dict({**data, "windows": [1]}, "w", "xdist-worker")
    with pytest.raises(HandBackError, match="not JSON"):
        Envelope.loads("{", "w", "xdist-worker")
    with pytest.raises(ValueError, match="envelope role 'worker'"):
        Envelope("worker")


def test_only_an_ab_side_may_send_its_fields_unversioned():
    bare = {"ev": "done", "nodeid": "t.py::a", "failed": False, "reports": [],
            "results": {"schema": "opperf/1", "runs": []}}  # a base side of an earlier release
    assert Envelope.from_dict(bare, "base", "ab-side", unversioned=True).nodeid == "t.py::a"
    with pytest.raises(HandBackError, match="envelope version None"):
        Envelope.from_dict(bare, "base", "ab-side")


def test_an_xdist_worker_hands_back_an_envelope(pytester):
    pytester.makepyfile(test_w=WINDOW)
    pytester.makeconftest("""
import json

def pytest_testnodedown(node, error):
    with open("handed.json", "w") as f:
        f.write(node.workeroutput["opperf"])
""")
    result = pytester.runpytest_subprocess("-n", "1", "-p", "no:hypothesispytest", "--opperf")
    assert result.ret == 0, result.stdout.str()
    data = (pytester.path / "handed.json").read_text()
    assert json.loads(data)["envelope"] == handback.VERSION
    back = Envelope.loads(data, "worker", "xdist-worker")
    assert [r.id for r in back.runs] == ["test_w.py::test_w"]


def test_an_ab_side_hands_back_an_envelope_per_test(pytester):
    pytester.makepyfile(test_w=WINDOW)
    channel, theirs = pair()
    env = child.environment({"workload": "tiny"})
    env[FD_ENV] = str(theirs.fileno())
    process = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "pytest_opperf.ab.side", "--opperf", "-q",
         "-p", "no:cacheprovider", "test_w.py"],
        cwd=pytester.path, env=env, pass_fds=[theirs.fileno()], stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    theirs.close()
    try:
        assert channel.receive(60)["ids"] == ["test_w.py::test_w"]
        channel.send({"cmd": "run", "nodeid": "test_w.py::test_w", "next": None, "first": True})
        message = channel.receive(60)
        while message.get("ev") == "step":
            channel.send({"cmd": "go"})
            message = channel.receive(60)
        assert message["ev"] == "done" and message["envelope"] == handback.VERSION
        back = Envelope.from_dict(message, "side", "ab-side")  # versioned: no leniency needed
        assert back.nodeid == "test_w.py::test_w" and not back.failed
        assert [r.id for r in back.runs] == ["test_w.py::test_w"] and back.reports
        channel.send({"cmd": "finish"})
        assert process.wait(60) == 0
    finally:
        channel.close()
        if process.poll() is None:
            process.kill()
            process.wait()


def test_the_valgrind_child_hands_back_an_envelope(pytester, tmp_path):
    """Natively the child's counting pass is refused (callgrind is not there) after it noted its
    window: the envelope names the window of each pass, and holds the runs."""
    pytester.makepyfile(test_suite=SUITE)
    env = child.environment({"workload": "tiny", "count-steps": "2"})
    env[instructions.CHILD_ENV] = str(tmp_path)
    done = subprocess.run([sys.executable, "-m", "pytest", "--opperf", "-q", "-p",
                           "no:cacheprovider", "test_suite.py"],
                          cwd=pytester.path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert "not running under valgrind" in done.stdout, done.stdout
    back = Envelope.loads((tmp_path / handback.FILE).read_text(), "child", "valgrind-child")
    assert back.windows == ["test_suite.py::test_train"]
    assert [r.id for r in back.runs] == ["test_suite.py::test_train"]
    assert not (tmp_path / "windows.json").exists()
    assert os.listdir(tmp_path) == [handback.FILE]
