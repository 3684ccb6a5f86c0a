"""Memory both A/B sides share: where a memory-bound per-op benchmark's arrays lie in its blocks.

A call whose arrays fill a good part of the L2 cache takes 10-25 % more or less time depending on
which memory its arrays get, drawn once per allocation, so once per process for a benchmark that
allocates its inputs once and whose kernel reuses the heap's memory for its output
(docs/ab-statistics.md, "Where the bias of a memory-bound call comes from"). Two side processes
draw independently: a bias between them that no number of pairs removes. Here both draw the same.

The controller makes one file of :data:`ARENA_BYTES` (:func:`shared_fd`: a ``memfd``, or an
unlinked temporary file where there is none) and hands its descriptor to every side it starts
(:data:`ARENA_FD_ENV`); each side maps it (:meth:`SharedArena.from_env`). For each pair of blocks
the controller draws a seed, the same for both blocks. In a block of a benchmark whose numpy
inputs are between :data:`MIN_INPUT_BYTES` and :data:`MAX_INPUT_BYTES` (:func:`eligible`), the
side copies the inputs into the file from an offset the seed gives (:meth:`SharedArena.place`),
and numpy's data allocations of at least :data:`MIN_ALLOCATION` bytes made in the calling thread
meanwhile - the kernel's output and temporaries - come from the file too (a numpy memory handler,
from the numpy-allocator package). Both sides then run the block on the same physical memory, at
the same places; the next pair on other memory.

The sides take turns, so they never use the file at once, and between blocks it holds nothing
alive: at the end of a block the call's result is copied out of it (:meth:`SharedArena.private`)
and the input copies are dropped. Memory that is still allocated then (a kernel kept an array it
made in the block) would be written over by the other side: the side stops using the file for
the rest of its life and the benchmark fails, saying so (:meth:`SharedArena.kept`).

:class:`FirstFit` is the allocator over offsets, without memory (tested on its own).
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import random
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["ARENA_BYTES", "ARENA_FD_ENV", "FirstFit", "MAX_INPUT_BYTES", "MIN_ALLOCATION",
           "MIN_INPUT_BYTES", "SharedArena", "eligible", "input_bytes", "shared_fd"]

# The variable that names the descriptor of the shared file in a side.
ARENA_FD_ENV = "OPPERF_AB_ARENA_FD"
ARENA_BYTES = 128 << 20
# A block's first allocation starts at a page drawn below this (the rest of the file is room for
# the block's arrays: inputs of at most MAX_INPUT_BYTES, their outputs and temporaries).
PLACE_SPAN = 64 << 20
PAGE = 4096
ALIGN = 64  # every allocation starts on a cache line
# Numpy inputs of at least this many bytes in all: the block's arrays are placed in the file.
# Smaller calls keep the process's memory: their time does not follow it (128 KiB arrays: the
# same time on any memory, docs/ab-statistics.md), and the handler's calls cost them a share.
MIN_INPUT_BYTES = 64 << 10
MAX_INPUT_BYTES = 16 << 20
# Smaller data allocations in a placed block go to the C library's malloc, as numpy's own do.
MIN_ALLOCATION = 4096


def shared_fd(size: int = ARENA_BYTES) -> int:
    """A descriptor of ``size`` bytes of memory that processes started with it can map and share:
    a ``memfd`` (Linux), else an unlinked temporary file. Nothing is left behind when the last
    process holding it ends."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("opperf-ab-arena")
    else:  # pragma: no cover - platforms without memfd
        with tempfile.TemporaryFile(prefix="opperf-ab-arena-") as f:
            fd = os.dup(f.fileno())
    try:
        os.ftruncate(fd, size)
    except OSError:
        os.close(fd)
        raise
    return fd


def _movable(array: Any) -> bool:
    """An array a copy can stand for: contiguous (C or Fortran order), of plain data, not empty."""
    return (array.size > 0 and not array.dtype.hasobject
            and (array.flags.c_contiguous or array.flags.f_contiguous))


