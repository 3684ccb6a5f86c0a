"""The GPU's environment at the start and end of a session, read through NVML.

A GPU run's speed depends on more than the model: the driver, the clocks it ran at, its power limit
and temperature, ECC and MIG. :func:`snapshot` reads them with ``nvidia-ml-py`` (the ``pynvml``
module; optional), only ever through NVML's query functions: nothing here changes a GPU setting.
:func:`throttling` compares the end of a session with its start and says when the GPU was held back
(power or thermal limits, clocks that fell), and :func:`settings_of` picks the facts that make two
baselines comparable (a baseline from another driver or clock setting is flagged like one from other
hardware). No pytest import.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

__all__ = ["GPU_SETTINGS", "findings", "nvml_module", "settings_of", "snapshot", "throttling"]

# NVML's clock event (throttle) reason bits (nvml.h), and the ones that hold a GPU back.
_REASONS = {
    0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting",
}
_HOLDING_BACK = ("sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
                 "hw_power_brake_slowdown")
_PERF_POLICY = {"power": "NVML_PERF_POLICY_POWER", "thermal": "NVML_PERF_POLICY_THERMAL"}
# nvml.h's values, used when the module lacks the constant
_CONSTANTS = {"NVML_PERF_POLICY_POWER": 0, "NVML_PERF_POLICY_THERMAL": 1, "NVML_CLOCK_SM": 1,
              "NVML_CLOCK_MEM": 2, "NVML_TEMPERATURE_GPU": 0}

# The facts of a snapshot that are settings, not state: two runs are only comparable
# when these agree (a driver update or locked clocks change the speed of every op).
GPU_SETTINGS = ("driver", "applications_sm_clock_mhz", "applications_mem_clock_mhz",
                "power_limit_w", "ecc", "mig")


def nvml_module() -> Any | None:
    """The ``pynvml`` module of nvidia-ml-py, or ``None`` when it is not installed."""
    try:
        return importlib.import_module("pynvml")
    except ImportError:
        return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _read(nvml: Any, name: str, *args: Any) -> Any:
    """One NVML query; ``None`` when the GPU or driver does not support it."""
    fn = getattr(nvml, name, None)
    if fn is None:
        return None
    try:
        return fn(*args)
    except Exception:  # NVMLError_NotSupported, NoPermission...
        return None


def _mode(value: Any) -> str | None:
    """(current, pending) modes as ``"on"``/``"off"``, with the pending one when it differs."""
    if value is None:
        return None
    current, pending = (value if isinstance(value, (tuple, list)) else (value, value))[:2]
    text, later = ("on" if current else "off"), ("on" if pending else "off")
    return text if text == later else f"{text} (pending {later})"


def snapshot(pci_bus_id: str | None, nvml: Any = None) -> dict[str, Any]:
    """The GPU's facts now, e.g. ``{"name", "driver", "sm_clock_mhz", ...}``; a fact
    NVML cannot give is ``None``. Without NVML, or without a way to find the GPU,
    the snapshot is ``{"error": "<why>"}``."""
    if not pci_bus_id:
        return {"error": "the device has no PCI bus id to find it in NVML"}
    nvml = nvml if nvml is not None else nvml_module()
    if nvml is None:
        return {"error": "nvidia-ml-py is not installed (pip install 'pytest-opperf[gpu]')"}
    try:
        nvml.nvmlInit()
    except Exception as exc:
        return {"error": f"NVML did not start: {exc}"}
    try:
        handle = _read(nvml, "nvmlDeviceGetHandleByPciBusId_v2", pci_bus_id) or _read(
            nvml, "nvmlDeviceGetHandleByPciBusId", pci_bus_id)
        if handle is None:
            return {"error": f"NVML has no GPU at PCI bus id {pci_bus_id}"}
        return _facts(nvml, handle)
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass


def _const(nvml: Any, name: str) -> int:
    value = getattr(nvml, name, None)
    return value if isinstance(value, int) else _CONSTANTS[name]


def _facts(nvml: Any, handle: Any) -> dict[str, Any]:
    sm, mem = _const(nvml, "NVML_CLOCK_SM"), _const(nvml, "NVML_CLOCK_MEM")
    reasons = _read(nvml, "nvmlDeviceGetCurrentClocksEventReasons", handle)
    if reasons is None:
        reasons = _read(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", handle)
    power = _read(nvml, "nvmlDeviceGetEnforcedPowerLimit", handle)
    cuda = _read(nvml, "nvmlSystemGetCudaDriverVersion")
    violations = {}
    for policy, code in _PERF_POLICY.items():
        status = _read(nvml, "nvmlDeviceGetViolationStatus", handle, _const(nvml, code))
        violations[policy] = int(status.violationTime) if status is not None else None
    name = _read(nvml, "nvmlDeviceGetName", handle)
    driver = _read(nvml, "nvmlSystemGetDriverVersion")
    return {
        "name": _text(name) if name is not None else None,
        "driver": _text(driver) if driver is not None else None,
        "cuda_driver": f"{cuda // 1000}.{cuda % 1000 // 10}" if isinstance(cuda, int) else None,
        "sm_clock_mhz": _read(nvml, "nvmlDeviceGetClockInfo", handle, sm),
        "mem_clock_mhz": _read(nvml, "nvmlDeviceGetClockInfo", handle, mem),
        "max_sm_clock_mhz": _read(nvml, "nvmlDeviceGetMaxClockInfo", handle, sm),
        "applications_sm_clock_mhz": _read(nvml, "nvmlDeviceGetApplicationsClock", handle, sm),
        "applications_mem_clock_mhz": _read(nvml, "nvmlDeviceGetApplicationsClock", handle, mem),
        "power_limit_w": power / 1000 if isinstance(power, (int, float)) else None,
        "temperature_c": _read(nvml, "nvmlDeviceGetTemperature", handle,
                               _const(nvml, "NVML_TEMPERATURE_GPU")),
        "ecc": _mode(_read(nvml, "nvmlDeviceGetEccMode", handle)),
        "mig": _mode(_read(nvml, "nvmlDeviceGetMigMode", handle)),
        "clock_reasons": ([n for bit, n in _REASONS.items() if reasons & bit]
                          if isinstance(reasons, int) else None),
        "violation_ns": violations,
    }


def throttling(start: Mapping[str, Any] | None, end: Mapping[str, Any] | None) -> list[str]:
    """Warnings when the GPU was held back between two snapshots of one session."""
    if not start or not end or "error" in start or "error" in end:
        return []
    warnings = []
    for policy in _PERF_POLICY:
        a = (start.get("violation_ns") or {}).get(policy)
        b = (end.get("violation_ns") or {}).get(policy)
        if isinstance(a, int) and isinstance(b, int) and b > a:
            warnings.append(f"the GPU was held back by its {policy} limit for {(b - a) / 1e6:.0f} "
                            "ms during the session (NVML violation counter): its timings are "
                            "slower than its clocks allow")
    held = [r for r in end.get("clock_reasons") or [] if r in _HOLDING_BACK]
    if held:
        warnings.append("at the end of the session the GPU's clocks were held back: "
                        f"{', '.join(held)}")
    a, b = start.get("sm_clock_mhz"), end.get("sm_clock_mhz")
    idle = "gpu_idle" in (start.get("clock_reasons") or [])
    if isinstance(a, int) and isinstance(b, int) and not idle and b < 0.9 * a:
        warnings.append(f"the GPU's SM clock fell from {a} MHz at the start of the session "
                        f"to {b} MHz at the end")
    return warnings


def settings_of(machine: Mapping[str, Any]) -> dict[str, Any]:
    """The GPU settings of a results file's machine record, keyed ``gpu <setting>``
    (``None`` for each when the record has no NVML snapshot)."""
    env = machine.get("gpu_env")
    start = env.get("start") if isinstance(env, Mapping) else None
    if not isinstance(start, Mapping) or "error" in start:
        start = {}
    return {f"gpu {key}": start.get(key) for key in GPU_SETTINGS}


def findings(own: Mapping[str, Any], workers: Mapping[str, Mapping[str, Any]]
             ) -> tuple[list[str], list[str]]:
    """The notes and warnings of a session's snapshots (``own``: its ``start`` and ``end``, empty
    without a GPU) and of its per-GPU workers' (by worker name, each ``gpu_env`` its own)."""
    notes, warnings = [], []
    if own:
        error = own["start"].get("error")
        if error:
            notes.append(f"GPU environment (NVML) not recorded: {error}")
        warnings += throttling(own["start"], own.get("end"))
    for name, info in sorted(workers.items()):
        env = info.get("gpu_env") or {}
        warnings += [f"worker {name}: {w}" for w in throttling(env.get("start"), env.get("end"))]
    return notes, warnings
