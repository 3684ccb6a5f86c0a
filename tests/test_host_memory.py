"""Host memory (reference_framework.host_memory): freed arrays stay in the process by default,
the C library's defaults on request, and a wrong mode is an error. Each case runs in a fresh
interpreter: mallopt's thresholds are the whole process's."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from reference_framework import host_memory

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or
                                platform.libc_ver()[0] != "glibc",
                                reason="mallopt's thresholds are glibc's")

# Touches a 16 MB array, frees it, and prints the mode and how many MB of it the process kept.
_CHILD = r"""
import numpy as np
import reference_framework as rf

def resident_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20

before = resident_mb()
a = np.ones(16 << 18, dtype=np.float32)  # 16 MB, every page touched
del a
print(rf.host_memory.MODE, round(resident_mb() - before, 1))
"""


def _child(mode: str | None) -> tuple[str, float]:
    env = {k: v for k, v in os.environ.items() if k != host_memory.ENV}
    if mode is not None:
        env[host_memory.ENV] = mode
    out = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    return " ".join(out[:-1]), float(out[-1])


def test_freed_arrays_stay_in_the_process_by_default() -> None:
    mode, kept_mb = _child(None)
    assert mode == "retain"
    assert kept_mb > 12, f"only {kept_mb} MB of a freed 16 MB array stayed"


def test_retain_by_name_is_the_default() -> None:
    mode, kept_mb = _child("retain")
    assert mode == "retain" and kept_mb > 12


def test_system_gives_freed_arrays_back() -> None:
    mode, kept_mb = _child("system")
    assert mode == f"system ({host_memory.ENV}=system)"
    assert kept_mb < 4, f"{kept_mb} MB of a freed 16 MB array stayed under the C library's defaults"


def test_a_wrong_mode_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(host_memory.ENV, "keep")
    with pytest.raises(ValueError, match=f"{host_memory.ENV} expects 'retain'.*'keep'"):
        host_memory.apply()