def input_bytes(tree: Any) -> int:
    """The bytes of the distinct movable numpy arrays in ``tree`` (an array given twice: once)."""
    seen: dict[int, int] = {}

    def note(array: Any) -> Any:
        if _movable(array):
            seen[id(array)] = array.nbytes
        return array

    _replace(tree, note)
    return sum(seen.values())


def eligible(tree: Any) -> bool:
    """Whether a benchmark's arguments ``tree`` make a call placed in the shared file: numpy
    inputs of :data:`MIN_INPUT_BYTES` to :data:`MAX_INPUT_BYTES`."""
    return MIN_INPUT_BYTES <= input_bytes(tree) <= MAX_INPUT_BYTES


def _replace(tree: Any, swap: Any) -> Any:
    """``tree`` with each numpy array ``a`` in it replaced by ``swap(a)`` (containers rebuilt,
    their own types kept for dicts, lists and tuples)."""
    import numpy as np

    if isinstance(tree, np.ndarray):
        return swap(tree)
    if isinstance(tree, dict):
        return type(tree)((k, _replace(v, swap)) for k, v in tree.items())
    if isinstance(tree, list):
        return [_replace(v, swap) for v in tree]
    if isinstance(tree, tuple):
        items = [_replace(v, swap) for v in tree]
        return type(tree)(*items) if hasattr(tree, "_fields") else tuple(items)
    return tree


