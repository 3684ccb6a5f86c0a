"""What a session reads before its first test: the thresholds, the baseline, the history's
target. Each problem is a usage error naming the option (exit 4), before any test runs."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from ..comparison.thresholds import Thresholds, ThresholdsError, load_thresholds
from ..records.reader import read_results
from ..results import ResultsError, ResultSet, baseline_file
from .settings import Settings, usage_errors

__all__ = ["check_history", "read_baseline", "read_thresholds"]


def check_history(settings: Settings) -> None:
    """``--opperf-history``: a target the session could not append to is refused now."""
    if settings.history is None:
        return
    from ..history.errors import HistoryError
    from ..history.sources import check_target

    with usage_errors(settings.label("history"), HistoryError):
        check_target(settings.history)


def read_thresholds(settings: Settings) -> Thresholds | None:
    path = settings.paths.get("thresholds")
    if path is None:
        return None
    with usage_errors(settings.label("thresholds"), ThresholdsError):
        return load_thresholds(path)


def read_baseline(settings: Settings, device_class: str, workload: str, variant: str,
                  warn: Callable[[str], None]) -> tuple[ResultSet | None, str | None]:
    """The baseline and its file's name; a directory holds one file per device class, workload
    and variant, and a directory without this session's file is a warning, not an error."""
    path = settings.paths.get("baseline")
    if path is None:
        return None, None
    label = settings.label("baseline")
    if not os.path.lexists(path):
        raise pytest.UsageError(f"opperf: {label}: no such file or directory")
    if path.is_dir():
        path = baseline_file(path, device_class, workload, variant)
        if not os.path.lexists(path):  # a broken link or a link loop is an error, read below
            warn(f"no baseline {path} for device class {device_class!r} and "
                 f"workload {workload!r}: only absolute limits are checked")
            return None, None
    with usage_errors(label, ResultsError):
        return read_results(path), str(path)
