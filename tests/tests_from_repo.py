"""A throwaway repository of a small pure-Python package, for ``--tests-from``: ``fastsum`` (flat
layout, no test of its own), one commit per item of a plan; a benchmark written afterwards, outside
the repository or in it. Used by tests/test_tests_from_e2e.py and
benchmarks/tests_from_acceptance.py.

``fastsum.work(n)`` loops ``n`` times ``_PASSES`` times: the first commit has 2 passes, a slowdown
of 1.5 makes it 3 (1.5x the work, the same loop), of 2.0 makes it 4.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tests.bisect_repo import commit, git

PACKAGE = '''"""A small package whose one function a benchmark measures."""

_PASSES = {passes}


def work(n: int) -> int:
    total = 0
    for _ in range(_PASSES):
        for i in range(n):
            total += i
    return total // _PASSES


def describe() -> str:
    return "fastsum"  # revision {revision}
'''
BENCH = '''import fastsum


def test_work(opperf_benchmark):
    opperf_benchmark.describe(stat="work")
    opperf_benchmark(fastsum.work, {n})
'''
# where the code a side imported came from, for the outer test (AB_WHERE: a directory)
WHERE = '''import os

import fastsum


def test_where():
    where = os.environ.get("AB_WHERE")
    if where:
        with open(os.path.join(where, os.environ.get("OPPERF_AB_SIDE", "solo")), "w") as f:
            f.write(os.path.realpath(fastsum.__file__) + "\\n")
'''


def write_package(repo: Path, passes: int, revision: int) -> None:
    path = repo / "fastsum" / "__init__.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(PACKAGE.format(passes=passes, revision=revision))


def make(dest: Path, plan: Sequence[float | str]) -> list[str]:
    """The repository in ``dest``: the package as the first commit, then one commit per item of
    ``plan``: a float makes ``work`` that many times as slow as at first (passes 2 * factor),
    ``"-"`` is an unrelated change of the package. Returns the shas, first commit first."""
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "README.md").write_text("fastsum\n")
    passes, revision = 2, 0
    write_package(dest, passes, revision)
    git(dest, "init", "-q", "-b", "main")
    shas = [commit(dest, "fastsum")]
    for i, item in enumerate(plan, 1):
        revision = i
        if isinstance(item, float):
            passes = round(2 * item)
            message = f"work {item:g}x as slow"
        else:
            message = f"unrelated change {i}"
        write_package(dest, passes, revision)
        shas.append(commit(dest, message))
    return shas


def bench(n: int = 20000) -> str:
    return BENCH.format(n=n)
