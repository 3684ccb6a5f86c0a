"""Creation and conversion ops: fill_constant, fill_zeros_like, cast, gaussian_random,
uniform_random."""

from __future__ import annotations

import numpy as np
import pytest

import reference_framework as rf
from reference_framework.registry import get_op_def
from tests.op_test import requires_gpu, run


@pytest.mark.parametrize("dtype, value", [("float32", 0.5), ("int64", 3.0), ("float64", -2.25)])
def test_fill_constant(dtype, value):
    out = run("fill_constant", {}, {"shape": [2, 3], "value": value, "dtype": dtype})["Out"]
    assert out.dtype == np.dtype(dtype) and out.shape == (2, 3)
    np.testing.assert_array_equal(out, np.full((2, 3), value, dtype))


def test_fill_constant_bad_attributes():
    with pytest.raises(
        rf.OpError, match=r"fill_constant: attribute 'shape' is required and was not given"
    ):
        run("fill_constant", {})
    with pytest.raises(
        rf.OpError,
        match=r"fill_constant: attribute 'shape' expects a list of ints each >= 1, "
        r"given \[2, 0\]",
    ):
        run("fill_constant", {}, {"shape": [2, 0]})
    with pytest.raises(
        rf.OpError,
        match=r"fill_constant: attribute 'dtype' expects a numpy dtype name such as "
        r"'float32', given 'floaty'",
    ):
        run("fill_constant", {}, {"shape": [2], "dtype": "floaty"})


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_fill_zeros_like(dtype):
    x = np.arange(6, dtype=dtype).reshape(2, 3) + 1
    out = run("fill_zeros_like", {"X": x})["Out"]
    assert out.dtype == dtype and out.shape == (2, 3)
    np.testing.assert_array_equal(out, np.zeros((2, 3)))


@pytest.mark.parametrize(
    "src, dst",
    [("float32", "int64"), ("int64", "float32"), ("float32", "float64"), ("float64", "float32")],
)
def test_cast(src, dst):
    x = np.array([[1.75, -2.5], [3.0, 0.25]]).astype(src)
    out = run("cast", {"X": x}, {"in_dtype": src, "out_dtype": dst})["Out"]
    assert out.dtype == np.dtype(dst)
    np.testing.assert_array_equal(out, x.astype(dst))


def test_cast_in_dtype_mismatch():
    with pytest.raises(
        rf.OpError, match=r"cast: attribute 'in_dtype' is float64, but X has dtype float32"
    ):
        run("cast", {"X": np.ones(2, np.float32)}, {"in_dtype": "float64", "out_dtype": "int64"})
    with pytest.raises(
        rf.OpError, match=r"cast: attribute 'out_dtype' is required and was not given"
    ):
        run("cast", {"X": np.ones(2, np.float32)}, {"in_dtype": "float32"})


def test_gaussian_random_seeded_moments_shape_dtype():
    attrs = {"shape": [200, 300], "mean": 1.5, "std": 2.0, "seed": 7}
    a, b = run("gaussian_random", {}, attrs)["Out"], run("gaussian_random", {}, attrs)["Out"]
    other = run("gaussian_random", {}, {**attrs, "seed": 8})["Out"]
    assert a.shape == (200, 300) and a.dtype == np.float32
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, other)
    n = a.size
    assert abs(a.mean() - 1.5) < 5 * 2.0 / np.sqrt(n)  # five standard errors
    assert abs(a.std() - 2.0) < 5 * 2.0 / np.sqrt(2 * n)
    assert run("gaussian_random", {}, {**attrs, "dtype": "float64"})["Out"].dtype == np.float64


def test_uniform_random_seeded_moments_bounds_shape_dtype():
    attrs = {"shape": [100, 500], "min": -3.0, "max": 1.0, "seed": 11}
    a, b = run("uniform_random", {}, attrs)["Out"], run("uniform_random", {}, attrs)["Out"]
    other = run("uniform_random", {}, {**attrs, "seed": 12})["Out"]
    assert a.shape == (100, 500) and a.dtype == np.float32
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, other)
    assert a.min() >= -3.0 and a.max() <= 1.0
    n, width = a.size, 4.0
    assert abs(a.mean() - (-1.0)) < 5 * width / np.sqrt(12 * n)
    assert abs(a.var() - width**2 / 12) < 0.02 * width**2 / 12
    assert a.min() < -2.99 and a.max() > 0.99  # the whole range is used


def test_random_bad_attributes():
    with pytest.raises(
        rf.OpError, match=r"uniform_random: attribute 'min' \(1.0\) must be below 'max' \(1.0\)"
    ):
        run("uniform_random", {}, {"shape": [2], "min": 1.0, "max": 1.0})
    with pytest.raises(
        rf.OpError,
        match=r"gaussian_random: attribute 'shape' expects a list of ints each >= 1, "
        r"given \[-1, 3\]",
    ):
        run("gaussian_random", {}, {"shape": [-1, 3]})
    with pytest.raises(
        rf.OpError, match=r"gaussian_random: attribute 'seed' expects an int, given 1.5"
    ):
        run("gaussian_random", {}, {"shape": [2], "seed": 1.5})


def test_infer_shape():
    attrs = {"shape": [64, 3, 7, 7]}
    for op in ("fill_constant", "gaussian_random", "uniform_random"):
        assert get_op_def(op).infer_shape({}, attrs) == {"Out": [(64, 3, 7, 7)]}
    for op in ("fill_zeros_like", "cast"):
        assert get_op_def(op).infer_shape({"X": [(-1, 10)]}, {}) == {"Out": [(-1, 10)]}


@requires_gpu
def test_gpu_creation_ops():
    place = rf.CUDAPlace(0)
    out = run("fill_constant", {}, {"shape": [3], "value": 2.0, "dtype": "int64"}, place=place)[
        "Out"
    ]
    np.testing.assert_array_equal(out, [2, 2, 2])
    attrs = {"shape": [1000], "seed": 5}
    a = run("gaussian_random", {}, attrs, place=place)["Out"]
    np.testing.assert_array_equal(a, run("gaussian_random", {}, attrs, place=place)["Out"])
    assert a.dtype == np.float32 and abs(a.mean()) < 0.2
    c = run(
        "cast",
        {"X": np.array([1.5, -2.5], np.float32)},
        {"in_dtype": "float32", "out_dtype": "int64"},
        place=place,
    )["Out"]
    np.testing.assert_array_equal(c, [1, -2])
