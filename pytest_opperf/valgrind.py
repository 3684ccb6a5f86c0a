"""CPU instruction counts per training step, measured under valgrind's callgrind.

Wall-clock time on a shared CI machine is noisy; the number of instructions a step executes is not.
The counting pass re-runs one test in a child process under callgrind with instrumentation and
collection off (``--instr-atstart=no --collect-atstart=no``), so the interpreter's start-up, the
imports and the test's setup run at valgrind's lowest slowdown and count nothing. This module holds
both sides of that:

* the child's: :func:`client_request` issues valgrind client requests from Python with no compiled
  extension (valgrind.h's amd64 magic sequence, placed as machine code in an executable page and
  called through ctypes; natively the sequence is a no-op that returns the default), and
  :class:`Callgrind` turns instrumentation on for the pass and, around each step, zeroes the
  counters, collects only while the step runs and dumps them under the step's label;
* the parent's: :func:`problem` (why counting cannot run here, one line), :func:`command` and
  :func:`child_env` (the valgrind command line and environment for a Python argv),
  :func:`parse_dump` and :func:`read_step_counts` (callgrind's output files to each step's
  instruction count), :func:`run_counted`, which does all of it with a timeout and turns a
  crashing or hanging child into one clear :class:`ValgrindError`, and :func:`counted_on` (the
  CPU model and valgrind release that counts from two machines must share to compare).

Callgrind's client requests act on the calling thread only (its collection switch, zeroing and
dumps are per thread), so a step's count is the instructions of the thread that ran the step.
:func:`child_env` therefore holds numpy's BLAS and OpenMP to one thread, so that their work runs on
that thread and is counted; work a step hands to threads of its own is not counted.

What it costs and how steady it is (CPython 3.11, valgrind 3.19, numpy 2.4 with OpenBLAS; CPU time
per step against the same step natively): with instrumentation off a Python loop runs about 5x
slower and numpy's elementwise work about 9x, but OpenBLAS's AVX2/FMA matrix kernels 50x to 150x
(``OPENBLAS_CORETYPE=Prescott`` takes its SSE kernels, which valgrind runs far faster, and which are
other instructions); a counted step runs 45x to 90x slower. Python's start-up alone takes a second
or two, importing numpy two or three more. A step's count repeats exactly between runs, or differs
by tens of instructions, a few hundred at most (8e-6 of a 4 M-instruction Python step; 4e-4 of the
first 0.86 M-instruction numpy step of a pass, 2e-5 of the later ones), ASLR off or on: CPython's
type method cache is keyed by the addresses of names, so lookups that miss it follow the heap's
layout. A different hash seed moves a step on a set of strings by 0.2%.

This module must not import pytest: the child imports it at run time.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["CALLGRIND_DUMP_STATS", "CALLGRIND_DUMP_STATS_AT", "CALLGRIND_START_INSTRUMENTATION",
           "CALLGRIND_STOP_INSTRUMENTATION", "CALLGRIND_TOGGLE_COLLECT", "CALLGRIND_ZERO_STATS",
           "RUNNING_ON_VALGRIND", "Callgrind", "CallgrindFormatError", "Dump", "ValgrindError",
           "child_env", "client_request", "client_request_problem", "command", "counted_on",
           "parse_dump",
           "problem", "read_step_counts", "run_counted", "running_on_valgrind"]


class ValgrindError(RuntimeError):
    """Counting under valgrind cannot go on; the message is one line that says why."""


class CallgrindFormatError(ValgrindError):
    """A callgrind output file that is not what callgrind writes; the message names the file."""


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

_RequestFn = Any  # a ctypes function pointer: (c_void_p, c_uint64) -> c_uint64
_request_fn: _RequestFn | None = None
_request_problem: str | None = None
_request_built = False


def _platform_problem() -> str | None:
    machine = platform.machine().lower()
    if not sys.platform.startswith("linux") or machine not in ("x86_64", "amd64"):
        return (f"valgrind client requests from Python need x86_64 Linux; this is "
                f"{sys.platform}/{platform.machine() or 'unknown machine'}")
    if ctypes.sizeof(ctypes.c_void_p) != 8:
        return "valgrind client requests from Python need a 64-bit Python; this one is 32-bit"
    return None


def _build_request_fn() -> tuple[_RequestFn | None, str | None]:
    """The request sequence in a page of its own, mapped writable, filled, then made executable
    (never both at once: hardened kernels refuse writable and executable memory)."""
    reason = _platform_problem()
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


def _request() -> _RequestFn:
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
        _request()
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
    fn = _request()
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


_LABEL = re.compile(r"[A-Za-z0-9_.:/\[\]@+=,-]+(?: [A-Za-z0-9_.:/\[\]@+=,-]+)*")


def _check_label(label: str) -> str:
    """A step label becomes the tail of a ``desc:`` line in the dump; it must survive the trip."""
    if not isinstance(label, str) or len(label) > 200 or not _LABEL.fullmatch(label):
        raise ValueError(f"step label must be 1-200 characters of letters, digits, single spaces "
                         f"and _.:/[]@+=,- (no leading or trailing space), got {label!r}")
    return label


class Callgrind:
    """The child's side of the counting pass: instrumentation on for the pass, and per step only
    that step's instructions, dumped under its label.

    ``start_pass()`` switches instrumentation on (callgrind discards its translations, so this
    costs once per pass); ``begin_step()`` zeroes the thread's counters and starts collecting;
    ``end_step(label)`` stops collecting and dumps the counters (callgrind writes one file per
    dump, its ``desc: Trigger:`` line ending in the label); ``end_pass()`` switches
    instrumentation off again. Besides the step, only the request calls' own return and entry
    fall inside it: an empty step counts about 5,150 instructions (CPython 3.11).

    The toggles assume collection is off when the pass starts, as :func:`command`'s
    ``--collect-atstart=no`` makes it; under other options a step would count what lies between
    steps instead. Work the step runs on other threads is not counted (the module's docstring).

    Natively ``start_pass()`` raises :class:`ValgrindError` (and the step methods then refuse with
    ``RuntimeError``, no pass being open): a counting pass that silently counted nothing would look
    like a pass of free steps. Check ``running()`` first."""

    def __init__(self) -> None:
        self._in_pass = False
        self._in_step = False
        self._labels: set[str] = set()
        self._fn: _RequestFn = None  # the request function, once a pass starts
        self._toggle = (ctypes.c_uint64 * 6)(CALLGRIND_TOGGLE_COLLECT)
        self._toggle_address = ctypes.addressof(self._toggle)

    def running(self) -> bool:
        """Whether this process runs under valgrind (and can issue requests)."""
        return running_on_valgrind() > 0

    def start_pass(self) -> None:
        if not self.running():
            raise ValgrindError("Callgrind.start_pass(): this process is not running under "
                                "valgrind" + _why_not())
        if self._in_pass:
            raise RuntimeError("Callgrind.start_pass(): a pass is already open")
        # Switching instrumentation resets every thread's collection state to the start value
        # (--collect-atstart=no: off), so the toggles below start from a known state.
        client_request(CALLGRIND_START_INSTRUMENTATION)
        self._fn = _request()
        self._in_pass = True
        self._labels = set()

    def begin_step(self) -> None:
        if not self._in_pass:
            raise RuntimeError("Callgrind.begin_step(): no pass is open (start_pass() first)")
        if self._in_step:
            raise RuntimeError("Callgrind.begin_step(): the previous step was not ended")
        self._in_step = True
        client_request(CALLGRIND_ZERO_STATS)
        # Collection on: the last thing before the step, and through a prepared argument block,
        # so that little of the request call's own work is counted with the step.
        self._fn(self._toggle_address, 0)

    def end_step(self, label: str) -> None:
        if self._in_step:
            self._fn(self._toggle_address, 0)  # collection off: the first thing after the step
        else:
            raise RuntimeError("Callgrind.end_step(): no step was begun")
        self._in_step = False
        _check_label(label)
        if label in self._labels:
            raise ValueError(f"Callgrind.end_step(): label {label!r} is already used in this pass")
        self._labels.add(label)
        # callgrind copies the label into the dump before the request returns
        buffer = ctypes.create_string_buffer(label.encode("ascii"))
        client_request(CALLGRIND_DUMP_STATS_AT, ctypes.addressof(buffer))

    def end_pass(self) -> None:
        if not self._in_pass:
            raise RuntimeError("Callgrind.end_pass(): no pass is open")
        self._in_step = False  # stopping instrumentation switches collection off as well
        client_request(CALLGRIND_STOP_INSTRUMENTATION)
        self._in_pass = False


def _why_not() -> str:
    reason = client_request_problem()
    return f" ({reason})" if reason else ""


# ----------------------------------------------------------------------------------------------
# The parent's side


def problem() -> str | None:
    """Why a counting pass under valgrind cannot run on this machine (one line), or ``None``."""
    reason = _platform_problem()
    if reason is not None:
        return reason
    if shutil.which("valgrind") is None:
        return "valgrind is not on PATH (install it: apt-get install valgrind)"
    return client_request_problem()


def counted_on(cpuinfo: str = "/proc/cpuinfo") -> str:
    """What a count depends on besides the code: the CPU model (its features choose numpy's and
    the BLAS's code paths) and the valgrind release (it decides which of them the program sees:
    valgrind 3.19 hides AVX-512), e.g. ``"AMD EPYC, valgrind-3.19.0"``. Counts from two machines
    compare when this agrees."""
    model = "unknown CPU"
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and value.strip():
                    model = " ".join(value.split())
                    break
    except OSError:
        pass
    try:
        done = subprocess.run(["valgrind", "--version"], capture_output=True, text=True,
                              timeout=30)
        release = done.stdout.strip() or "valgrind of unknown version"
    except (OSError, subprocess.SubprocessError):
        release = "no valgrind"
    return f"{model}, {release}"


def _real_executable(program: str) -> str:
    """``program`` as a path; valgrind does not follow exec (--trace-children=no), so a script
    (a pyenv shim, a wrapper) would be measured instead of the Python it starts."""
    found = shutil.which(program)
    if found is None:
        raise ValgrindError(f"cannot run {program!r}: not found")
    try:
        with open(found, "rb") as f:
            head = f.read(2)
    except OSError as exc:
        raise ValgrindError(f"cannot read {found}: {exc.strerror}") from None
    if head == b"#!":
        raise ValgrindError(f"{found} is a script, not a program: valgrind would count its "
                            f"interpreter, not the Python it starts (give sys.executable)")
    return found


OUT_PREFIX = "callgrind.out"


def command(argv: Sequence[str], out_dir: str | os.PathLike[str]) -> list[str]:
    """The valgrind command line that runs ``argv`` (a Python program: ``[sys.executable, ...]``)
    with callgrind writing its dumps into ``out_dir`` and its own messages to a log there.
    Raises :class:`ValgrindError` when ``argv[0]`` is not a program valgrind can count."""
    if not argv:
        raise ValueError("command(): argv is empty")
    out = Path(out_dir).resolve()
    return [
        "valgrind", "--tool=callgrind",
        # nothing counted until a pass starts (instrumentation) and a step begins (collection)
        "--instr-atstart=no", "--collect-atstart=no",
        # instruction counts only; the cache and branch simulations cost time and add nothing
        "--cache-sim=no", "--branch-sim=no",
        # a program the child starts runs natively; only the child's own steps are counted
        "--trace-children=no",
        f"--callgrind-out-file={out / OUT_PREFIX}.%p",
        f"--log-file={out}/valgrind.%p.log",
        _real_executable(argv[0]), *argv[1:],
    ]


_THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                     "BLIS_NUM_THREADS", "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")


def child_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The child's environment: ``base`` (default ``os.environ``) with a fixed hash seed (string
    hashes decide set and dict-of-set orders, and so the work of a step), one BLAS/OpenMP thread
    (callgrind counts only the thread that ran the step) and Python's own allocator.

    ``PYTHONMALLOC=malloc``, which memcheck needs, is wrong here: callgrind checks no memory, and
    glibc's malloc costs a pure-Python step about a third more instructions than pymalloc, and
    makes the count vary between runs (by 1e-4 where pymalloc's runs agree to 1e-6 or better).

    OpenBLAS's kernels are fixed to its SSE ones (``OPENBLAS_CORETYPE=Prescott``, unless ``base``
    sets it): valgrind runs its AVX2 kernels 50x to 150x slower than natively and these about 14x
    faster, and the counts then do not depend on which x86 CPU OpenBLAS would have picked kernels
    for (numpy's own SIMD dispatch still does: counts compare on one CPU model only)."""
    env = dict(os.environ if base is None else base)
    if not env.get("PYTHONHASHSEED", "").isdigit():
        env["PYTHONHASHSEED"] = "0"
    env["PYTHONMALLOC"] = "pymalloc"
    env.setdefault("OPENBLAS_CORETYPE", "Prescott")
    for name in _THREAD_VARIABLES:
        env[name] = "1"
    return env


@dataclass(frozen=True)
class Dump:
    """One callgrind output file: its part number, the ``desc: Trigger:`` text, the label of a
    :meth:`Callgrind.end_step` dump (``None`` for other dumps), the event names, and the counts of
    the ``totals:`` and ``summary:`` lines, one per event (``None`` for a line not there; one of
    them always is)."""

    source: str
    part: int | None
    trigger: str | None
    label: str | None
    events: tuple[str, ...]
    totals: tuple[int, ...] | None
    summary: tuple[int, ...] | None

    def count(self, event: str = "Ir") -> int:
        """The dump's total of ``event`` (``totals:``, else ``summary:``); ``Ir`` is
        instructions executed."""
        if event not in self.events:
            raise CallgrindFormatError(f"{self.source}: no event {event!r} (events: "
                                       f"{' '.join(self.events)})")
        counts = self.totals if self.totals is not None else self.summary
        assert counts is not None  # parse_dump refuses a file with neither
        return counts[self.events.index(event)]


_STEP_TRIGGER = "Client Request: "
_HEADER = re.compile(r"([a-z]+):(.*)")
_NUMBERS = re.compile(r"\d+(?: +\d+)*")


def parse_dump(text: str, source: str = "<text>") -> Dump:
    """Parse callgrind's output format (the header: ``version:``, ``part:``, ``desc:``,
    ``events:``, ``summary:``; the ``totals:`` line) far enough to read the totals. Raises
    :class:`CallgrindFormatError` naming ``source`` for a file callgrind did not write whole."""

    def bad(why: str) -> CallgrindFormatError:
        return CallgrindFormatError(f"{source}: not a callgrind output file: {why}")

    lines = text.splitlines()
    if not lines or lines[0].strip() != "# callgrind format":
        first = lines[0][:40] if lines else ""
        raise bad(f"first line is {first!r}, expected '# callgrind format'")
    fields: dict[str, list[str]] = {}
    for line in lines[1:]:
        match = _HEADER.fullmatch(line)
        if match and match.group(1) in ("version", "part", "desc", "events", "summary", "totals"):
            fields.setdefault(match.group(1), []).append(match.group(2).strip())
    for key in ("version", "part", "events", "summary", "totals"):
        if len(fields.get(key, [])) > 1:
            raise bad(f"{len(fields[key])} '{key}:' lines")
    if fields.get("version", ["1"])[0] != "1":
        raise bad(f"version {fields['version'][0]!r}, expected 1")
    if "events" not in fields or not fields["events"][0]:
        raise bad("no 'events:' line")
    events = tuple(fields["events"][0].split())

    def numbers(key: str) -> tuple[int, ...] | None:
        if key not in fields:
            return None
        value = fields[key][0]
        if not _NUMBERS.fullmatch(value):
            raise bad(f"'{key}: {value[:40]}' is not a list of counts")
        counts = tuple(int(n) for n in value.split())
        if len(counts) > len(events):
            raise bad(f"'{key}:' has {len(counts)} counts for {len(events)} events")
        return counts + (0,) * (len(events) - len(counts))  # the format lets trailing 0s go

    totals, summary = numbers("totals"), numbers("summary")
    if totals is None and summary is None:
        raise bad("neither a 'totals:' nor a 'summary:' line (a file cut short?)")
    part = None
    if "part" in fields:
        if not fields["part"][0].isdigit():
            raise bad(f"'part: {fields['part'][0][:40]}' is not a number")
        part = int(fields["part"][0])
    triggers = [d[len("Trigger:"):].strip() for d in fields.get("desc", [])
                if d.startswith("Trigger:")]
    trigger = triggers[0] if triggers else None
    label = None
    if trigger is not None and trigger.startswith(_STEP_TRIGGER):
        label = trigger[len(_STEP_TRIGGER):]
    return Dump(source, part, trigger, label, events, totals, summary)


def read_step_counts(out_dir: str | os.PathLike[str], pid: int | None = None,
                     event: str = "Ir") -> dict[str, int]:
    """Each step label's count of ``event`` (instructions by default) from the dumps in
    ``out_dir`` (of process ``pid`` only, when given), in the order of the steps. Raises
    :class:`CallgrindFormatError` for a malformed dump, a label dumped twice, or a step's dump
    without both a ``summary:`` and a ``totals:`` line, or whose two disagree (callgrind writes
    both; the exit dump's summary is wrong after zeroing, so other dumps are not held to it)."""
    pattern = re.compile(re.escape(OUT_PREFIX) + r"\.(\d+)\.(\d+)")
    found: list[tuple[int, int, Path]] = []
    for path in Path(out_dir).iterdir():
        match = pattern.fullmatch(path.name)
        if match and (pid is None or int(match.group(1)) == pid):
            found.append((int(match.group(1)), int(match.group(2)), path))
    counts: dict[str, int] = {}
    for _, _, path in sorted(found):
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise ValgrindError(f"cannot read {path}: {exc.strerror}") from None
        dump = parse_dump(text, str(path))
        if dump.label is None:
            continue
        if dump.totals is None or dump.summary is None:
            missing = "totals" if dump.totals is None else "summary"
            raise CallgrindFormatError(f"{path}: step {dump.label!r} has no '{missing}:' line "
                                       f"(a file cut short?)")
        if dump.summary != dump.totals:
            raise CallgrindFormatError(f"{path}: 'summary:' {dump.summary} and 'totals:' "
                                       f"{dump.totals} disagree")
        if dump.label in counts:
            raise CallgrindFormatError(f"{path}: step {dump.label!r} is dumped twice")
        counts[dump.label] = dump.count(event)
    return counts


def _last_line(path: Path) -> str:
    try:
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines()]
    except OSError:
        return ""
    lines = [line for line in lines if line]
    return lines[-1][:200] if lines else ""