class FirstFit:
    """Offsets in ``size`` bytes for allocations: the first gap that fits from a cursor on, else
    from the start; every allocation on ``align`` bytes. Thread-safe."""

    def __init__(self, size: int, align: int = ALIGN) -> None:
        self.size = size
        self.align = align
        self.cursor = 0
        self.live: dict[int, int] = {}  # offset -> bytes
        self._lock = threading.Lock()

    def _up(self, n: int) -> int:
        return -(-n // self.align) * self.align

    def _fit(self, n: int, start: int) -> int | None:
        at = start
        for offset, size in sorted(self.live.items()):
            if offset + size <= at:
                continue
            if offset >= at + n:
                break
            at = self._up(offset + size)
        return at if at + n <= self.size else None

    def allocate(self, nbytes: int) -> int | None:
        """The offset of ``nbytes`` (at least one byte), or None where no gap fits."""
        n = self._up(max(1, nbytes))
        with self._lock:
            at = self._fit(n, self.cursor)
            if at is None and self.cursor:
                at = self._fit(n, 0)
            if at is not None:
                self.live[at] = n
            return at

    def free(self, offset: int) -> None:
        with self._lock:
            if self.live.pop(offset, None) is None:
                raise ValueError(f"offset {offset} is not allocated here")


class SharedArena:
    """The shared file as one side maps it, and the numpy memory handler that allocates in it
    (:meth:`place`)."""

    def __init__(self, fd: int, size: int = ARENA_BYTES) -> None:
        import numpy_allocator

        self.size = size
        self.region = mmap.mmap(fd, size, flags=mmap.MAP_SHARED)
        self.base = ctypes.addressof(ctypes.c_char.from_buffer(self.region))
        self.fit = FirstFit(size)
        self.broken: str | None = None  # why this process no longer places arrays here
        self._placing = False
        self._thread = 0  # the thread of the placed block (threading.get_ident)
        libc = ctypes.CDLL(None)
        for name, res, args in (("malloc", ctypes.c_void_p, [ctypes.c_size_t]),
                                ("calloc", ctypes.c_void_p, [ctypes.c_size_t, ctypes.c_size_t]),
                                ("realloc", ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_size_t]),
                                ("free", None, [ctypes.c_void_p])):
            getattr(libc, name).restype, getattr(libc, name).argtypes = res, args
        self._libc = libc
        # the callbacks live as long as the process: arrays made in the file free through them
        self._callbacks = (
            ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t)(self._malloc),
            ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t)(self._calloc),
            ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)(self._realloc),
            ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_size_t)(self._free),
        )
        malloc, calloc, realloc, free = self._callbacks
        self.handler = numpy_allocator.type("opperf_shared_arena", (), {
            "_malloc_": ctypes.addressof(malloc), "_calloc_": ctypes.addressof(calloc),
            "_realloc_": ctypes.addressof(realloc), "_free_": ctypes.addressof(free)})
        self._default = numpy_allocator.type("opperf_default", (), {
            "_handler_": numpy_allocator.default_handler})
        # never collected: arrays made here free through the callbacks, into the mapping
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(self))

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> SharedArena | None:
        """The side's arena from the descriptor :data:`ARENA_FD_ENV` names; None without one.
        Raises ``OSError``/``ImportError``/``ValueError`` where it is named but cannot be used."""
        value = (os.environ if environ is None else environ).get(ARENA_FD_ENV)
        if not value:
            return None
        return cls(int(value))

    # --- the handler's calls ---------------------------------------------------------------

    def _inside(self, ptr: int | None) -> bool:
        return ptr is not None and self.base <= ptr < self.base + self.size

    def _take(self, nbytes: int) -> int | None:
        if not self._placing or nbytes < MIN_ALLOCATION or threading.get_ident() != self._thread:
            return None
        offset = self.fit.allocate(nbytes)  # None: no gap fits, the C library's memory
        return None if offset is None else self.base + offset

    def _malloc(self, nbytes: int) -> int | None:
        return self._take(nbytes) or self._libc.malloc(nbytes)

    def _calloc(self, count: int, nbytes: int) -> int | None:
        ptr = self._take(count * nbytes)
        if ptr is None:
            return self._libc.calloc(count, nbytes)
        ctypes.memset(ptr, 0, count * nbytes)
        return ptr

    def _realloc(self, ptr: int | None, nbytes: int) -> int | None:
        if not self._inside(ptr):
            return self._libc.realloc(ptr, nbytes)
        assert ptr is not None
        old = self.fit.live[ptr - self.base]
        new = self._malloc(nbytes)
        if new:
            ctypes.memmove(new, ptr, min(old, nbytes))
            self.fit.free(ptr - self.base)
        return new

    def _free(self, ptr: int | None, nbytes: int) -> None:
        if self._inside(ptr):
            assert ptr is not None
            self.fit.free(ptr - self.base)
        elif ptr:
            self._libc.free(ptr)

    # --- a placed block ----------------------------------------------------------------------

    @contextlib.contextmanager
    def place(self, tree: Any, seed: int) -> Iterator[Any]:
        """Within: copies of the arrays of ``tree`` in the file, from a page ``seed`` draws, and
        numpy's allocations in this thread in the file after them. Yields ``tree`` with the
        copies in place of its arrays (an array given twice: one copy)."""
        import numpy as np

        pages = PLACE_SPAN // PAGE
        self.fit.cursor = random.Random(seed).randrange(pages) * PAGE
        self._thread = threading.get_ident()
        copies: dict[int, Any] = {}

        def copy(array: Any) -> Any:
            if not _movable(array):
                return array
            if id(array) not in copies:
                copies[id(array)] = np.array(array, order="K", copy=True)
            return copies[id(array)]

        self._placing = True
        try:
            with self.handler:
                yield _replace(tree, copy)
        finally:
            self._placing = False

    def private(self, tree: Any) -> Any:
        """``tree`` with every array whose memory lies in the file (a view too) copied out of
        it, into this process's own memory (numpy's own handler, also within :meth:`place`)."""
        import numpy as np

        def out(array: Any) -> Any:
            start = array.__array_interface__["data"][0]
            return np.array(array, copy=True) if self._inside(start) else array

        with self._default:
            return _replace(tree, out)

    def kept(self) -> int:
        """How many allocations are still alive in the file (none between blocks); any makes
        this process stop placing arrays (:attr:`broken`)."""
        count = len(self.fit.live)
        if count and self.broken is None:
            self.broken = (f"{count} array(s) made in a placed block outlived it (kept by the "
                           "benchmark's call, or returned in an object other than dicts, lists "
                           "and tuples); the other side would write over them")
        return count
