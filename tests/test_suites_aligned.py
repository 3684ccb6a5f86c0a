"""The per-op suite's inputs start at a cache line whatever the step's allocations did, in their
own order and with their values."""

from __future__ import annotations

import numpy as np
import pytest

from suites.test_ops import ALIGN, aligned


def off_line(shape: tuple[int, ...], dtype: str, order: str, offset: int) -> np.ndarray:
    """An array of ``shape`` that starts ``offset`` bytes past a cache line."""
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    raw = np.empty(n + 2 * ALIGN, dtype=np.uint8)
    start = -raw.ctypes.data % ALIGN + offset
    out = np.ndarray(shape, dtype, raw, start, order=order)
    out[...] = np.arange(out.size).reshape(shape, order=order)
    return out


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("offset", [16, 32, 48, 8])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
def test_an_array_off_a_cache_line_is_copied_onto_one(order, offset, dtype):
    x = off_line((4, 3, 5), dtype, order, offset)
    assert x.ctypes.data % ALIGN == offset
    y = aligned(x)
    assert y.ctypes.data % ALIGN == 0
    assert y.dtype == x.dtype and y.shape == x.shape and y.strides == x.strides  # same order
    assert np.array_equal(x, y)


def test_an_aligned_array_is_the_same_object():
    x = off_line((8, 8), "float32", "C", 0)
    assert aligned(x) is x


@pytest.mark.parametrize("value", [np.arange(20, dtype=np.float32)[1::2], np.zeros(0), 3.0,
                                   [np.ones(3)], None])
def test_what_it_cannot_copy_in_its_order_is_kept(value):
    assert aligned(value) is value
