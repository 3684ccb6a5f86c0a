"""pytest glue for pytest-opperf (the ``pytest11`` entry point): options, hooks, the fixtures.

The settings live in :mod:`.settings`, the fixtures in :mod:`.fixtures`, the session of an
``--opperf`` run (gate, report, files) in :mod:`.session`, the reliance on pytest-benchmark's
internals in :mod:`.benchmark_adapter`. Without ``--opperf`` only the options and the two fixtures
exist, and the fixtures only count: no recording, no report, no gate. With it, an ``OpPerfSession``
is registered with the plugin manager and does the work.
"""

from __future__ import annotations

import argparse
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_opperf import hookspec
from pytest_opperf.device import CPU_HOST, DeviceInfo
from pytest_opperf.fixtures import opperf, opperf_benchmark
from pytest_opperf.settings import SESSION_PLUGIN, SETTINGS, Settings, session_info, usage_errors
from pytest_opperf.stattree import SORT_KEYS
from pytest_opperf.xdist_gpu import ENV_LIST, GpuWorkersError, set_worker_device, visible_gpus

if TYPE_CHECKING:  # the name type checkers know; it loads only with --opperf (pytest_configure)
    from pytest_opperf.session import OpPerfSession  # noqa: F401

__all__ = ["SESSION_PLUGIN", "opperf", "opperf_benchmark", "session_info"]

WORKLOADS = ("tiny", "small", "full", "auto")
DEVICES = ("auto", "cpu", "gpu")
TIMINGS = ("events", "sync")


def _parser(name: str, ok: Callable[[str], bool], expected: str) -> Callable[[str], str]:
    def parse(value: str) -> str:
        if not ok(value):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {value!r}")
        return value

    parse.__name__ = name  # argparse names the type in some messages
    return parse


def _choice(option: str, choices: tuple[str, ...]) -> Callable[[str], str]:
    return _parser(option, choices.__contains__, f"one of {'|'.join(choices)}")


MAX_TIMEOUT_S = 7 * 86400.0  # a week: beyond it (inf, 1e10) the waits' clocks overflow


def _timeout(value: str) -> bool:
    try:
        return 0 < float(value) <= MAX_TIMEOUT_S  # False for nan
    except ValueError:
        return False


_seconds = _parser("seconds", _timeout, f"a number of seconds in (0, {MAX_TIMEOUT_S:.0f}]")
MAX_COUNT_STEPS = 1000
_steps = _parser("steps", lambda v: v.strip().isdigit() and int(v) <= MAX_COUNT_STEPS,
                 f"a whole number of steps in [0, {MAX_COUNT_STEPS}]")
_path = _parser("path", lambda value: bool(value.strip()), "a path")


