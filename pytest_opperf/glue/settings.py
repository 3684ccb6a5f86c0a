"""The session's settings, what follows from them (device, workload), and usage errors."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ..core.port import Port
from ..device import DeviceInfo

SESSION_PLUGIN = "opperf-session"  # the name OpPerfSession is registered under


@dataclass(frozen=True)
class Settings:
    """The options after command line, ini and defaults; paths absolute."""

    enabled: bool = False
    workload: str = "auto"
    device: str = "auto"
    timing: str = "events"
    sort: str = "total"
    executor_stat: str = "ExecutorRunTimer"
    paths: dict[str, Path] = field(default_factory=dict)  # thresholds, baseline, the outputs
    history: str | None = None  # a SQLite path (absolute) or a postgresql:// URL
    labels: dict[str, str] = field(default_factory=dict)  # how each was given, for messages
    save_dir: bool = False  # --opperf-save ends with a slash: a directory, created when missing
    record_benchmarks: bool = False  # pytest-benchmark's plain `benchmark` tests become per-op runs
    nvtx: bool = False
    l2_flush: bool = False
    gpu_workers: bool = False
    compare: str | None = None  # A/B: REV|DIR as given
    compare_python: str | None = None  # A/B: the base interpreter, resolved
    compare_timeout: float = 600.0
    compare_undecided: str = "inconclusive"  # UNDECIDED_MODES
    tests_from: str | None = None  # A/B: worktree|head as given (pytest_opperf.ab.tests_from)
    count_steps: int = 2  # steps of a run's counting pass (0: none)
    count_timeout: float = 300.0  # the longest a counting pass may take (s)
    instructions: bool = False  # CPU instructions per counted step, under valgrind
    shard: str | None = None  # --opperf-shard=K/N (pytest_opperf.glue.shard_hook)
    origins: dict[str, Path] = field(default_factory=dict)  # where relative values are relative to

    def label(self, name: str) -> str:
        return self.labels.get(name, f"--opperf-{name.replace('_', '-')}")

    def origin(self, name: str, default: Path) -> Path:
        return self.origins.get(name, default)


SETTINGS = pytest.StashKey[Settings]()
_DEVICE = pytest.StashKey[DeviceInfo]()
PORT = pytest.StashKey[Port]()  # the role's port (pytest_opperf.core.port), set at session start


def select_device(config: pytest.Config) -> DeviceInfo:
    """The session's device (asked of the hook once per process)."""
    device = config.stash.get(_DEVICE, None)
    if device is None:
        requested = config.stash[SETTINGS].device
        device = config.hook.pytest_opperf_select_device(config=config, requested=requested)
        if not isinstance(device, DeviceInfo):
            raise pytest.UsageError(
                f"opperf: pytest_opperf_select_device returned {device!r}, expected a "
                "pytest_opperf.device.DeviceInfo")
        config.stash[_DEVICE] = device
    return device


def resolved_workload(settings: Settings, device: DeviceInfo) -> str:
    if settings.workload != "auto":
        return settings.workload
    return "full" if device.is_gpu else "small"


@dataclass(frozen=True)
class SessionInfo:
    """What a suite may know about the session, also at collection time."""

    enabled: bool  # --opperf
    device: DeviceInfo
    workload: str  # tiny|small|full, auto resolved
    timing: str  # events|sync


def session_info(config: pytest.Config) -> SessionInfo:
    """The session's settings for suites, e.g. in ``pytest_generate_tests`` to
    parametrise by the workload (the device hook is asked at most once)."""
    settings = config.stash[SETTINGS]
    device = select_device(config)
    workload = resolved_workload(settings, device)
    return SessionInfo(settings.enabled, device, workload, settings.timing)


@contextmanager
def usage_errors(label: str, *errors: type[Exception]) -> Iterator[None]:
    """One of ``errors`` inside is a usage error: one line, ``opperf: <label>: <error>``."""
    try:
        yield
    except errors as exc:
        raise pytest.UsageError(f"opperf: {label}: {exc}") from None
