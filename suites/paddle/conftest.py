"""The Paddle suite's glue: Paddle's device (a CUDA place when usable), glog kept quiet, and the
report's section that puts the e2e run's op counts next to the reference report's.

``pytest suites/paddle --opperf`` runs on the device Paddle chooses; with ``pytest suites/
--opperf`` the reference framework's conftest chooses. Without paddle the hook leaves the choice
to others, and the suite skips with one line.
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_opperf.paddle import pytest_opperf_select_device  # noqa: F401  (the device hook)
from pytest_opperf.paddle.support import quiet_glog
from suites.paddle.against_report import against_report_lines

quiet_glog()  # before paddle is imported: glog reads its settings once


@pytest.hookimpl(optionalhook=True)  # without the plugin (-p no:opperf) nobody calls it
def pytest_opperf_report_sections(config: pytest.Config,
                                  results: Any) -> list[tuple[str, list[str]]]:
    sections = []
    for run in results.runs:
        if run.kind == "e2e" and run.config.get("framework") == "paddle" and run.counts:
            sections.append((f"against the report: {run.id}, op counts per iteration",
                             against_report_lines(run)))
    return sections