# (option suffix, metavar, parser, default, help); every option is also ini key opperf_<suffix>
_OPTIONS: tuple[tuple[str, str, Callable[[str], str] | None, str | None, str], ...] = (
    ("workload", "NAME", _choice("workload", WORKLOADS), "auto",
     "size of the e2e workload: tiny|small|full|auto (auto: full on GPU, small on CPU)"),
    ("device", "NAME", _choice("device", DEVICES), "auto",
     "where the framework runs: auto|cpu|gpu (gpu without a usable GPU is a usage error)"),
    ("timing", "MODE", _choice("timing", TIMINGS), "events",
     "GPU timing: events (CUDA events, one sync per step) | sync (sync around every op)"),
    ("thresholds", "PATH", _path, None,
     "thresholds file (TOML) with absolute limits and regression tolerances"),
    ("baseline", "PATH", _path, None,
     "compare against a results file, or a directory holding <device_class>-<workload>.json"),
    ("save", "PATH", _path, None,
     "write this session's results as a baseline (atomic replace; a directory gets "
     "<device_class>-<workload>.json)"),
    ("json", "PATH", _path, None, "write the results JSON"),
    ("markdown", "PATH", _path, None,
     "write the markdown report (also appended to $GITHUB_STEP_SUMMARY when set)"),
    ("trace", "PATH", _path, None,
     "write a Chrome trace (chrome://tracing, Perfetto) of one step per run"),
    ("sort", "COLUMN", _choice("sort", tuple(SORT_KEYS)), "total",
     "stat table order: total|avg|max|min|count|name"),
    ("history", "PATH|URL", _path, None, "append this session to a history: a SQLite file "
     "(created on first use) or a postgresql:// URL"),
    # A/B in one job (pytest_opperf/ab): ini keys with underscores, opperf_compare_python...
    ("compare", "REV|DIR", _path, None,
     "A/B: run the base side too (a git revision of the rootdir's repository, or a checkout) and "
     "compare head against base, interleaved"),
    ("compare-python", "PATH", _path, None, "A/B: the base side's interpreter (an environment "
     "with the base build installed; default: this one)"),
    ("compare-timeout", "SECONDS", _seconds, "600",
     "A/B: the longest a side may take to answer (a hang ends both)"),
    ("count-steps", "N", _steps, "2",
     "steps of the counting pass of each run that has one (run.counting_pass): work counts per "
     "step, counted after the timed window; 0: no counting pass"),
    ("count-timeout", "SECONDS", _seconds, "300",
     "the longest a run's counting pass may take (past it the run has no work counts)"),
    ("compare-undecided", "MODE", _choice("compare-undecided", ("warn", "fail")), "warn",
     "A/B: undecided metrics warn (shown in the gate line) or fail the gate: warn|fail"),
)
# switches (each also an ini key); the GPU ones: see docs/contract-additions.md
_FLAGS = (
    ("record_benchmarks", "also record tests using pytest-benchmark's plain `benchmark` fixture "
     "as per-op runs, timed by pytest-benchmark's own timer (without it they are only counted)"),
    ("nvtx", "NVTX ranges around every op and step, named as in the report, for Nsight Systems "
     "(needs nvtx)"),
    ("l2_flush", "per-op benchmarks flush the GPU's L2 cache before each timed call (cold-cache "
     "timing)"),
    ("instructions", "also count the CPU instructions of each counted step under valgrind "
     "(callgrind; each test with a counting pass runs again in a child process)"),
    ("gpu_workers", "one pytest-xdist worker per GPU, each with its own CUDA_VISIBLE_DEVICES (use "
     "with -n auto)"),
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("opperf", "operator performance measurement and gate (pytest-opperf)")
    group.addoption("--opperf", action="store_true", default=None, dest="opperf",
                    help="measure, report and gate operator performance (default: off; ini "
                         "opperf_enabled)")
    parser.addini("opperf_enabled", "turn pytest-opperf on, as --opperf does", type="bool",
                  default=False)
    for name, metavar, parse, default, text in _OPTIONS:
        shown = f"default: {default}" if default else "default: none"
        key = name.replace("-", "_")
        group.addoption(f"--opperf-{name}", metavar=metavar, type=parse, default=None,
                        dest=f"opperf_{key}", help=f"{text} ({shown}; ini opperf_{key})")
        parser.addini(f"opperf_{key}", f"default for --opperf-{name}", default=default or "")
    parser.addini("opperf_executor_stat", "stat whose total is executor time (default: "
                  "ExecutorRunTimer)", default="ExecutorRunTimer")
    for name, text in _FLAGS:
        option = f"--opperf-{name.replace('_', '-')}"
        group.addoption(option, action="store_true", default=None, dest=f"opperf_{name}",
                        help=f"{text} (default: off; ini opperf_{name})")
        parser.addini(f"opperf_{name}", f"turn on {option}", type="bool", default=False)


def _flag(config: pytest.Config, name: str) -> bool:
    given = config.getoption(f"opperf_{name}", None)
    return bool(config.getini(f"opperf_{name}")) if given is None else bool(given)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspec)


