"""Under --opperf pytest-benchmark's own table is left out unless asked for (the plugin's rule,
glue/benchmark_adapter.py), in the suites too."""

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_opperf.glue.benchmark_adapter import quiet_benchmark_table

ROOT = Path(__file__).parents[1]
TABLE = "benchmark: 1 tests"  # the heading of pytest-benchmark's table


def configured(**option):
    namespace = SimpleNamespace(**option)
    quiet_benchmark_table(namespace)
    return vars(namespace)


def test_quiet_by_default_and_columns_bring_the_table_back():
    assert configured(benchmark_quiet=False, benchmark_columns=None)["benchmark_quiet"] is True
    given = configured(benchmark_quiet=False, benchmark_columns=["min", "max"])
    assert given["benchmark_quiet"] is False
    assert configured() == {}  # without pytest-benchmark (-p no:benchmark) nothing is set


def run_suite(*args):
    env = {k: v for k, v in os.environ.items()
           if k != "GITHUB_STEP_SUMMARY" and not k.startswith(("PYTEST_XDIST", "PYTEST_ADDOPTS"))}
    command = [sys.executable, "-m", "pytest", "suites/test_executor.py::test_program_clone",
               "--opperf", "--opperf-workload=tiny", "--benchmark-max-time=0.002",
               "--benchmark-min-rounds=2", "-p", "no:cacheprovider", *args]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "= opperf =" in done.stdout  # the opperf report is there either way
    return done.stdout


@pytest.mark.parametrize(("args", "table"), [
    ((), False),
    (("--benchmark-columns=min,max",), True),
    (("--benchmark-verbose",), True),
])
def test_the_suites_print_the_table_only_when_asked(args, table):
    assert (TABLE in run_suite(*args)) is table
