"""Runs a big numpy pass as a few parts on a small persistent thread pool (CPU only).

numpy's ufuncs, copies and reductions release the GIL, but each runs on one
core. A kernel that splits such a pass into disjoint parts along some axis and
hands them to :func:`run_parts` gets them run at once: the calling thread
takes the first part, pool threads the rest. Every part computes exactly what
the serial pass computes for its elements, so element-wise results are
bitwise identical; a kernel that reduces keeps per-part partial results in a
fixed order and combines them itself. :func:`matmul` splits a GEMM into
blocks of its output the same way. Its result is *not* promised bitwise: BLAS
picks micro-kernels, K blocking and small-matrix paths by the size of the
matrices it is given, so a block may sum its products in another order than
the same rows of the whole GEMM (OpenBLAS 0.3.31 on some AMD EPYC machines
differs by an ulp, even single-threaded). What holds on every BLAS is the
error bound of a rounded sum: each output differs from the whole GEMM's by at
most ``2 * gamma_k * (|a| @ |b|)``, ``gamma_k = k u / (1 - k u)``, which the
tests check; a block read at a wrong offset or never written breaks it.

While splitting is on, numpy's BLAS is held to one thread (through
threadpoolctl, from the first kernel call that could split). OpenBLAS's own
workers busy-wait for ~0.1 s after every call, and on a 2-core machine they
took the core a pool thread needed: split copies next to GEMMs gained nothing
until BLAS stopped spinning, and then conv2d + conv2d_grad over the ResNet-50
shapes went from 1.26-1.32 s to 1.09-1.10 s per training step's worth.

The thread count is ``OPPERF_NUM_THREADS`` when set, else the CPUs this
process may run on; 1 turns splitting off and leaves BLAS alone. Passes that
touch fewer than :data:`MIN_BYTES` bytes, work on cupy arrays, or start
inside a pool thread run serially, in one part, on the calling thread: a
hand-off costs ~90 us here, and a nested split could wait on a pool thread
that is itself waiting.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np

__all__ = ["MIN_BYTES", "MIN_GEMM_FLOPS", "assign", "elementwise", "matmul", "num_threads",
           "part_slices", "parts_for", "run_parts", "set_num_threads"]

T = TypeVar("T")

ENV = "OPPERF_NUM_THREADS"

# Handing a part to a sleeping pool thread and collecting it costs ~90 us on
# the 2-core test machine. Split over 2 threads, relu touching 6.4 MB went
# from 0.29 to 0.37 ms and relu_grad touching 4.8 MB from 0.25 to 0.33 ms,
# while relu_grad touching 9.6 MB went from 0.48 to 0.42 ms and 12.8 MB passes
# gained 20-40 %.
MIN_BYTES = 8 << 20


def _threads_from_env() -> int:
    value = os.environ.get(ENV)
    if value is None or value.strip() == "":
        if hasattr(os, "sched_getaffinity"):
            return len(os.sched_getaffinity(0)) or 1
        return os.cpu_count() or 1
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"{ENV} expects an int >= 1 (1 = no threads), given {value!r}")
    return n


class _Pool:
    """The worker threads, created on first use, and numpy's BLAS held to one
    thread meanwhile; replaced when the count changes."""

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self.executor: ThreadPoolExecutor | None = None
        self.blas_limit: Any = None  # threadpoolctl's limiter, once BLAS is held to one thread
        self.blas_held: bool | None = None  # None: not tried yet
        self.lock = threading.Lock()

    def get(self) -> ThreadPoolExecutor:
        with self.lock:
            if self.executor is None:
                self.executor = ThreadPoolExecutor(self.threads - 1,
                                                   thread_name_prefix="opperf-part",
                                                   initializer=_mark_worker)
            return self.executor

    def hold_blas(self) -> bool:
        """Hold numpy's BLAS to one thread (once); whether it is held."""
        if self.blas_held is None:
            with self.lock:
                if self.blas_held is None:
                    self.blas_limit = _limit_blas()
                    self.blas_held = self.blas_limit is not None
        return self.blas_held

    def close(self) -> None:
        if self.executor is not None:
            self.executor.shutdown(wait=True)
        if self.blas_limit is not None:
            self.blas_limit.restore_original_limits()


