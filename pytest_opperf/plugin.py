"""pytest glue for pytest-opperf: command-line options (the plugin proper grows here)."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("opperf", "operator performance measurement and gate (pytest-opperf)")
    group.addoption("--opperf", action="store_true", default=False,
                    help="measure, report and gate operator performance (default: off)")
