"""Where a per-op benchmark's host arrays lie in memory, drawn again for each pair of blocks.

A memory-bound call's time depends on where its arrays lie relative to one another within a
4 KiB page: an ``elementwise_add`` of two 512 KiB arrays took 15 or 26 us here with the same
values, as its inputs' and output's offsets in their pages fell (their loads and stores alias
when those offsets are close). Where the heap puts them is one draw per process, so one process
pair of an A/B session can run such a call 10-50 % slower on one side with no change of code:
a bias that only more process pairs average out (docs/ab-statistics.md, "Where the arrays lie").

:func:`placed` copies every contiguous numpy array among a call's arguments to a fresh buffer at
a cache-line offset within a page drawn from a seed. The A/B controller draws one seed per pair
and sends it to both sides, so the two blocks of a pair call with inputs placed alike, and each
pair is a new draw: the placement's effect becomes noise within the session's pairs, which their
interval covers, instead of a bias of the process. Pure: numpy only, no pytest.
"""

from __future__ import annotations

import random
from typing import Any, Literal

__all__ = ["LINE", "PAGE", "placed"]

PAGE = 4096  # the span within which loads and stores alias
LINE = 64  # arrays start on a cache line: offsets are whole lines


def placed(value: Any, seed: int) -> Any:
    """``value`` with each C- or Fortran-contiguous ``numpy.ndarray`` in it (walking tuples,
    lists and dicts) replaced by a copy in the same order whose data start ``LINE * k`` bytes
    into a page, ``k`` drawn from ``seed`` per array. The same object is copied once (an argument
    passed twice stays one array); other values, and arrays that are empty, not contiguous or not
    plain ``ndarray`` (a subclass, a device array), are kept as they are."""
    import numpy as np

    rng = random.Random(seed)
    copies: dict[int, Any] = {}

    def place(v: Any) -> Any:
        if isinstance(v, tuple):
            return tuple(place(x) for x in v)
        if isinstance(v, list):
            return [place(x) for x in v]
        if isinstance(v, dict):
            return {k: place(x) for k, x in v.items()}
        if type(v) is not np.ndarray or v.size == 0:
            return v
        if id(v) in copies:
            return copies[id(v)]
        order: Literal["C", "F"]
        if v.flags.c_contiguous:
            order = "C"
        elif v.flags.f_contiguous:
            order = "F"
        else:
            return v
        raw = np.empty(v.nbytes + 2 * PAGE, dtype=np.uint8)
        start = -raw.ctypes.data % PAGE + LINE * rng.randrange(PAGE // LINE)
        copy = np.ndarray(v.shape, v.dtype, raw, start, order=order)
        copy[...] = v
        copy.flags.writeable = v.flags.writeable
        copies[id(v)] = copy
        return copy

    return place(value)