def _limit_blas() -> Any:
    """threadpoolctl's limiter holding the BLAS libraries to one thread (None without it)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # then GEMMs stay with BLAS's own threads and are not split
        return None
    limiter = threadpool_limits(limits=1, user_api="blas")
    if limiter.get_original_num_threads().get("blas") is None:
        return None  # no BLAS library threadpoolctl knows: leave the GEMMs to BLAS
    return limiter


_pool = _Pool(_threads_from_env())
_local = threading.local()


def _mark_worker() -> None:
    _local.worker = True


def num_threads() -> int:
    """How many threads a big pass is split over (1: not split)."""
    return _pool.threads


def set_num_threads(threads: int | None = None) -> int:
    """Split over ``threads`` threads from now on (None: the environment's
    choice again); returns the previous count."""
    global _pool
    if threads is None:
        threads = _threads_from_env()
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"set_num_threads expects an int >= 1 (1 = no threads), given {threads!r}")
    old, _pool = _pool, _Pool(threads)
    old.close()
    return old.threads


def part_slices(length: int, parts: int, align: int = 1) -> list[slice]:
    """At most ``parts`` contiguous slices covering ``range(length)``, every
    boundary a multiple of ``align``, sizes (in ``align`` units) differing by at most one."""
    units = -(-length // align)
    parts = max(1, min(parts, units))
    base, extra = divmod(units, parts)
    out, start = [], 0
    for i in range(parts):
        stop = min(length, start + (base + (i < extra)) * align)
        out.append(slice(start, stop))
        start = stop
    return out


def parts_for(length: int, nbytes: int, *arrays: Any) -> int:
    """How many parts a pass over ``length`` rows touching ``nbytes`` bytes gets."""
    if _pool.threads == 1 or not all(isinstance(a, np.ndarray) for a in arrays):
        return 1
    _pool.hold_blas()
    if nbytes < MIN_BYTES or length < 2 or getattr(_local, "worker", False):
        return 1
    return min(_pool.threads, length)


def run_parts(body: Callable[[slice], T], length: int, nbytes: int, *arrays: Any,
              align: int = 1) -> list[T]:
    """``[body(s) for s in part_slices(length, k)]``, the parts run at once on k threads.

    ``k`` is 1 (a single call ``body(slice(0, length))`` on this thread) unless
    the pass is big (``nbytes`` at least :data:`MIN_BYTES`), every one of
    ``arrays`` is a numpy array, and splitting is on. The bodies must write
    disjoint memory. Part boundaries are multiples of ``align``. Results come
    back in part order; the first exception raised by any part is re-raised
    after all parts have finished."""
    parts = part_slices(length, parts_for(length, nbytes, *arrays), align)
    if len(parts) == 1:
        return [body(parts[0])]
    executor = _pool.get()
    futures: list[Future] = [executor.submit(body, s) for s in parts[1:]]
    first: list[Any] = []
    error: BaseException | None = None
    try:
        first.append(body(parts[0]))
    except BaseException as e:  # noqa: BLE001  (re-raised once the other parts are done)
        error = e
    rest = []
    for f in futures:
        try:
            rest.append(f.result())
        except BaseException as e:  # noqa: BLE001
            error = error or e
    if error is not None:
        raise error
    return first + rest


def elementwise(body: Callable[..., Any], out: Any, *ins: Any) -> Any:
    """``body(out, *ins)`` for arrays of one shape, split into matching parts; returns ``out``.

    ``body`` works element by element (ufuncs with ``out=``), writing its first
    argument, or any argument updated in place. C-contiguous arrays are split as flat runs, others
    along axis 0."""
    arrays = (out, *ins)
    for a in ins:
        if a.shape != out.shape:
            raise ValueError("elementwise: every input must have the output's shape "
                             f"{list(out.shape)}, given {list(a.shape)}")
    if out.ndim == 0:
        body(out, *ins)
        return out
    if all(a.flags.c_contiguous for a in arrays):
        views = [a.reshape(-1) for a in arrays]
    else:
        views = list(arrays)
    length = views[0].shape[0]
    nbytes = sum(a.nbytes for a in arrays)
    run_parts(lambda s: body(*(v[s] for v in views)), length, nbytes, *arrays)
    return out


def assign(dst: Any, src: Any) -> Any:
    """``dst[...] = src`` for arrays of one shape, split along axis 0; returns ``dst``."""
    if dst.shape != src.shape:
        raise ValueError(f"assign: the source must have the destination's shape {list(dst.shape)}, "
                         f"given {list(src.shape)}")
    if dst.ndim == 0:
        dst[...] = src
        return dst

    def copy(p: slice) -> None:
        dst[p] = src[p]

    run_parts(copy, dst.shape[0], dst.nbytes + src.nbytes, dst, src)
    return dst


# A GEMM this big takes ~0.2 ms on one core, twice a hand-off.
MIN_GEMM_FLOPS = 16e6
# GEMM blocks start at multiples of this many rows or columns, so that each
# block is tiled much as the whole GEMM tiles it (BLAS micro-kernels are 4-32
# wide); this keeps blocks on the fast kernels, it does not make them bitwise.
GEMM_ALIGN = 16


def matmul(a: Any, b: Any, out: Any, xp: Any = np) -> Any:
    """``xp.matmul(a, b, out=out)`` for 2-D arrays; on numpy with BLAS held to one
    thread, split into blocks of ``out``'s columns (when ``b`` is the bigger
    operand, so each part reads a share of it) or rows, whichever gives every
    thread a block. Returns ``out``, equal to the unsplit GEMM within the
    rounding bound of its sums (see the module docstring), not bitwise."""
    m, n = out.shape
    if (xp is not np or 2.0 * m * n * a.shape[1] < MIN_GEMM_FLOPS
            or parts_for(2, MIN_BYTES, a, b, out) == 1 or not _pool.blas_held):
        return xp.matmul(a, b, out=out)
    by_columns = b.size >= a.size
    if (n if by_columns else m) < _pool.threads * GEMM_ALIGN:
        by_columns = n > m  # the preferred side is too narrow to give every thread a block
    if by_columns:
        run_parts(lambda p: np.matmul(a, b[:, p], out=out[:, p]), n, MIN_BYTES, a, b, out,
                  align=GEMM_ALIGN)
    else:
        run_parts(lambda p: np.matmul(a[p], b, out=out[p]), m, MIN_BYTES, a, b, out,
                  align=GEMM_ALIGN)
    return out
