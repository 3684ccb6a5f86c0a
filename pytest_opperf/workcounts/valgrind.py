"""Valgrind from Python: :func:`client_request` issues valgrind client requests with no compiled
extension (valgrind.h's amd64 magic sequence, placed as machine code in an executable page and
called through ctypes; natively the sequence is a no-op that returns the default), the request
numbers of the core and of callgrind, and :class:`ValgrindError`, the error of counting under
valgrind.

The counting pass built on it: :mod:`pytest_opperf.workcounts.callgrind` (the child's side: a step's
instructions, dumped under its label), :mod:`pytest_opperf.workcounts.callgrind_dumps` (reading
callgrind's output files) and :mod:`pytest_opperf.workcounts.valgrind_run` (the parent's side:
running the child under callgrind).

This module must not import pytest: the child imports it at run time.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import platform
import sys
from typing import Any

__all__ = ["CALLGRIND_DUMP_STATS", "CALLGRIND_DUMP_STATS_AT", "CALLGRIND_START_INSTRUMENTATION",
           "CALLGRIND_STOP_INSTRUMENTATION", "CALLGRIND_TOGGLE_COLLECT", "CALLGRIND_ZERO_STATS",
           "RUNNING_ON_VALGRIND", "RequestFn", "ValgrindError", "client_request",
           "client_request_problem", "platform_problem", "request_function", "running_on_valgrind"]


class ValgrindError(RuntimeError):
    """Counting under valgrind cannot go on; the message is one line that says why."""


def _tool_base(a: str, b: str) -> int:
    """valgrind.h's ``VG_USERREQ_TOOL_BASE(a, b)``: a tool's requests start at its two letters."""
    return (ord(a) & 0xFF) << 24 | (ord(b) & 0xFF) << 16


# valgrind.h: the core's requests; callgrind.h: Vg_CallgrindClientRequest, in its order.
RUNNING_ON_VALGRIND = 0x1001
CALLGRIND_DUMP_STATS = _tool_base("C", "T")               # 0x43540000
CALLGRIND_ZERO_STATS = CALLGRIND_DUMP_STATS + 1           # 0x43540001
CALLGRIND_TOGGLE_COLLECT = CALLGRIND_DUMP_STATS + 2       # 0x43540002
CALLGRIND_DUMP_STATS_AT = CALLGRIND_DUMP_STATS + 3        # 0x43540003
CALLGRIND_START_INSTRUMENTATION = CALLGRIND_DUMP_STATS + 4  # 0x43540004
CALLGRIND_STOP_INSTRUMENTATION = CALLGRIND_DUMP_STATS + 5   # 0x43540005

# uint64_t request(uint64_t args[6], uint64_t default), System V amd64 calling convention: args in
# %rdi, default in %rsi. valgrind.h's VALGRIND_DO_CLIENT_REQUEST_EXPR wants the argument block in
# %rax and the default in %rdx, and leaves the result in %rdx. The four rotations of %rdi add up to
# 128 bits, so natively they leave it unchanged and xchg %rbx,%rbx is a no-op: %rdx keeps the
# default. Valgrind's decoder recognises these exact bytes and runs the request instead.
_REQUEST_CODE = bytes.fromhex(
    "4889f8"    # mov  %rdi,%rax
    "4889f2"    # mov  %rsi,%rdx
    "48c1c703"  # rol  $3,%rdi
    "48c1c70d"  # rol  $13,%rdi
    "48c1c73d"  # rol  $61,%rdi
    "48c1c733"  # rol  $51,%rdi
    "4887db"    # xchg %rbx,%rbx
    "4889d0"    # mov  %rdx,%rax
    "c3"        # ret
)

RequestFn = Any  # a ctypes function pointer: (c_void_p, c_uint64) -> c_uint64
_request_fn: RequestFn | None = None
_request_problem: str | None = None
_request_built = False


def platform_problem() -> str | None:
    """Why this platform cannot issue the requests (x86_64 Linux, 64-bit Python), or ``None``."""
    machine = platform.machine().lower()
    if not sys.platform.startswith("linux") or machine not in ("x86_64", "amd64"):
        return (f"valgrind client requests from Python need x86_64 Linux; this is "
                f"{sys.platform}/{platform.machine() or 'unknown machine'}")
    if ctypes.sizeof(ctypes.c_void_p) != 8:
        return "valgrind client requests from Python need a 64-bit Python; this one is 32-bit"
    return None


def _build_request_fn() -> tuple[RequestFn | None, str | None]:
    """The request sequence in a page of its own, mapped writable, filled, then made executable
    (never both at once: hardened kernels refuse writable and executable memory)."""
    reason = platform_problem()
    if reason is not None:
        return None, reason
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc_mmap = libc.mmap
        libc_mprotect = libc.mprotect
    except (OSError, AttributeError) as exc:
        return None, f"valgrind client requests: no mmap/mprotect in the C library ({exc})"
    libc_mmap.restype = ctypes.c_void_p
    libc_mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc_mprotect.restype = ctypes.c_int
    libc_mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    size = mmap.PAGESIZE
    address = libc_mmap(None, size, mmap.PROT_READ | mmap.PROT_WRITE,
                        mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    if address is None or address == ctypes.c_void_p(-1).value:
        err = ctypes.get_errno()
        return None, f"valgrind client requests: cannot map a page ({os.strerror(err)})"
    ctypes.memmove(address, _REQUEST_CODE, len(_REQUEST_CODE))
    if libc_mprotect(address, size, mmap.PROT_READ | mmap.PROT_EXEC) != 0:
        err = ctypes.get_errno()
        return None, (f"valgrind client requests: executable memory is refused here "
                      f"({os.strerror(err)}; an SELinux or seccomp policy?)")
    # The page stays mapped for the life of the process: the function pointer refers into it.
    # PYFUNCTYPE keeps the GIL across the call: releasing and taking it again would add its own
    # instructions to every step (an empty step: 5,550 with CFUNCTYPE, 5,150 without).
    prototype = ctypes.PYFUNCTYPE(ctypes.c_uint64, ctypes.c_void_p, ctypes.c_uint64)
    return prototype(address), None


def request_function() -> RequestFn:
    """The process's one request function, built on first use (a page of machine code per
    process is enough, and building it again would leak a page)."""
    global _request_fn, _request_problem, _request_built
    if not _request_built:
        _request_fn, _request_problem = _build_request_fn()
        _request_built = True
    if _request_fn is None:
        raise ValgrindError(_request_problem or "valgrind client requests are unavailable")
    return _request_fn


def client_request_problem() -> str | None:
    """Why valgrind client requests cannot be issued from this process (one line), or ``None``."""
    try:
        request_function()
    except ValgrindError as exc:
        return str(exc)
    return None


_ARG_MAX = 2**64 - 1


def client_request(request: int, arg1: int = 0, arg2: int = 0, arg3: int = 0, arg4: int = 0,
                   arg5: int = 0, *, default: int = 0) -> int:
    """Issue valgrind client request ``request`` with up to five word arguments; returns
    valgrind's answer, or ``default`` when the process is not running under valgrind (or the
    running tool does not know the request). Raises :class:`ValgrindError` where requests cannot be
    issued (:func:`client_request_problem`), ``ValueError`` for a value that is not a word."""
    fn = request_function()
    values = (request, arg1, arg2, arg3, arg4, arg5, default)
    for value in values:
        if not 0 <= value <= _ARG_MAX:
            raise ValueError(f"client_request: arguments are unsigned 64-bit words, got {value}")
    block = (ctypes.c_uint64 * 6)(*values[:6])
    return int(fn(ctypes.addressof(block), default))


def running_on_valgrind() -> int:
    """valgrind.h's ``RUNNING_ON_VALGRIND``: 0 natively, 1 under valgrind (more when valgrind
    runs under valgrind); 0 too where client requests cannot be issued."""
    if client_request_problem() is not None:
        return 0
    return client_request(RUNNING_ON_VALGRIND, default=0)
