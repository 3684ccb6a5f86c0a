"""Synthetic suites for the plugin tests: timed regions advance a fake clock, no framework needed.

Per step: ExecutorRunTimer (CreateOpTimer, conv2d with Im2ColTimer inside, relu),
then ``PYTHON_MS`` outside the executor (the "Python" part of the step).

``nap(ms)`` advances the clock the timers and the measured window read
(``perf_counter_ns`` of ``pytest_opperf.timers`` and ``.measure``, patched for
the test) by exactly ``ms``, and each reading by 1 us: every time in the results is known in
advance, so no assertion depends on how busy the machine is (``-n 16``, a shared CI box).
"""

from __future__ import annotations

import pytest

# The fake clock of an inner test module: ``nap(ms)``, and an autouse fixture
# that patches the clock of the timers and the measured window (no braces: it
# goes into templates that are formatted).
FAKE_CLOCK = '''
import pytest
from pytest_opperf import measure as _measure, timers

NOW_NS = [0]

def nap(ms):
    NOW_NS[0] += round(ms * 1e6)

def clock():  # a real clock always moves: 1 us per reading keeps regions ordered and nested
    NOW_NS[0] += 1000
    return NOW_NS[0]

@pytest.fixture(autouse=True)
def _fake_clock(monkeypatch):
    monkeypatch.setattr(timers, "perf_counter_ns", clock)
    monkeypatch.setattr(_measure, "perf_counter_ns", clock)
'''

E2E = FAKE_CLOCK + '''
STEPS = {steps}
RELU_MS = {relu_ms}
RELU_CALLS = {relu_calls}
PYTHON_MS = {python_ms}

def train_step():
    with timers.timer("ExecutorRunTimer"):
        with timers.timer("CreateOpTimer"):
            pass
        with timers.timer("conv2d", kernel=True):
            with timers.timer("Im2ColTimer", kernel=True):
                nap(1)
            nap(1)
        for _ in range(RELU_CALLS):
            with timers.timer("relu", kernel=True):
                nap(RELU_MS / RELU_CALLS)
    nap(PYTHON_MS)

def {name}(opperf):
    with opperf.measure(config={{"batch": 4}}) as run:
        nap(2)  # model building: lands in the first (warm-up) step
        for _ in range(STEPS):
            train_step()
            run.add_work("conv2d", flops=4e6, bytes=1e6)
            run.step(examples=4)
'''


def e2e(name: str = "test_train", steps: int = 8, relu_ms: float = 1.0, relu_calls: int = 1,
        python_ms: float = 3.0) -> str:
    return E2E.format(
        name=name, steps=steps, relu_ms=relu_ms, relu_calls=relu_calls, python_ms=python_ms
    )


NO_TRACEBACK = ("Traceback", "INTERNALERROR")


def assert_one_line_usage_error(result, *fragments: str) -> None:
    """Exit status 4, no traceback, and one ERROR line holding every fragment."""
    assert result.ret == 4, result.stdout.str() + result.stderr.str()
    text = result.stdout.str() + result.stderr.str()
    for marker in NO_TRACEBACK:
        assert marker not in text
    errors = [line for line in text.splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1, text
    for fragment in fragments:
        assert fragment in errors[0], errors[0]


@pytest.fixture(autouse=True)
def inner_run_env(pytester, monkeypatch):
    """Keep inner runs independent of the outer environment, and fast.

    Inner runs must not append to a real step summary, nor see the outer
    xdist worker's environment. pytester restores
    sys.modules after every in-process run, so a plugin that imports a large
    package lazily (hypothesis, where installed) would import it again in
    each run; blocking it keeps the plugin tests within their time budget.
    Whether an inner run warns that it cannot assert-rewrite the already
    imported pytest_opperf depends on how pip installed it (older pips list
    the editable package's files); tests that count warnings must not.
    """
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    # under `pytest -n N` the outer worker's variables would make pytest-benchmark
    # in the inner run believe it is an xdist worker and switch itself off
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)
    # after pytester, which clears it
    monkeypatch.setenv(
        "PYTEST_ADDOPTS", "-p no:hypothesispytest -W ignore::pytest.PytestAssertRewriteWarning"
    )
