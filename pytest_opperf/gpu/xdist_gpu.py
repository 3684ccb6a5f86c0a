"""One pytest-xdist worker per GPU (``--opperf-gpu-workers``).

``pytest suites/ --opperf --opperf-gpu-workers -n auto`` gives each worker its own GPU through
``CUDA_VISIBLE_DEVICES``, so every worker sees one device, ``cuda:0``; each times its per-op
benchmarks with :mod:`pytest_opperf.core.oploop` (pytest-benchmark turns itself off under xdist),
and the controller merges the runs into one report and one gate, after checking that all workers ran
on the same GPU model. The controller passes its list of GPUs to its workers in the environment
(:data:`ENV_LIST`), and each worker picks its entry by its xdist id (``gw0`` the first) before any
plugin or conftest can touch CUDA. The pure functions here have no pytest import; the glue is the
plugin's hooks and the controller's and workers' roles (:mod:`pytest_opperf.glue.roles`: the
controller shares the GPUs, a worker times per-op benchmarks with its own loop) (the contract:
docs/gpu.md)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, MutableMapping
from typing import Any

__all__ = ["ENV_LIST", "GpuWorkersError", "assign", "different_models", "visible_gpus",
           "worker_index"]

ENV_LIST = "OPPERF_GPU_WORKER_DEVICES"


class GpuWorkersError(Exception):
    """The GPUs for the workers cannot be found; the message says why."""


def _from_nvml() -> list[str] | None:
    from .gpu_env import nvml_module

    nvml = nvml_module()
    if nvml is None:
        return None
    try:
        nvml.nvmlInit()
        try:
            return [str(i) for i in range(nvml.nvmlDeviceGetCount())]
        finally:
            nvml.nvmlShutdown()
    except Exception:
        return None


def _from_nvidia_smi() -> list[str] | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "--query-gpu=index", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return [line.strip() for line in out.stdout.splitlines()
            if line.strip()] if out.returncode == 0 else None


def visible_gpus(env: Mapping[str, str] | None = None,
                 probes: tuple = (_from_nvml, _from_nvidia_smi)) -> list[str]:
    """The GPUs the workers may use, as ``CUDA_VISIBLE_DEVICES`` entries (indices or UUIDs)."""
    env = os.environ if env is None else env
    given = env.get("CUDA_VISIBLE_DEVICES")
    if given is not None:
        gpus = [g.strip() for g in given.split(",") if g.strip()]
        # CUDA stops at the first invalid entry; "-1" or "" hides every GPU
        gpus = gpus[:next((i for i, g in enumerate(gpus) if g.startswith("-")), len(gpus))]
        if not gpus:
            raise GpuWorkersError(f"CUDA_VISIBLE_DEVICES={given!r} hides every GPU")
        return gpus
    for probe in probes:
        gpus = probe()
        if gpus:
            return gpus
    raise GpuWorkersError("no GPU found (CUDA_VISIBLE_DEVICES is unset, and neither NVML nor "
                          "nvidia-smi lists one)")


def worker_index(worker_id: str) -> int:
    """``gw3`` -> 3."""
    if not worker_id.startswith("gw") or not worker_id[2:].isdigit():
        raise GpuWorkersError(f"unexpected xdist worker id {worker_id!r}, expected gw<N>")
    return int(worker_id[2:])


def assign(worker_id: str, gpus: list[str]) -> str:
    """The GPU of a worker: ``gw<N>`` gets the N-th (a restarted worker, with a higher
    number, the one of the worker it replaces modulo their count)."""
    return gpus[worker_index(worker_id) % len(gpus)]


def different_models(workers: Mapping[str, Mapping[str, Any]]) -> str | None:
    """``None`` when every worker ran on the same GPU model, else which ran on what."""
    models = {name: info.get("gpu_model") for name, info in workers.items()}
    if len(set(models.values())) <= 1:
        return None
    return ", ".join(f"{name}: {model}" for name, model in sorted(models.items()))


def set_worker_device(env: MutableMapping[str, str]) -> str | None:
    """In a worker of a per-GPU session, restrict CUDA to the worker's GPU; returns it."""
    gpus, worker = env.get(ENV_LIST), env.get("PYTEST_XDIST_WORKER")
    if not gpus or not worker:
        return None
    gpu = assign(worker, gpus.split(","))
    env["CUDA_VISIBLE_DEVICES"] = gpu
    return gpu
