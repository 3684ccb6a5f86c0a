"""pytest glue for pytest-opperf (the ``pytest11`` entry point): options, hooks, the fixtures.

The options' table (with each option's child policy) lives in :mod:`.options`, the settings
in :mod:`.settings`, the fixtures in :mod:`.fixtures`, the sessions of an ``--opperf`` run in
:mod:`.session` (what every role does) and :mod:`.main_session` (gate, report, files), the
reliance on pytest-benchmark's internals in :mod:`.benchmark_adapter`. ``pytest_configure``
chooses the process's role once (:mod:`.roles`). Without ``--opperf`` only the options and the
two fixtures exist, and the fixtures only count: no recording, no report, no gate. With it, the
role's session (a subclass of :class:`~pytest_opperf.glue.session.OpPerfSession`) is registered with
the plugin manager and does the work.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from . import hookspec
from .device import CPU_HOST, DeviceInfo
from .glue import child
from .glue.fixtures import opperf, opperf_benchmark
from .glue.options import FLAGS, OPTIONS
from .glue.settings import (
    SESSION_PLUGIN,
    SETTINGS,
    Settings,
    session_info,
    usage_errors,
)
from .gpu.xdist_gpu import GpuWorkersError, set_worker_device, visible_gpus

__all__ = ["SESSION_PLUGIN", "opperf", "opperf_benchmark", "session_info"]

def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("opperf", "operator performance measurement and gate (pytest-opperf)")
    group.addoption("--opperf", action="store_true", default=None, dest="opperf",
                    help="measure, report and gate operator performance (default: off; ini "
                         "opperf_enabled)")
    parser.addini("opperf_enabled", "turn pytest-opperf on, as --opperf does", type="bool",
                  default=False)
    for name, _, metavar, parse, default, text in OPTIONS:
        shown = f"default: {default}" if default else "default: none"
        key = name.replace("-", "_")
        group.addoption(f"--opperf-{name}", metavar=metavar, type=parse, default=None,
                        dest=f"opperf_{key}", help=f"{text} ({shown}; ini opperf_{key})")
        parser.addini(f"opperf_{key}", f"default for --opperf-{name}", default=default or "")
    parser.addini("opperf_executor_stat", "stat whose total is executor time (default: "
                  "ExecutorRunTimer)", default="ExecutorRunTimer")
    for name, _, text in FLAGS:
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
    with usage_errors("a child of pytest-opperf", child.ChildError):
        fixed = child.parent_options()  # in a child: only what its parent fixed (child.py)
    for name, policy, _, parse, default, _ in OPTIONS:
        key = name.replace("-", "_")
        if fixed is None:
            given = config.getoption(f"opperf_{key}")
        else:  # a stripped option keeps its default in a child, whatever its environment says
            given = fixed.get(name) if policy == "fixed" else None
        base = config.invocation_params.dir
        label = f"--opperf-{name}"
        if fixed is not None:
            if given is not None and parse is not None:
                with usage_errors(f"{label} (fixed by the parent)", Exception):
                    given = parse(given)
        elif given is None:
            given = config.getini(f"opperf_{key}") or None
            base, label = ini_dir, f"ini opperf_{key}"
            if given is not None and parse is not None:
                with usage_errors(label, Exception):  # argparse.ArgumentTypeError
                    given = parse(given)
        if name == "history":
            if given:
                values[name] = given if "://" in given else str(Path(base, given))
                from .history.sources import redact  # sqlite3: only with a history

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
        elif name == "tests-from":
            values[key] = given
            if given:
                labels[key] = f"{label}{'=' if label.startswith('--') else ' = '}{given}"
        else:
            values[name] = given or default
    enabled = config.getoption("opperf") if fixed is None else True
    if enabled is None:
        enabled = bool(config.getini("opperf_enabled"))
    executor_stat = config.getini("opperf_executor_stat") or "ExecutorRunTimer"
    save_dir = labels.get("save", "").endswith(("/", os.sep))
    if config.getoption("opperf_tests_from", None) and not values.get("compare"):
        raise pytest.UsageError("opperf: --opperf-tests-from needs --opperf-compare (the base "
                                "side that runs the tests too)")
    if values.get("compare") and not enabled and config.getoption("opperf_compare"):
        raise pytest.UsageError("opperf: --opperf-compare needs --opperf (or ini opperf_enabled)")
    values.update({name: _flag(config, name) if fixed is None
                   else policy == "fixed" and fixed.get(name.replace("_", "-")) == "true"
                   for name, policy, _ in FLAGS})
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
    if settings.shard is not None:  # --opperf-shard: a part of the tests
        from .glue import shard_hook

        shard_hook.register(config, settings)
    if settings.enabled:  # the opperf report shows the per-op runs: one table of them
        from .glue.benchmark_adapter import quiet_benchmark_table

        quiet_benchmark_table(config.option)
    if settings.enabled or settings.gpu_workers:  # else no role has anything to do
        from .glue import roles  # heavy (gate, report): the sessions load with it

        roles.configure(config, settings)


# --- one xdist worker per GPU (pytest_opperf.gpu.xdist_gpu) --------------------------------


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


@pytest.hookimpl(trylast=True)
def pytest_opperf_select_device(config: pytest.Config, requested: str) -> DeviceInfo:
    """The fallback when no conftest or plugin chooses: the CPU, host clock."""
    if requested == "gpu":
        raise pytest.UsageError(
            "opperf: --opperf-device=gpu: no plugin provides a GPU device "
            "(implement pytest_opperf_select_device in the suites' conftest.py)")
    return CPU_HOST
