"""Everything the plugin relies on in pytest-benchmark beyond its documented fixture and options.

pytest-benchmark offers no API for a fixture's measured rounds, for giving
one test's fixture a timer, or for telling its ``--benchmark-only`` skip from
other skips; these read its internals, known to hold for the releases in
:data:`SUPPORTED` (tests/test_benchmark_adapter.py checks them on the installed one).
:class:`ThroughBenchmark` is the per-op timer (:class:`pytest_opperf.core.port.PerOpTimer`) of a
session whose role times per-op benchmarks through pytest-benchmark.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from importlib import metadata
from typing import Any

import pytest

from ..hookspec import OpPerfBenchmarkWarning

DISTRIBUTION = "pytest-benchmark"
SUPPORTED = ((4, 0), (6, 0))  # releases from the first up to, not including, the second
ONLY_SKIP = "Skipping non-benchmark"  # how its --benchmark-only skip reason starts
LOOP_DEFAULTS = {"min_rounds": 5.0, "max_time": 1.0, "min_time": 0.000005}  # its option defaults


def quiet_benchmark_table(option: Any) -> None:
    """Under ``--opperf`` pytest-benchmark's own table (one wide line per per-op benchmark) is
    left out, as with ``--benchmark-quiet``: the opperf report shows the same runs. Given
    ``--benchmark-columns=...``, or ``--benchmark-verbose`` (which pytest-benchmark lets override
    quiet), the table is printed. Called before pytest-benchmark's (trylast) configure reads it."""
    if hasattr(option, "benchmark_quiet") and getattr(option, "benchmark_columns", None) is None:
        option.benchmark_quiet = True


def supported_range() -> str:
    """:data:`SUPPORTED` as a requirement: ``>=4.0,<6.0``."""
    (a, b), (c, d) = SUPPORTED
    return f">={a}.{b},<{c}.{d}"


def version_problem(version: str | None = None) -> str | None:
    """What is wrong with the installed pytest-benchmark (or ``version``); None: supported."""
    if version is None:
        try:
            version = metadata.version(DISTRIBUTION)
        except metadata.PackageNotFoundError:
            return f"{DISTRIBUTION} is not installed (supported: {supported_range()})"
    release = tuple(int(part) for part in re.findall(r"\d+", version)[:2])
    if SUPPORTED[0] <= release < SUPPORTED[1]:
        return None
    return (f"{DISTRIBUTION} {version} is outside the supported range {supported_range()}: "
            "per-op timings read its internals, which may have changed (benchmark_adapter.py)")


def use_timer(node: Any, timer: Any) -> None:
    """Make the test's ``benchmark`` fixture time with ``timer``: its ``benchmark`` marker's
    options, ``timer`` set, put first (the fixture reads the closest marker)."""
    marker = node.get_closest_marker("benchmark")
    kwargs = dict(marker.kwargs) if marker else {}
    node.add_marker(pytest.mark.benchmark(**{**kwargs, "timer": timer}), append=False)


def failed(bench: Any) -> bool:
    """Whether the fixture's target raised."""
    return bool(getattr(bench, "has_error", False))


def rounds(bench: Any) -> tuple[list[float], int] | None:
    """The fixture's round times (seconds per round) and calls per round; None when it timed
    nothing (not called, or pytest-benchmark disabled: --benchmark-disable, xdist)."""
    meta = getattr(bench, "stats", None)
    if not meta or not meta.stats.data:
        return None
    return list(meta.stats.data), meta.iterations


def is_only_skip(marker: Any) -> bool:
    """Whether ``marker`` is the skip ``--benchmark-only`` puts on tests without ``benchmark``."""
    return marker.name == "skip" and str(marker.kwargs.get("reason", "")).startswith(ONLY_SKIP)


def loop_option(config: pytest.Config, name: str) -> float:
    """``--benchmark-<name>`` (min_rounds, max_time, min_time) for opperf's own loop."""
    value = config.getoption(f"benchmark_{name}", None)
    return LOOP_DEFAULTS[name] if value is None else float(value)


def check_items(items: list[Any]) -> None:
    """The collected tests' use of the ``benchmark`` fixture: a ``benchmark`` redefined on top
    of ``opperf_benchmark`` is a usage error, and a test of ``opperf_benchmark`` is not skipped
    by ``--benchmark-only`` (which skips what does not request ``benchmark`` by name)."""
    for item in items:
        names = getattr(item, "fixturenames", ())
        if "benchmark" in names:
            info = getattr(item, "_fixtureinfo", None)
            defs = getattr(info, "name2fixturedefs", {}).get("benchmark") or ()
            last = defs[-1] if defs else None
            if last is not None and "opperf_benchmark" in last.argnames:
                where = f"{last.baseid}/conftest.py" if last.baseid else "conftest.py"
                raise pytest.UsageError(
                    f"opperf: {item.nodeid}: the `benchmark` fixture is redefined on top of "
                    f"opperf_benchmark (in {where}), which pytest-benchmark cannot run; record "
                    "plain benchmark fixtures with --opperf-record-benchmarks instead")
        elif "opperf_benchmark" in names:
            # --benchmark-only skips what does not request `benchmark` by name; opperf_benchmark
            # requests it when the test calls it, so it is a benchmark all the same
            item.own_markers[:] = [m for m in item.own_markers
                                   if not is_only_skip(m)]


class ThroughBenchmark:
    """Per-op benchmarks timed by pytest-benchmark's ``benchmark`` fixture, on the session's
    ``timer`` (None: pytest-benchmark's own); ``untimed`` counts one that ran untimed."""

    def __init__(self, timer: Any, untimed: Callable[[], None]) -> None:
        self.timer = timer
        self.untimed = untimed

    def _fixture(self, bench: Any) -> Any:
        if self.timer is not None:
            use_timer(bench.request.node, self.timer)
        bench.timed = bench.request.getfixturevalue("benchmark")
        return bench.timed

    def call(self, bench: Any, function: Callable[..., Any], args: tuple,
             kwargs: dict[str, Any]) -> Any:
        return self._fixture(bench)(bench.annotated(function), *args, **kwargs)

    def pedantic(self, bench: Any, target: Callable[..., Any], args: tuple,
                 kwargs: dict[str, Any] | None, setup: Callable[[], Any] | None,
                 teardown: Callable[..., Any] | None, rounds: int, warmup_rounds: int,
                 iterations: int) -> Any:
        return self._fixture(bench).pedantic(
            bench.annotated(target), args=args, kwargs=kwargs, setup=setup, teardown=teardown,
            rounds=rounds, warmup_rounds=warmup_rounds, iterations=iterations)

    def finish(self, bench: Any) -> None:
        fixture = bench.timed
        if fixture is None or failed(fixture):
            return
        measured = rounds(fixture)
        if measured is None:  # pytest-benchmark disabled: the target ran untimed
            self.untimed()
            warnings.warn(OpPerfBenchmarkWarning(
                f"{bench.request.node.nodeid}: not timed, pytest-benchmark is disabled "
                "(--benchmark-disable, or xdist)"), stacklevel=3)
            return
        bench.record(*measured)
