"""The thread-splitting helper, and every kernel that uses it.

Element-wise passes, copies and the batch_norm reductions split bitwise equal
to the serial ones. A GEMM split into blocks (and conv2d / conv2d_grad, built
on GEMMs) is held to the floating-point error bound of the sums it computes
instead: BLAS picks its micro-kernels and blocking by matrix size, so a block
may round differently from the same rows of the whole GEMM (OpenBLAS on some
AMD EPYC machines differs by an ulp). The bound is far below what a wrong
block offset or a missing block changes, which ``test_rounding_bound_rejects_
a_shifted_or_missing_block`` checks."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import reference_framework as rf
from reference_framework.ops import _parallel


@pytest.fixture
def split_all(monkeypatch):
    """Every pass big enough to split; the thread count restored afterwards."""
    monkeypatch.setattr(_parallel, "MIN_BYTES", 0)
    before = _parallel.num_threads()
    yield
    _parallel.set_num_threads(before)


@pytest.mark.parametrize("length, parts", [(10, 3), (2, 5), (7, 7), (0, 2), (1, 1), (100, 2)])
def test_part_slices_cover_the_range_in_order_with_near_equal_sizes(length, parts):
    slices = _parallel.part_slices(length, parts)
    covered = [i for s in slices for i in range(length)[s]]
    assert covered == list(range(length))
    sizes = [s.stop - s.start for s in slices]
    assert len(slices) == max(1, min(parts, length))
    assert max(sizes) - min(sizes) <= 1


def test_run_parts_runs_parts_on_several_threads_and_keeps_their_order(split_all):
    _parallel.set_num_threads(3)
    seen = []

    def body(s: slice) -> tuple[int, int]:
        seen.append(threading.current_thread().name)
        return s.start, s.stop

    assert _parallel.run_parts(body, 10, 1, np.zeros(1)) == [(0, 4), (4, 7), (7, 10)]
    assert len(seen) == 3
    assert seen.count(threading.current_thread().name) == 1  # the caller takes one part
    assert sum(name.startswith("opperf-part") for name in seen) == 2


def test_run_parts_stays_serial_when_off_small_not_numpy_or_nested(monkeypatch, split_all):
    whole = [slice(0, 6)]

    def spans(**kw) -> list[slice]:
        return _parallel.run_parts(
            lambda s: s, 6, kw.get("nbytes", 1), *kw.get("arrays", [np.zeros(1)])
        )

    _parallel.set_num_threads(1)
    assert spans() == whole
    _parallel.set_num_threads(2)
    assert len(spans()) == 2
    assert spans(arrays=[np.zeros(1), [0.0]]) == whole  # a non-numpy (e.g. cupy) array
    monkeypatch.setattr(_parallel, "MIN_BYTES", 100)
    assert spans(nbytes=99) == whole
    assert len(spans(nbytes=100)) == 2
    monkeypatch.setattr(_parallel, "MIN_BYTES", 0)
    inner = _parallel.run_parts(lambda s: spans(), 2, 1, np.zeros(1))
    assert inner[1] == whole  # a pool thread does not split again


def test_run_parts_reraises_a_part_error_after_all_parts_finish(split_all):
    _parallel.set_num_threads(2)
    done = []

    def body(s: slice) -> None:
        if s.start == 0:
            raise KeyError("first part")
        threading.Event().wait(0.05)
        done.append(s)

    with pytest.raises(KeyError, match="first part"):
        _parallel.run_parts(body, 2, 1, np.zeros(1))
    assert done == [slice(1, 2)]


def test_thread_count_follows_the_environment(monkeypatch):
    before = _parallel.num_threads()
    try:
        monkeypatch.setenv("OPPERF_NUM_THREADS", "3")
        _parallel.set_num_threads(None)
        assert _parallel.num_threads() == 3
        monkeypatch.delenv("OPPERF_NUM_THREADS")
        _parallel.set_num_threads(None)
        usable = (
            len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        )
        assert _parallel.num_threads() == usable
        for bad in ("0", "two", "-1"):
            monkeypatch.setenv("OPPERF_NUM_THREADS", bad)
            with pytest.raises(
                ValueError, match=f"OPPERF_NUM_THREADS expects an int >= 1.*given '{bad}'"
            ):
                _parallel.set_num_threads(None)
        with pytest.raises(ValueError, match="given 0"):
            _parallel.set_num_threads(0)
    finally:
        _parallel.set_num_threads(before)


def test_elementwise_and_assign_match_numpy_on_odd_and_strided_arrays(split_all):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((7, 5, 3))
    b = rng.standard_normal((3, 5, 7)).transpose(2, 1, 0)  # not contiguous: split along axis 0
    for threads in (2, 3, 5):
        _parallel.set_num_threads(threads)
        out = np.empty_like(a)
        _parallel.elementwise(lambda o, x, y: np.multiply(x, y, out=o), out, a, b)
        np.testing.assert_array_equal(out, a * b)
        flat = np.empty(a.shape)
        _parallel.elementwise(lambda o, x: np.negative(x, out=o), flat, a)
        np.testing.assert_array_equal(flat, -a)
        dst = np.empty((5, 7, 3))
        _parallel.assign(dst, a.transpose(1, 0, 2))
        np.testing.assert_array_equal(dst, a.transpose(1, 0, 2))
    scalar = np.array(2.0)
    _parallel.elementwise(lambda o, x: np.add(x, 1, out=o), scalar, np.array(4.0))
    assert scalar == 5.0
    with pytest.raises(ValueError, match=r"output's shape \[7, 5, 3\], given \[5\]"):
        _parallel.elementwise(np.add, out, np.zeros(5))


def _blas_threads() -> list[int]:
    threadpoolctl = pytest.importorskip("threadpoolctl")
    threads = [
        lib["num_threads"] for lib in threadpoolctl.threadpool_info() if lib["user_api"] == "blas"
    ]
    if not threads:
        pytest.skip("threadpoolctl finds no BLAS library in this process")
    return threads


def test_blas_is_held_to_one_thread_while_splitting_and_released_after():
    before = _parallel.num_threads()
    try:
        _parallel.set_num_threads(1)
        original = _blas_threads()
        _parallel.run_parts(lambda s: None, 4, 1, np.zeros(1))
        assert _blas_threads() == original  # splitting off: BLAS left alone
        _parallel.set_num_threads(2)
        _parallel.run_parts(lambda s: None, 4, 1, np.zeros(1))
        assert _blas_threads() == [1] * len(original)
        _parallel.set_num_threads(1)
        assert _blas_threads() == original
    finally:
        _parallel.set_num_threads(before)


def _gamma(terms: int, dtype: Any) -> float:
    """Higham's gamma_n = n u / (1 - n u): the relative error bound of a sum of ``terms`` rounded
    products."""
    u = float(np.finfo(dtype).eps) / 2
    return terms * u / (1 - terms * u)


def assert_within_rounding(
    got: np.ndarray, want: np.ndarray, abs_sum: np.ndarray, terms: int, what: str = ""
) -> None:
    """``got`` and ``want`` are two roundings of the same sums of at most ``terms``
    products whose absolute values sum to ``abs_sum``: each lies within
    gamma_terms * abs_sum of the exact sum, whatever order or blocking the BLAS
    used, so they differ by at most twice that. NaN (a block never written) fails."""
    assert got.shape == want.shape and got.dtype == want.dtype, what
    bound = 2 * _gamma(terms, want.dtype) * abs_sum.astype(np.float64)
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    bad = ~(diff <= bound)
    assert not bad.any(), (
        f"{what}: {int(bad.sum())} of {got.size} values differ by more than the rounding bound, "
        f"e.g. {got[bad][0]!r} against {want[bad][0]!r}"
    )


def _gemm_operands(m: int, k: int, n: int, a_t: bool, b_t: bool) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((k, m) if a_t else (m, k), dtype=np.float32)
    b = rng.standard_normal((n, k) if b_t else (k, n), dtype=np.float32)
    return (a.T if a_t else a), (b.T if b_t else b)


def test_rounding_bound_rejects_a_shifted_or_missing_block():
    a, b = _gemm_operands(64, 576, 784, False, False)
    whole = np.matmul(a, b)
    abs_sum = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    assert_within_rounding(whole.copy(), whole, abs_sum, 576)
    one_ulp = np.nextafter(whole, np.inf)  # what a different BLAS kernel may give
    assert_within_rounding(one_ulp, whole, abs_sum, 576)
    shifted = whole.copy()
    shifted[:, 400:] = np.matmul(a, b[:, 399:783])  # the second block read one column off
    missing = whole.copy()
    missing[:, 400:] = np.nan  # the second block never computed
    for broken in (shifted, missing):
        with pytest.raises(AssertionError, match="differ by more than the rounding bound"):
            assert_within_rounding(broken, whole, abs_sum, 576)


@pytest.mark.parametrize("m, k, n, a_t, b_t", [
    (64, 576, 784, False, False),  # column blocks (b is the bigger operand)
    (512, 300, 100, False, True),  # row blocks
    (200, 147, 1000, True, False),  # operands read transposed, as conv2d_grad passes them
    (37, 1152, 393, True, True),
])
def test_matmul_split_into_blocks_is_the_whole_gemm_within_rounding(split_all, m, k, n, a_t, b_t):
    a, b = _gemm_operands(m, k, n, a_t, b_t)
    abs_sum = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    assert 2.0 * m * n * k >= _parallel.MIN_GEMM_FLOPS
    _parallel.set_num_threads(1)
    whole = np.matmul(a, b)
    for threads in (2, 3):
        _parallel.set_num_threads(threads)
        out = np.full((m, n), np.nan, dtype=np.float32)
        _parallel.matmul(a, b, out)
        if _parallel._pool.blas_held:
            assert _parallel._pool.executor is not None, "the GEMM was not split"
        assert_within_rounding(out, whole, abs_sum, k, f"{threads} threads")


def test_part_slices_align_block_boundaries():
    assert _parallel.part_slices(200, 2, align=64) == [slice(0, 128), slice(128, 200)]
    assert _parallel.part_slices(100, 3, align=64) == [slice(0, 64), slice(64, 100)]
    assert _parallel.part_slices(50, 2, align=64) == [slice(0, 50)]


def _serial_and_split(op: str, make_inputs: Callable[[], dict[str, Any]], attrs: dict | None = None
                      ) -> tuple[dict, dict]:
    """The op's outputs computed with splitting off and over 3 threads (fresh inputs each time)."""
    results = []
    for threads in (1, 3):
        _parallel.set_num_threads(threads)
        outs = rf.run_op(op, make_inputs(), attrs)
        results.append({k: np.array(v) for k, v in outs.items()})
    assert _parallel._pool.executor is not None, f"{op} never split its work"
    assert results[0].keys() == results[1].keys()
    return results[0], results[1]


