"""pytest_opperf.paddle in pytest sessions: a Paddle suite with no glue (the report, the results,
the history and the dashboard take its run like any other), and A/B (``--opperf-compare``)
catching a slowed Paddle op by time. Skipped without paddle."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pytest_opperf.history.store import Store
from pytest_opperf.paddle.support import INSTALL, import_paddle
from tests.ab_suites import make_repo
from tests.opperf_suites import inner_run_env  # noqa: F401

try:
    import_paddle()
except ModuleNotFoundError:
    pytest.skip(f"paddle is not installed ({INSTALL})", allow_module_level=True)

pytest_plugins = ["pytester"]

CONFTEST = "from pytest_opperf.paddle import pytest_opperf_select_device  # noqa: F401\n"

# A small static program trained under profile(); N sets the matmul's size (the A/B's slowed op).
SUITE = """
import numpy as np
import warnings

from pytest_opperf.paddle import profile
from pytest_opperf.paddle.support import import_paddle

paddle = import_paddle()
N = {n}
STEPS = {steps}


def test_train(opperf):
    paddle.enable_static()
    try:
        with opperf.measure() as run, profile():
            main, startup = paddle.static.Program(), paddle.static.Program()
            with paddle.static.program_guard(main, startup), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                x = paddle.static.data("x", [-1, N], "float32")
                h = paddle.nn.functional.relu(paddle.nn.Linear(N, N)(x))
                loss = paddle.mean(paddle.matmul(h, h, transpose_y=True))
                paddle.optimizer.Momentum(0.01, 0.9).minimize(loss)
            exe = paddle.static.Executor(paddle.CPUPlace())
            exe.run(startup)
            feed = {{"x": np.ones((N, N), "float32")}}
            for _ in range(STEPS):
                exe.run(main, feed=feed, fetch_list=[loss])
                run.step(examples=N)
    finally:
        paddle.disable_static()
"""


def suite(n: int = 64, steps: int = 4) -> str:
    return SUITE.format(n=n, steps=steps)


def test_a_paddle_suite_gets_its_table_results_history_and_dashboard(pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_suite=suite())
    result = pytester.runpytest_inprocess("--opperf", "--opperf-json=out.json",
                                          "--opperf-history=h.sqlite", "-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines([
        "session: device=cpu timing=host workload=small",
        "note: no GPU (paddle * is a CPU build): fell back to CPU",
        "test_suite.py::test_train  device=cpu timing=host",
        "StandaloneExecutor::run *",
        "Python *% | framework overhead *% | kernels *% of wall time",
        "note: paddle: executor time is StandaloneExecutor::run*",
        "wrote history: *",
    ])
    (run,) = json.loads((pytester.path / "out.json").read_text())["runs"]
    assert run["executor_stat"] == "StandaloneExecutor::run"
    assert run["counts"]["matmul"] == 2 and run["counts"]["matmul_grad"] == 2  # fc and h @ h.T
    assert run["counts"]["momentum"] == 2 and run["counts"]["StandaloneExecutor::run"] == 1
    with Store(str(pytester.path / "h.sqlite")) as store:
        history = store.load()
    assert [r.run for r in history.runs] == ["test_suite.py::test_train"]
    assert {"StandaloneExecutor::run", "matmul", "matmul_grad", "relu_grad"} <= {
        st.name for st in history.stats}
    site = pytester.path / "site"
    subprocess.run([sys.executable, "-m", "pytest_opperf", "dashboard", "h.sqlite", "--out",
                    str(site)], cwd=pytester.path, check=True, capture_output=True)
    page = (site / "index.html").read_text()
    assert "test_suite.py::test_train" in page and "matmul_grad" in page


# The other ops' times are the same on both sides: left undecided they would get passes until the
# default budget (600 s) is spent; a 27x matmul decides within two generations (each start order).
AB_THRESHOLDS = "[compare]\nbudget_s = 150.0\n"


def test_ab_catches_a_slowed_paddle_op_by_time(pytester) -> None:
    """The head's matmul works on 3x the rows and columns (27x the work): its step time is the
    one that counts; the executor run around it is slower too, the other ops' counts are not."""
    make_repo(pytester.path, {"conftest.py": CONFTEST, "test_s.py": suite(n=48, steps=12),
                              "ab.toml": AB_THRESHOLDS}, {"test_s.py": suite(n=144, steps=12)})
    result = pytester.runpytest_subprocess("--opperf", "--opperf-compare=HEAD",
                                           "--opperf-compare-timeout=120", "--opperf-json=out.json",
                                           "--opperf-thresholds=ab.toml", "-p", "no:cacheprovider")
    out = result.stdout.str()
    assert result.ret == 1, out
    assert "FAIL test_s.py::test_train step_ms:matmul\n" in out, out
    data = json.loads((pytester.path / "out.json").read_text())
    verdicts = {d["metric"]: d["verdict"] for d in data["compare"]["decisions"]}
    assert verdicts["step_ms:matmul"] == "regressed"
    assert verdicts["count:matmul"] == "unchanged" and verdicts["count:relu"] == "unchanged"
