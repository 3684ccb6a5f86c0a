"""What a session records of where and from what it was measured: the machine, the commit.

:func:`hardware_facts` are the facts that decide whether two records are of the same hardware
(:func:`same_hardware`): a baseline's times are compared as times only there.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import subprocess
import sys
from collections.abc import Iterable, Mapping
from importlib import metadata
from typing import Any

__all__ = ["commit_info", "hardware_facts", "machine_info", "package_version", "same_hardware"]



def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def package_version(module: str, *distributions: str) -> str | None:
    """The installed version of ``module``, without importing it."""
    loaded = sys.modules.get(module)
    if loaded is not None and isinstance(getattr(loaded, "__version__", None), str):
        return loaded.__version__
    if importlib.util.find_spec(module) is None:  # cheap; metadata lookups scan every path entry
        return None
    for name in distributions or (module,):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def _blas() -> str | None:
    """numpy's BLAS, read only when numpy is already imported (never imported for this)."""
    np = sys.modules.get("numpy")
    try:
        blas = np.__config__.CONFIG["Build Dependencies"]["blas"]  # type: ignore[union-attr]
        return f"{blas.get('name')} {blas.get('version', '')}".strip()
    except Exception:  # no numpy, or an older numpy without CONFIG
        return None


def machine_info(device: Any = None) -> dict[str, Any]:
    """Facts about this machine for the results file (``device`` is a DeviceInfo)."""
    info: dict[str, Any] = {
        "cpu": _cpu_model(), "cores": os.cpu_count(), "system": platform.system(),
        "python": platform.python_version(), "numpy": package_version("numpy"),
        "cupy": package_version("cupy", "cupy-cuda12x", "cupy-cuda13x", "cupy-cuda11x", "cupy"),
        "blas": _blas(), "gpu": None}
    if device is not None:
        info["device"] = device.name
        info["device_class"] = device.device_class
        if device.is_gpu:
            info["gpu"] = {"model": device.gpu_model, "driver": device.driver, "cuda": device.cuda}
    return info


def _git(args: Iterable[str], cwd: str | os.PathLike[str]) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def commit_info(cwd: str | os.PathLike[str] = ".") -> dict[str, Any] | None:
    """The git commit of ``cwd``: sha, dirty flag (tracked files), branch; ``None`` without git."""
    # one subprocess: porcelain v2 headers carry the sha and branch, the other lines are changes
    out = _git(["status", "--porcelain=v2", "--branch", "--untracked-files=no"], cwd)
    if out is None:
        return None
    sha = branch = None
    dirty = False
    for line in out.splitlines():
        if line.startswith("# branch.oid "):
            sha = line.split()[2]
        elif line.startswith("# branch.head "):
            branch = line.split(maxsplit=2)[2]
        elif line and not line.startswith("#"):
            dirty = True
    if sha is None or sha == "(initial)":
        return None
    return {"sha": sha, "dirty": dirty, "branch": None if branch == "(detached)" else branch}


def hardware_facts(machine: Mapping[str, Any]) -> dict[str, Any]:
    gpu = machine.get("gpu")
    facts = {"device_class": machine.get("device_class"), "cpu": machine.get("cpu"),
             "gpu": gpu.get("model") if isinstance(gpu, dict) else None}
    # A GPU's driver and clock settings change its speed as much as another model does.
    from ..gpu.gpu_env import settings_of

    facts["gpu driver"] = gpu.get("driver") if isinstance(gpu, dict) else None
    facts.update(settings_of(machine))
    return facts


def same_hardware(a: Mapping[str, Any], b: Mapping[str, Any]) -> str | None:
    """``None`` when two machine records describe the same hardware, else how they differ
    (a fact missing from either record is not a difference)."""
    ha, hb = hardware_facts(a), hardware_facts(b)
    diffs = [f"{key} {ha[key]!r} vs {hb[key]!r}" for key in ha
             if ha[key] is not None and hb[key] is not None and ha[key] != hb[key]]
    return "; ".join(diffs) or None
