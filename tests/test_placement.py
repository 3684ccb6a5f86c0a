"""Per-op arrays placed by a seed (pytest_opperf.core.placement): copies, at drawn offsets."""

from __future__ import annotations

import numpy as np

from pytest_opperf.core.placement import LINE, PAGE, placed


def _offsets(value: dict) -> list[int]:
    return [value[k].ctypes.data % PAGE for k in sorted(value)]


def test_copies_keep_values_order_and_type_at_a_line_in_the_page_the_seed_draws():
    c = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    f = np.asfortranarray(np.arange(6, dtype=np.float64).reshape(2, 3))
    frozen = np.ones(5, dtype=np.int64)
    frozen.flags.writeable = False
    args = ({"X": c, "Y": [f, frozen]}, {"axis": 1}, "ctx")
    got = placed(args, 7)
    x, (y, z) = got[0]["X"], got[0]["Y"]
    assert got[1:] == ({"axis": 1}, "ctx")
    for new, old in ((x, c), (y, f), (z, frozen)):
        assert new is not old and not np.shares_memory(new, old)
        assert new.dtype == old.dtype and new.shape == old.shape and np.array_equal(new, old)
        assert new.ctypes.data % LINE == 0
        assert new.flags.writeable == old.flags.writeable
    assert x.flags.c_contiguous and y.flags.f_contiguous and not y.flags.c_contiguous
    # the same seed draws the same offsets; the draws differ between seeds
    again = placed(args, 7)
    assert [a.ctypes.data % PAGE for a in (again[0]["X"], *again[0]["Y"])] == [
        a.ctypes.data % PAGE for a in (x, y, z)]
    many = {s: placed({"a": c, "b": f}, s) for s in range(40)}
    assert len({tuple(_offsets(v)) for v in many.values()}) > 30


def test_an_array_passed_twice_stays_one_array_and_other_values_are_kept():
    a = np.zeros(16, dtype=np.float32)
    strided = np.zeros((4, 4), dtype=np.float32)[:, ::2]
    empty = np.zeros(0, dtype=np.float32)

    class Sub(np.ndarray):
        pass

    sub = np.zeros(4).view(Sub)
    got = placed([a, a, strided, empty, sub, 3.0, None], 1)
    assert got[0] is got[1] and got[0] is not a
    assert got[2] is strided and got[3] is empty and got[4] is sub
    assert got[5:] == [3.0, None]
