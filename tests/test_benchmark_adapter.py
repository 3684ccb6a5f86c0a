"""The pytest-benchmark releases the adapter supports; its assumptions checked on the installed one.

pytest_opperf.glue.benchmark_adapter reads pytest-benchmark internals. These tests fail when
the installed release is outside SUPPORTED, when SUPPORTED disagrees with the
dependency declared in pyproject.toml, or when an internal the adapter relies on
no longer behaves as it assumes.
"""

import re
import sys
from importlib import metadata
from pathlib import Path

import pytest

from pytest_opperf.glue import benchmark_adapter
from pytest_opperf.glue.benchmark_adapter import SUPPORTED, supported_range, version_problem
from tests.opperf_suites import inner_run_env  # noqa: F401

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

pytest_plugins = ["pytester"]


def test_the_installed_release_is_supported():
    assert version_problem() is None, version_problem()
    release = tuple(int(p) for p in metadata.version("pytest-benchmark").split(".")[:2])
    assert SUPPORTED[0] <= release < SUPPORTED[1]


def test_the_range_is_the_declared_dependency():
    """pyproject's lower bound is the adapter's, and any upper bound it declares too."""
    project = tomllib.loads(Path(__file__).parents[1].joinpath("pyproject.toml").read_text())
    [spec] = [d for d in project["project"]["dependencies"] if d.startswith("pytest-benchmark")]
    bounds = dict(re.findall(r"(>=|<)\s*([\d.]+)", spec))
    assert tuple(int(p) for p in bounds[">="].split(".")) == SUPPORTED[0], spec
    if "<" in bounds:
        assert tuple(int(p) for p in bounds["<"].split(".")) == SUPPORTED[1], spec


@pytest.mark.parametrize("version", ["4.0.0", "4.0", "5.3.1", "5.99.0rc1"])
def test_releases_inside_the_range_pass(version):
    assert version_problem(version) is None


@pytest.mark.parametrize("version", ["3.4.1", "6.0.0", "6.1.dev0", "10.0"])
def test_releases_outside_the_range_are_named_with_the_range(version):
    problem = version_problem(version)
    assert problem is not None
    assert f"pytest-benchmark {version} is outside the supported range >=4.0,<6.0" in problem
    assert supported_range() == ">=4.0,<6.0"


def test_a_missing_distribution_is_named(monkeypatch):
    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(benchmark_adapter.metadata, "version", missing)
    assert version_problem() == "pytest-benchmark is not installed (supported: >=4.0,<6.0)"


# Each inner test checks one assumption through the adapter on the real pytest-benchmark;
# the conftest collects what the adapter read from each test's `benchmark` fixture.
CONFTEST = """
import time

import pytest

from pytest_opperf.glue import benchmark_adapter

CALLS = [0]
READ = {}
ONLY = {}

def counting_timer():
    CALLS[0] += 1
    return time.perf_counter()

@pytest.fixture
def timed(request):
    benchmark_adapter.use_timer(request.node, counting_timer)
    bench = request.getfixturevalue("benchmark")
    yield bench
    READ[request.node.name] = (benchmark_adapter.rounds(bench), benchmark_adapter.failed(bench))

@pytest.hookimpl(trylast=True)  # after pytest-benchmark's own
def pytest_collection_modifyitems(config, items):
    for item in items:
        ONLY[item.name] = any(benchmark_adapter.is_only_skip(m) for m in item.own_markers)

def pytest_sessionfinish(session):
    config = session.config
    with open("read.txt", "w") as f:
        f.write(repr({"read": READ, "calls": CALLS[0], "only": ONLY,
                      "loop": {n: benchmark_adapter.loop_option(config, n)
                               for n in benchmark_adapter.LOOP_DEFAULTS}}))
"""

TESTS = """
import pytest

@pytest.mark.benchmark(min_rounds=3, max_time=0.001)
def test_ok(timed):
    timed.pedantic(sum, args=([1, 2],), rounds=4, iterations=2)

def test_raises(timed):
    timed(lambda: 1 / 0)

def test_plain():
    pass

@pytest.mark.benchmark(max_time=0.001, min_rounds=1)
def test_direct(benchmark):
    benchmark(sum, [1, 2])
"""


def inner(pytester, *args):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_b=TESTS)
    result = pytester.runpytest("-p", "no:cacheprovider", "-rs", *args)
    return result, eval(pytester.path.joinpath("read.txt").read_text())


def test_rounds_timer_and_failure_as_the_adapter_assumes(pytester):
    result, seen = inner(pytester)
    result.assert_outcomes(passed=3, failed=1)
    (rounds, iterations), failed = seen["read"]["test_ok"]
    assert len(rounds) == 4 and iterations == 2 and not failed
    assert all(r > 0 for r in rounds)
    assert seen["calls"] >= 8  # the marker's timer, put there by use_timer, timed the rounds
    _, failed = seen["read"]["test_raises"]
    assert failed


def test_disabled_benchmarks_time_nothing(pytester):
    result, seen = inner(pytester, "--benchmark-disable")
    result.assert_outcomes(passed=3, failed=1)
    assert seen["read"]["test_ok"] == (None, False)


def test_the_loop_options_and_their_defaults(pytester):
    _, seen = inner(pytester)
    assert seen["loop"] == benchmark_adapter.LOOP_DEFAULTS  # pytest-benchmark's own defaults
    _, seen = inner(pytester, "--benchmark-min-rounds=7", "--benchmark-max-time=0.5")
    assert seen["loop"] == {**benchmark_adapter.LOOP_DEFAULTS, "min_rounds": 7.0, "max_time": 0.5}


def test_the_benchmark_only_skip_is_recognised(pytester):
    # `timed` asks for `benchmark` when it runs, as opperf_benchmark does: skipped too
    result, seen = inner(pytester, "--benchmark-only")
    result.assert_outcomes(passed=1, skipped=3)
    result.stdout.fnmatch_lines(["*Skipping non-benchmark*"])
    assert seen["only"] == {"test_ok": True, "test_raises": True, "test_plain": True,
                            "test_direct": False}
    _, seen = inner(pytester)
    assert not any(seen["only"].values())


def test_an_unsupported_release_is_named_in_the_report(pytester, monkeypatch):
    monkeypatch.setattr(benchmark_adapter, "SUPPORTED", ((0, 1), (0, 2)))
    pytester.makepyfile(test_a="def test_a():\n    pass\n")
    result = pytester.runpytest("--opperf", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*OpPerfBenchmarkWarning: pytest-benchmark * is outside*",
                                 "warning: pytest-benchmark * is outside the supported range "
                                 ">=0.1,<0.2: *"])
    assert result.ret == 0  # a warning: the gate still decides