def _settings(config: pytest.Config) -> Settings:
    """Resolve and validate every option; a bad ini value is a usage error naming key and value."""
    values: dict[str, Any] = {}
    paths: dict[str, Path] = {}
    labels: dict[str, str] = {}
    ini_dir = config.inipath.parent if config.inipath else config.rootpath
    origins: dict[str, Path] = {}
    for name, _, parse, default, _ in _OPTIONS:
        key = name.replace("-", "_")
        given = config.getoption(f"opperf_{key}")
        base = config.invocation_params.dir
        label = f"--opperf-{name}"
        if given is None:
            given = config.getini(f"opperf_{key}") or None
            base, label = ini_dir, f"ini opperf_{key}"
            if given is not None and parse is not None:
                with usage_errors(label, Exception):  # argparse.ArgumentTypeError
                    given = parse(given)
        if name == "history":
            if given:
                values[name] = given if "://" in given else str(Path(base, given))
                from pytest_opperf.history.store import redact  # sqlite3: only with a history

                labels[name] = f"{label} {redact(given)}"  # never a URL's password
        elif name in ("thresholds", "baseline", "save", "json", "markdown", "trace"):
            if given:
                paths[name] = Path(base, given)
                labels[name] = f"{label} {given}"
        elif name == "count-steps":
            values[key] = int(str(given or default))
        elif name == "count-timeout":
            values[key] = float(str(given or default))
        elif name.startswith("compare"):
            values[key] = _compare_value(key, given or default, base)
            origins[key] = base
            if given:
                labels[key] = f"{label}{'=' if label.startswith('--') else ' = '}{given}"
        else:
            values[name] = given or default
    enabled = config.getoption("opperf")
    if enabled is None:
        enabled = bool(config.getini("opperf_enabled"))
    executor_stat = config.getini("opperf_executor_stat") or "ExecutorRunTimer"
    save_dir = labels.get("save", "").endswith(("/", os.sep))
    if values.get("compare") and not enabled and config.getoption("opperf_compare"):
        raise pytest.UsageError("opperf: --opperf-compare needs --opperf (or ini opperf_enabled)")
    values.update({name: _flag(config, name) for name, _ in _FLAGS})
    return Settings(enabled=enabled, executor_stat=executor_stat, paths=paths, labels=labels,
                    origins=origins, save_dir=save_dir, **values)


def _compare_value(key: str, value: Any, base: Path) -> Any:
    """The A/B options: the timeout as a float, the base interpreter found (on PATH, or a path)."""
    if key == "compare_timeout":
        return float(value)
    if key == "compare_python" and value:
        found = shutil.which(value) if os.sep not in value else str(Path(base, value))
        return found or value  # a python that does not run is a usage error at session start
    return value


def pytest_configure(config: pytest.Config) -> None:
    settings = config.stash[SETTINGS] = _settings(config)
    if settings.gpu_workers and not hasattr(config, "workerinput"):
        _share_gpus(config)
    if settings.enabled:
        from pytest_opperf.session import OpPerfSession  # heavy (gate, report): only with --opperf

        config.pluginmanager.register(OpPerfSession(config, settings), SESSION_PLUGIN)


# --- one xdist worker per GPU (pytest_opperf.xdist_gpu) --------------------------------


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    """A worker of a per-GPU session sees only its GPU, before any conftest can touch CUDA."""
    set_worker_device(os.environ)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto`` with ``--opperf-gpu-workers``: one worker per GPU."""
    if not _flag(config, "gpu_workers"):
        return None
    with usage_errors("--opperf-gpu-workers", GpuWorkersError):
        return len(visible_gpus())


def _share_gpus(config: pytest.Config) -> None:
    """On the controller: check the worker count and hand the GPU list to the workers."""
    workers = config.getoption("numprocesses", None)
    if not workers:
        raise pytest.UsageError("opperf: --opperf-gpu-workers needs pytest-xdist workers: add -n "
                                "auto (one worker per GPU)")
    with usage_errors("--opperf-gpu-workers", GpuWorkersError):
        gpus = visible_gpus()
    if workers > len(gpus):
        raise pytest.UsageError(f"opperf: --opperf-gpu-workers: -n {workers} workers for "
                                f"{len(gpus)} GPU(s) ({','.join(gpus)}); two workers on one GPU "
                                "would disturb each other's timings")
    previous = os.environ.get(ENV_LIST)
    os.environ[ENV_LIST] = ",".join(gpus)  # workers inherit the controller's environment

    def restore() -> None:
        if previous is None:
            os.environ.pop(ENV_LIST, None)
        else:
            os.environ[ENV_LIST] = previous

    config.add_cleanup(restore)


@pytest.hookimpl(trylast=True)
def pytest_opperf_select_device(config: pytest.Config, requested: str) -> DeviceInfo:
    """The fallback when no conftest or plugin chooses: the CPU, host clock."""
    if requested == "gpu":
        raise pytest.UsageError(
            "opperf: --opperf-device=gpu: no plugin provides a GPU device "
            "(implement pytest_opperf_select_device in the suites' conftest.py)")
    return CPU_HOST
