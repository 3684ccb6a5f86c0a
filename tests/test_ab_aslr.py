"""Address-space randomisation off for both A/B sides (pytest_opperf.ab.aslr)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_opperf.ab import aslr
from pytest_opperf.ab.processes import Side, Sides, SideSpec

LINUX = sys.platform.startswith("linux")

# what a side would see of itself: its personality, where its heap and an mmap'ed array start,
# and its argv
PROBE = ("import json, mmap, sys\n"
         "maps = open('/proc/self/maps').read().splitlines()\n"
         "heap = [m.split('-')[0] for m in maps if m.endswith('[heap]')]\n"
         "big = mmap.mmap(-1, 1 << 22)\n"
         "import ctypes\n"
         "addr = ctypes.addressof(ctypes.c_char.from_buffer(big))\n"
         "print(json.dumps({'personality': open('/proc/self/personality').read().strip(),\n"
         "                  'heap': heap, 'mmap': addr, 'argv': sys.argv[1:]}))\n")


def test_off_linux_the_command_is_left_as_it_is():
    assert aslr.fixed_layout(["python", "-m", "pytest"], platform="darwin") == [
        "python", "-m", "pytest"]
    assert aslr.fixed_layout([], platform="linux") == []


def test_on_linux_the_command_goes_through_the_trampoline_with_its_own_interpreter():
    command = aslr.fixed_layout(["/opt/py/bin/python", "-m", "pytest", "x"], platform="linux")
    assert command[0] == "/opt/py/bin/python" and command[1:4] == ["-I", "-S", "-c"]
    assert command[5:] == ["/opt/py/bin/python", "-m", "pytest", "x"]


def _probe(*args: str) -> dict:
    command = aslr.fixed_layout([sys.executable, "-c", PROBE, *args])
    done = subprocess.run(command, capture_output=True, text=True, check=True, timeout=60)
    return json.loads(done.stdout)


@pytest.mark.skipif(not LINUX, reason="the personality flag is Linux's")
def test_a_process_started_through_it_runs_with_one_layout_and_its_argv_intact():
    first, second = _probe("a b", "", "--x=1"), _probe("a b", "", "--x=1")
    assert int(first["personality"], 16) & aslr.ADDR_NO_RANDOMIZE
    assert first["argv"] == ["a b", "", "--x=1"]  # nothing lost or split on the way
    assert first["heap"] == second["heap"] and first["mmap"] == second["mmap"]  # no draw


@pytest.mark.skipif(not LINUX, reason="the personality flag is Linux's")
def test_without_it_a_process_draws_its_layout():
    """The control: the probe itself sees randomisation when started directly (else the test
    above would pass with the trampoline doing nothing)."""
    runs = [json.loads(subprocess.run([sys.executable, "-c", PROBE], capture_output=True,
                                      text=True, check=True, timeout=60).stdout)
            for _ in range(3)]
    assert not int(runs[0]["personality"], 16) & aslr.ADDR_NO_RANDOMIZE
    assert len({r["mmap"] for r in runs}) > 1


def test_randomised_reads_the_personality(tmp_path):
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "personality").write_text("00040000\n")
    assert aslr.randomised(7, tmp_path) is None
    (tmp_path / "7" / "personality").write_text("00000000\n")
    assert "refused" in (aslr.randomised(7, tmp_path) or "")
    (tmp_path / "7" / "personality").write_text("garbage\n")
    assert "cannot be read" in (aslr.randomised(7, tmp_path) or "")
    assert "cannot be read" in (aslr.randomised(8, tmp_path) or "")


@pytest.mark.skipif(not LINUX, reason="the personality flag is Linux's")
def test_a_side_runs_with_it_off_and_the_note_says_so(tmp_path):
    spec = SideSpec("base", [sys.executable, "-c", "import time; time.sleep(30)"],
                    Path(tmp_path), {"PATH": "/usr/bin:/bin"}, tmp_path / "base.log")
    side = Side(spec)
    try:
        for _ in range(100):  # until the trampoline has become the command
            if aslr.randomised(side.process.pid) is None:
                break
            subprocess.run(["sleep", "0.05"], check=True)
        assert aslr.randomised(side.process.pid) is None
    finally:
        side.kill()
    head = SideSpec("head", spec.command, spec.cwd, spec.env, tmp_path / "head.log")
    sides = Sides(spec, head, first="base", timeout_s=5)
    assert sides.layout_note().endswith("run with address-space randomisation off")
    sides.randomised = {"head": aslr.randomised(7, tmp_path / "none") or ""}
    note = sides.layout_note()
    assert "randomisation stays on (head: its personality cannot be read" in note
    assert "PYTHONHASHSEED" in note
