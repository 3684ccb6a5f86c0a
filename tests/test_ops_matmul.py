"""mul (flatten-at-num_col_dims matrix product) and mul_grad."""

from __future__ import annotations

import numpy as np
import pytest

import reference_framework as rf
from reference_framework.registry import get_op_def
from tests.op_test import check_grad, check_output, requires_gpu, run


def ref_mul(x, y, xn=1, yn=1):
    """Loop-free but explicit: flatten, matrix product by sums of products, reshape."""
    m, k = int(np.prod(x.shape[:xn])), int(np.prod(x.shape[xn:]))
    n = int(np.prod(y.shape[yn:]))
    x2, y2 = x.reshape(m, k).astype(np.float64), y.reshape(k, n).astype(np.float64)
    out = (x2[:, :, None] * y2[None, :, :]).sum(axis=1)
    return out.reshape(x.shape[:xn] + y.shape[yn:])


CASES = [
    ((4, 6), (6, 3), 1, 1),
    ((2, 3, 4), (12, 5), 1, 1),  # the fc layer on a feature map
    ((2, 3, 4), (4, 5), 2, 1),
    ((2, 3, 4), (4, 2, 3), 2, 1),
    ((3, 8), (2, 4, 5), 1, 2),
]


@pytest.mark.parametrize("xs, ys, xn, yn", CASES)
def test_forward_matches_reference(xs, ys, xn, yn):
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(xs), rng.standard_normal(ys)
    check_output("mul", {"X": x, "Y": y}, {"x_num_col_dims": xn, "y_num_col_dims": yn},
                 {"Out": ref_mul(x, y, xn, yn)}, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("xs, ys, xn, yn", CASES)
def test_gradient(xs, ys, xn, yn):
    rng = np.random.default_rng(1)
    check_grad("mul", {"X": rng.standard_normal(xs), "Y": rng.standard_normal(ys)},
               {"x_num_col_dims": xn, "y_num_col_dims": yn})


def test_float32_agrees_with_float64():
    rng = np.random.default_rng(2)
    x, y, dout = (
        rng.standard_normal((8, 2048)),
        rng.standard_normal((2048, 102)),
        rng.standard_normal((8, 102)),
    )
    x32, y32, d32 = x.astype(np.float32), y.astype(np.float32), dout.astype(np.float32)
    out32 = run("mul", {"X": x32, "Y": y32})["Out"]
    assert out32.dtype == np.float32
    np.testing.assert_allclose(out32, run("mul", {"X": x, "Y": y})["Out"], rtol=1e-4, atol=1e-3)
    g32 = run("mul_grad", {"X": x32, "Y": y32, "Out@GRAD": d32})
    g64 = run("mul_grad", {"X": x, "Y": y, "Out@GRAD": dout})
    for slot in ("X@GRAD", "Y@GRAD"):
        assert g32[slot].dtype == np.float32
        np.testing.assert_allclose(g32[slot], g64[slot], rtol=1e-4, atol=1e-4, err_msg=slot)


def test_gradient_values_by_hand():
    x = np.array([[1.0, 2.0], [3.0, 4.0]])
    y = np.array([[5.0], [6.0]])
    g = run("mul_grad", {"X": x, "Y": y, "Out@GRAD": np.array([[1.0], [10.0]])})
    np.testing.assert_array_equal(g["X@GRAD"], [[5.0, 6.0], [50.0, 60.0]])
    np.testing.assert_array_equal(g["Y@GRAD"], [[31.0], [42.0]])


def test_mismatched_dims_are_named():
    x, y = np.ones((2, 3, 4)), np.ones((10, 5))
    with pytest.raises(
        rf.OpError,
        match=r"mul: X flattened to \[2, 12\] and Y flattened to \[10, 5\] do not "
        r"multiply: X's columns \(12\) must equal Y's rows \(10\) \(X shape "
        r"\[2, 3, 4\], Y shape \[10, 5\], x_num_col_dims=1, y_num_col_dims=1\)",
    ):
        run("mul", {"X": x, "Y": y})
    with pytest.raises(
        rf.OpError,
        match=r"mul: attribute 'x_num_col_dims' must be in \[1, 2\] for X of shape "
        r"\[2, 3, 4\], given 3",
    ):
        run("mul", {"X": x, "Y": y}, {"x_num_col_dims": 3})
    with pytest.raises(
        rf.OpError, match=r"mul: attribute 'y_num_col_dims' expects an int >= 1, given 0"
    ):
        run("mul", {"X": x, "Y": y}, {"y_num_col_dims": 0})
    with pytest.raises(
        rf.OpError, match=r"mul_grad: Out@GRAD must have Out's shape \[2, 5\], given \[5, 2\]"
    ):
        run("mul_grad", {"X": np.ones((2, 4)), "Y": np.ones((4, 5)), "Out@GRAD": np.ones((5, 2))})


def test_infer_shape_and_cost():
    mul, grad = get_op_def("mul"), get_op_def("mul_grad")
    attrs = mul.complete_attrs({})
    assert mul.infer_shape({"X": [(-1, 2048, 1, 1)], "Y": [(2048, 102)]}, attrs) == {
        "Out": [(-1, 102)]
    }
    assert mul.infer_shape(
        {"X": [(-1, 3, 4)], "Y": [(4, 5)]}, mul.complete_attrs({"x_num_col_dims": 2})
    ) == {"Out": [(-1, 3, 5)]}
    with pytest.raises(
        rf.OpError,
        match=r"mul: X of shape \[-1, 2048\] flattened at x_num_col_dims=1 has 2048 "
        r"columns, but Y of shape \[1024, 10\] flattened at y_num_col_dims=1 "
        r"has 1024 rows",
    ):
        mul.infer_shape({"X": [(-1, 2048)], "Y": [(1024, 10)]}, attrs)
    assert grad.infer_shape(
        {"X": [(-1, 2048)], "Y": [(2048, 102)], "Out@GRAD": [(-1, 102)]}, attrs
    ) == {"X@GRAD": [(-1, 2048)], "Y@GRAD": [(2048, 102)]}
    shapes = {"X": [(32, 2048)], "Y": [(2048, 102)]}
    assert mul.cost(shapes, attrs, 4) == (
        2.0 * 32 * 2048 * 102,
        4.0 * (32 * 2048 + 2048 * 102 + 32 * 102),
    )
    assert grad.cost(shapes, attrs, 4) == (4.0 * 32 * 2048 * 102,
                                           4.0 * (2 * (32 * 2048 + 2048 * 102) + 32 * 102))


@requires_gpu
def test_gpu_matches_cpu():
    rng = np.random.default_rng(3)
    x, y = (
        rng.standard_normal((8, 64, 1, 1)).astype(np.float32),
        rng.standard_normal((64, 10)).astype(np.float32),
    )
    dout = rng.standard_normal((8, 10)).astype(np.float32)
    place = rf.CUDAPlace(0)
    np.testing.assert_allclose(
        run("mul", {"X": x, "Y": y}, place=place)["Out"],
        run("mul", {"X": x, "Y": y})["Out"],
        rtol=1e-4,
        atol=1e-5,
    )
    g_gpu = run("mul_grad", {"X": x, "Y": y, "Out@GRAD": dout}, place=place)
    g_cpu = run("mul_grad", {"X": x, "Y": y, "Out@GRAD": dout})
    for slot in ("X@GRAD", "Y@GRAD"):
        np.testing.assert_allclose(g_gpu[slot], g_cpu[slot], rtol=1e-4, atol=1e-5, err_msg=slot)
