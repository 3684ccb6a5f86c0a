"""The parent's side of a counting pass: the test run again in a child process under valgrind's
callgrind. Wall-clock time on a shared CI machine is noisy; the number of instructions a step
executes is not. The child runs with instrumentation and collection off
(``--instr-atstart=no --collect-atstart=no``), so that the interpreter's start-up, the imports and
the test's setup run at valgrind's lowest slowdown and count nothing; it counts its steps with
:class:`pytest_opperf.workcounts.callgrind.Callgrind`.

:func:`problem` says why counting cannot run here (one line), :func:`command` and
:func:`child_env` give the valgrind command line and environment for a Python argv,
:func:`run_counted` does all of it with a timeout, reads the step counts
(:func:`pytest_opperf.workcounts.callgrind_dumps.read_step_counts`) and turns a crashing or hanging
child into one clear :class:`~pytest_opperf.workcounts.valgrind.ValgrindError`, and
:func:`counted_on` names the CPU model and valgrind release that counts from two machines must share
to compare.

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
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .callgrind_dumps import OUT_PREFIX, read_step_counts
from .valgrind import (
    ValgrindError,
    client_request_problem,
    platform_problem,
)

__all__ = ["Terminated", "child_env", "command", "counted_on", "problem", "run_counted"]


def problem() -> str | None:
    """Why a counting pass under valgrind cannot run on this machine (one line), or ``None``."""
    reason = platform_problem()
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