def _assert_same(op: str, serial: dict, split: dict) -> None:
    for slot in serial:
        assert serial[slot].dtype == split[slot].dtype, f"{op} {slot} dtype"
        np.testing.assert_array_equal(split[slot], serial[slot], err_msg=f"{op} {slot}")


def _randn(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _strided(a: np.ndarray) -> np.ndarray:
    """``a``'s values in a non-contiguous array (every other element of a bigger one)."""
    big = np.zeros((*a.shape[:-1], 2 * a.shape[-1]), dtype=a.dtype)
    big[..., ::2] = a
    return big[..., ::2]


ELEMENTWISE_CASES = [
    ("relu", lambda: {"X": _randn(5, 3, 7, 4)}, None),
    ("relu", lambda: {"X": _strided(_randn(5, 3, 7, 4))}, None),
    (
        "relu_grad",
        lambda: {
            "Out": np.maximum(_randn(5, 3, 7), 0),
            "Out@GRAD": _strided(_randn(5, 3, 7, seed=1)),
        },
        None,
    ),
    ("sum", lambda: {"X": [_randn(5, 9), _randn(5, 9, seed=1)]}, None),
    (
        "sum",
        lambda: {
            "X": [_randn(3, 5, 9), _strided(_randn(3, 5, 9, seed=1)), _randn(3, 5, 9, seed=2)]
        },
        None,
    ),
    (
        "elementwise_add",
        lambda: {"X": _randn(5, 4, 3, 3), "Y": _strided(_randn(5, 4, 3, 3, seed=1))},
        {"axis": -1},
    ),
    (
        "momentum",
        lambda: {
            "Param": _randn(7, 5),
            "Grad": _randn(7, 5, seed=1),
            "Velocity": _randn(7, 5, seed=2),
            "LearningRate": np.array([0.1], np.float32),
        },
        {"mu": 0.9},
    ),
    (
        "momentum",
        lambda: {
            "Param": _randn(3, 5, 3, 3),
            "Grad": _strided(_randn(3, 5, 3, 3, seed=1)),
            "Velocity": _randn(3, 5, 3, 3, seed=2),
            "LearningRate": np.array([0.1], np.float32),
        },
        {"mu": 0.9, "use_nesterov": True},
    ),
]


@pytest.mark.parametrize("op, make_inputs, attrs", ELEMENTWISE_CASES)
def test_elementwise_kernels_split_bitwise_equal(split_all, op, make_inputs, attrs):
    _assert_same(op, *_serial_and_split(op, make_inputs, attrs))


def _bn_inputs(shape: tuple[int, ...]) -> Callable[[], dict[str, Any]]:
    c = shape[1]
    return lambda: {
        "X": _randn(*shape) * 3 + 2,
        "Scale": _randn(c, seed=1),
        "Bias": _randn(c, seed=2),
        "Mean": _randn(c, seed=3),
        "Variance": np.abs(_randn(c, seed=4)) + 1,
    }


@pytest.mark.parametrize("shape", [(5, 3, 4, 7), (3, 4), (7, 2, 1, 3)])
def test_batch_norm_and_gradient_split_bitwise_equal(split_all, shape):
    serial, split = _serial_and_split("batch_norm", _bn_inputs(shape))
    _assert_same("batch_norm", serial, split)
    x = _bn_inputs(shape)()["X"]

    def grad_inputs():
        return {
            "X": x,
            "Scale": _randn(shape[1], seed=1),
            "SavedMean": serial["SavedMean"],
            "SavedVariance": serial["SavedVariance"],
            "Y@GRAD": _strided(_randn(*shape, seed=5)),
        }

    _assert_same("batch_norm_grad", *_serial_and_split("batch_norm_grad", grad_inputs))


CONV_ATTRS = [
    {"strides": [1, 1], "paddings": [1, 1]},
    {"strides": [1, 1], "paddings": [1, 1], "big": True},  # GEMMs big enough to split too
    {"strides": [2, 2], "paddings": [1, 2], "dilations": [2, 1]},
    {"strides": [2, 2], "paddings": [0, 0]},  # pointwise, strided
    {"strides": [1, 1], "paddings": [0, 0]},  # pointwise
    {"strides": [1, 1], "paddings": [1, 1], "groups": 2},
]


def _assert_conv_within_rounding(
    op: str, serial: dict, split: dict, abs_sums: dict, terms: int
) -> None:
    for slot in serial:
        assert_within_rounding(split[slot], serial[slot], abs_sums[slot], terms, f"{op} {slot}")


@pytest.mark.parametrize("attrs", CONV_ATTRS)
def test_conv2d_and_gradient_split_equal_within_rounding(split_all, attrs):
    """conv2d and conv2d_grad are GEMMs (plus exact copies, and col2im's adds):
    split over threads they agree with the serial op within the rounding bound
    of their longest sum; the absolute sums come from the serial op run in
    float64 on the operands' absolute values."""
    attrs = dict(attrs)
    k = 1 if attrs["paddings"] == [0, 0] else 3
    groups = attrs.get("groups", 1)
    if attrs.pop("big", False):  # 64 x 288 x 800 GEMMs: 29.5 MFLOP each
        x, w = _randn(2, 32, 20, 20), _randn(64, 32, 3, 3, seed=1)
    else:
        x, w = _strided(_randn(3, 6, 9, 7)), _randn(4, 6 // groups, k, k, seed=1)
    serial, split = _serial_and_split("conv2d", lambda: {"Input": x, "Filter": w}, attrs)
    dy = _strided(_randn(*serial["Output"].shape, seed=2))
    n, oc, oh, ow = serial["Output"].shape
    terms = max(
        w[0].size, n * oh * ow, oc * w.shape[2] * w.shape[3]
    )  # the longest sum of any output
    _parallel.set_num_threads(1)
    ax, aw, ady = (np.abs(v).astype(np.float64) for v in (x, w, dy))
    abs_sums = {**rf.run_op("conv2d", {"Input": ax, "Filter": aw}, attrs),
                **rf.run_op("conv2d_grad", {"Input": ax, "Filter": aw, "Output@GRAD": ady}, attrs)}
    _assert_conv_within_rounding("conv2d", serial, split, abs_sums, terms)
    _assert_conv_within_rounding(
        "conv2d_grad",
        *_serial_and_split(
            "conv2d_grad", lambda: {"Input": x, "Filter": w, "Output@GRAD": dy}, attrs
        ),
        abs_sums,
        terms,
    )


@pytest.mark.parametrize("attrs", [
    {"pooling_type": "max", "ksize": [3, 3], "strides": [2, 2], "paddings": [1, 1]},
    {"pooling_type": "avg", "ksize": [3, 2], "strides": [1, 2], "paddings": [1, 0]},
    {"pooling_type": "max", "ksize": [2, 2], "strides": [2, 2]},
    {"pooling_type": "avg", "ksize": [1, 1], "global_pooling": True},
])
def test_pool2d_and_gradient_split_bitwise_equal(split_all, attrs):
    x = _strided(_randn(5, 3, 9, 7))
    x[0, 0, :2, :2] = 1.0  # a tie: the first maximum takes the gradient
    serial, split = _serial_and_split("pool2d", lambda: {"X": x}, attrs)
    _assert_same("pool2d", serial, split)
    dout = _randn(*serial["Out"].shape, seed=1)
    _assert_same("pool2d_grad", *_serial_and_split(
        "pool2d_grad", lambda: {"X": x, "Out": serial["Out"], "Out@GRAD": dout}, attrs))
