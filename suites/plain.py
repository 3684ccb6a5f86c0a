"""The suites as plain tests, without the opperf plugin (``pytest suites/ -p no:opperf``).

``suites/conftest.py`` registers this module as a plugin when pytest-opperf is not loaded. Its
``opperf`` and ``opperf_benchmark`` fixtures do what the plugin's do without ``--opperf``: a
measured window only counts its steps, a benchmark's target runs once, untimed. The suites then
run at the ``tiny`` size on the CPU (:func:`suites.support.suite_workload`): the correctness smoke
test of ``pytest suites/``, with nothing measured, reported or gated.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from time import perf_counter
from typing import Any

import pytest

from pytest_opperf.core.oploop import pedantic_round
from pytest_opperf.measure import CountingRun, counting_window

NAME = "suites-plain"  # the name the conftest registers this module under


class PlainOpPerf:
    """``opperf`` without the plugin: windows that only count steps."""

    enabled = False

    @contextmanager
    def measure(self, kind: str = "e2e", config: dict[str, Any] | None = None,
                name: str | None = None) -> Iterator[CountingRun]:
        with counting_window() as run:
            yield run


class PlainBenchmark:
    """``opperf_benchmark`` without the plugin: the target runs once, untimed."""

    def describe(self, stat: str | None = None, kind: str | None = None,
                 config: dict[str, Any] | None = None, flops: float | None = None,
                 bytes: float | None = None) -> PlainBenchmark:
        return self

    def __call__(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return function(*args, **kwargs)

    def pedantic(self, target: Callable[..., Any], args: tuple = (),
                 kwargs: dict[str, Any] | None = None, setup: Callable[[], Any] | None = None,
                 teardown: Callable[..., Any] | None = None, rounds: int = 1,
                 warmup_rounds: int = 0, iterations: int = 1) -> Any:
        return pedantic_round(target, args, kwargs, 1, perf_counter, setup, teardown)[1]


@pytest.fixture
def opperf() -> PlainOpPerf:
    return PlainOpPerf()


@pytest.fixture
def opperf_benchmark() -> PlainBenchmark:
    return PlainBenchmark()
