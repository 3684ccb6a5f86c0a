"""Address-space layout randomisation off for both side processes, where the OS allows it.

With randomisation on, each process draws its own addresses for the stack, the heap's start and
every ``mmap`` (where numpy puts large arrays): the two sides of a process pair differ in where
their arrays lie, and so in how they share caches and whether the kernel backs them with huge
pages, a bias of the process pair that no number of pairs in it can average out. With it off,
both sides of a generation lay out their memory alike up to what their code under test does
differently, and each generation still draws a layout of its own through the size of its
environment (:func:`.processes.layout_pad`).

On Linux a side is started through a small trampoline that sets the ``ADDR_NO_RANDOMIZE``
personality flag and then executes the side's command: the flag is inherited across ``exec``
and applies from it on. Whether it took is read back from ``/proc/PID/personality`` once the
side runs (:func:`randomised`): a container's seccomp filter may refuse the ``personality``
call, and the report then says so. Elsewhere, randomisation stays as the OS has it. No pytest
import.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["ADDR_NO_RANDOMIZE", "fixed_layout", "randomised"]

# The personality flag that turns address-space randomisation off (linux/personality.h).
ADDR_NO_RANDOMIZE = 0x0040000

# Run by the side's interpreter in isolated mode (no site, no user environment): set the flag
# (keeping the others), then become the side's command. Whatever stops the flag (a refused call,
# an interpreter without ctypes) leaves the process as it is, which randomised() reports: the
# side starts either way.
_TRAMPOLINE = (
    "import os, sys\n"
    "try:\n"
    "    import ctypes\n"
    "    libc = ctypes.CDLL(None, use_errno=True)\n"
    "    current = libc.personality(0xffffffff)\n"
    f"    if current != -1:\n        libc.personality(current | {ADDR_NO_RANDOMIZE:#x})\n"
    "except Exception:\n"
    "    pass\n"
    "os.execvp(sys.argv[1], sys.argv[1:])\n"
)


def fixed_layout(command: Sequence[str], platform: str = sys.platform) -> list[str]:
    """``command`` started with address-space randomisation off (Linux: through the trampoline,
    run by ``command``'s own interpreter); elsewhere ``command`` as it is."""
    if not platform.startswith("linux") or not command:
        return list(command)
    return [command[0], "-I", "-S", "-c", _TRAMPOLINE, *command]


def randomised(pid: int, proc: Path = Path("/proc")) -> str | None:
    """Why the process ``pid`` runs with address-space randomisation on (``None``: it runs with it
    off), from its ``personality`` under ``proc``."""
    try:
        text = (proc / str(pid) / "personality").read_text(encoding="ascii").strip()
        flags = int(text, 16)
    except (OSError, ValueError) as exc:
        return f"its personality cannot be read ({exc})"
    if flags & ADDR_NO_RANDOMIZE:
        return None
    return "the flag that turns it off is not set (the OS refused the personality call)"