# what valgrind's log says of a run that went wrong (its other lines are banner and totals)
_VALGRIND_REASON = re.compile(r"==\d+== +((?:Process terminating|valgrind:|.*[Ee]rror|.*[Ff]atal)"
                              r".*)")


def _valgrind_reason(path: Path) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    reasons = [m.group(1).strip() for m in map(_VALGRIND_REASON.match, text.splitlines()) if m]
    return reasons[0][:200] if reasons else ""


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()


class Terminated(BaseException):
    """SIGTERM (or SIGHUP) arrived while a child ran under valgrind: the child's process group was
    killed, and the signal's default action follows."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"signal {signum}")
        self.signum = signum


@contextmanager
def _terminate_raises() -> Iterator[None]:
    """While the child runs: SIGTERM and SIGHUP raise :class:`Terminated` in the main thread, so
    that the child (in a session of its own, which the signal does not reach) is killed before
    this process ends (:func:`run_counted` then sends the signal again, its default action
    restored). Signals that have a handler already, or that are ignored, are left as they are."""
    old: dict[int, Any] = {}

    def handler(signum: int, frame: Any) -> None:
        raise Terminated(signum)

    if threading.current_thread() is threading.main_thread():
        for name in ("SIGTERM", "SIGHUP"):
            sig = getattr(signal, name, None)
            if sig is not None and signal.getsignal(sig) is signal.SIG_DFL:
                old[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, previous in old.items():
            signal.signal(sig, previous)


def run_counted(argv: Sequence[str], out_dir: str | os.PathLike[str], *, timeout_s: float,
                env: Mapping[str, str] | None = None,
                cwd: str | os.PathLike[str] | None = None) -> dict[str, int]:
    """Run ``argv`` (``[sys.executable, ...]``) under callgrind with :func:`command` and
    :func:`child_env` (``env`` as the base) and return :func:`read_step_counts` of its dumps.

    The child's output goes to ``child.out``/``child.err`` in ``out_dir``. Raises
    :class:`ValgrindError` with one line when counting cannot run here (:func:`problem`), the child
    runs past ``timeout_s`` (it and its process group are killed), dies of a signal, exits
    non-zero or dumps no step."""
    reason = problem()
    if reason is not None:
        raise ValgrindError(reason)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if any(out.glob(f"{OUT_PREFIX}.*")):
        # a reused pid would mix an earlier run's steps into this one's
        raise ValgrindError(f"{out} already holds callgrind dumps: give each run a fresh directory")
    cmd = command(argv, out)
    name = " ".join(Path(arg).name for arg in argv[:3])  # "python3.11 -m pytest"
    with open(out / "child.out", "wb") as stdout, open(out / "child.err", "wb") as stderr:
        try:
            process = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=stdout,
                                       stderr=stderr, env=child_env(env), cwd=cwd,
                                       start_new_session=True)
        except OSError as exc:
            raise ValgrindError(f"cannot start valgrind: {exc.strerror}") from None
        try:
            with _terminate_raises():
                status = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            raise ValgrindError(f"{name} under valgrind ran past {timeout_s:g} s and was "
                                f"killed") from None
        except BaseException as exc:
            _kill_group(process)
            if isinstance(exc, Terminated):  # the child is gone: end as the signal would have
                os.kill(os.getpid(), exc.signum)
            raise
    log = out / f"valgrind.{process.pid}.log"
    said = _last_line(out / "child.err") or _valgrind_reason(log)
    tail = f": {said}" if said else ""
    if status < 0:
        try:
            signame = signal.Signals(-status).name
        except ValueError:
            signame = f"signal {-status}"
        raise ValgrindError(f"{name} under valgrind died of {signame}{tail}")
    if status != 0:
        raise ValgrindError(f"{name} under valgrind exited with status {status}{tail}")
    counts = read_step_counts(out, process.pid)
    if not counts:
        raise ValgrindError(f"{name} under valgrind dumped no step (did it run a counting "
                            f"pass with Callgrind?){tail}")
    return counts
