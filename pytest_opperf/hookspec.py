"""Hooks pytest-opperf calls on frameworks and other plugins, and its warning family.

Implement them in a suite's ``conftest.py`` or in a plugin. ``select_device``
is a "generate" hook (the first non-``None`` answer wins); the others are
"update" hooks that every implementation sees in turn.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy
import pytest

if TYPE_CHECKING:
    from .device import DeviceInfo
    from .results import ResultSet

__all__ = ["OpPerfBaselineWarning", "OpPerfBenchmarkWarning", "OpPerfPaddleWarning",
           "OpPerfStepCountWarning", "OpPerfWarning"]

hookspec = pluggy.HookspecMarker("pytest")


@hookspec(firstresult=True)
def pytest_opperf_select_device(config: pytest.Config, requested: str) -> DeviceInfo | None:
    """Choose the device the suites run on, for ``--opperf-device`` = ``requested``.

    ``requested`` is ``auto``, ``cpu`` or ``gpu``. Return a :class:`pytest_opperf.device.DeviceInfo`
    (its ``clock`` gives kernel regions device time; its ``note`` is shown in the report, e.g. "no
    GPU: fell back to CPU"), or ``None`` to leave the choice to others. Raise ``pytest.UsageError``
    when ``gpu`` is requested and none can be used.

    Called once per process: at session start with ``--opperf`` (before collection, so implement it
    in a plugin or in the ``conftest.py`` of a directory given on the command line, e.g.
    ``suites/conftest.py`` for ``pytest suites/``), and on first use of ``opperf.device`` without
    it. Without any implementation the device is the CPU with the host clock, and ``gpu`` is a usage
    error.
    """


@hookspec
def pytest_opperf_machine_info(config: pytest.Config, info: dict[str, Any]) -> None:
    """Add to or change the machine facts written to the results file.

    ``info`` already holds cpu, cores, python, numpy/cupy versions, BLAS and
    the device's facts; e.g. ``info["gpu"]["clocks"] = ...``.
    """


@hookspec
def pytest_opperf_modify_results(config: pytest.Config, results: ResultSet) -> None:
    """Adjust the session's results before the gate and the report see them.

    ``results.runs`` is a list of :class:`pytest_opperf.results.RunResult`; runs may be changed,
    added or removed. Called once, on the xdist controller after the workers' results are merged.
    """


@hookspec
def pytest_opperf_report_sections(config: pytest.Config,
                                  results: ResultSet) -> list[tuple[str, list[str]]] | None:
    """Extra sections for the report: a list of ``(title, lines)``.

    Called once, after the gate, with the final results; the sections follow the runs, before the
    verdict, in the terminal report (each under a ``--- title ---`` line) and in the markdown report
    (as preformatted blocks). A suite uses it for tables that compare its own runs, e.g. the
    executor ablation of the e2e suite. In the terminal a line wider than its width wraps (lines
    that fit, such as table rows, are printed as given).
    """


class OpPerfWarning(pytest.PytestWarning):
    """Base of pytest-opperf's warnings: ``-W ignore::pytest_opperf.hookspec.OpPerfWarning``."""


class OpPerfBaselineWarning(OpPerfWarning):
    """The baseline is missing for this hardware/workload, or comes from other hardware."""


class OpPerfStepCountWarning(OpPerfWarning):
    """A stat ran a different number of times in different steps of one run."""


class OpPerfBenchmarkWarning(OpPerfWarning):
    """A per-op benchmark could not be timed (pytest-benchmark disabled, e.g. under xdist)."""


class OpPerfPaddleWarning(OpPerfWarning):
    """The installed Paddle is outside the range ``pytest_opperf.paddle.profile()`` supports."""
