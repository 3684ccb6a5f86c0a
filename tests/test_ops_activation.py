"""relu and relu_grad against numpy and finite differences."""

from __future__ import annotations

import numpy as np
import pytest

import reference_framework as rf
from reference_framework.registry import OpSpec, get_op_def
from tests.op_test import check_grad, check_output, requires_gpu, run


def away_from_zero(shape, seed=0):
    """Values with |x| >= 0.1, so finite differences never straddle the kink."""
    x = np.random.default_rng(seed).standard_normal(shape)
    return np.where(np.abs(x) < 0.1, np.sign(x) * 0.1 + x, x)


def test_forward_matches_reference():
    x = away_from_zero((3, 4, 5))
    x[0, 0, :2] = [0.0, -0.0]
    check_output("relu", {"X": x}, None, {"Out": np.where(x > 0, x, 0.0)}, rtol=0, atol=0)


def test_forward_keeps_float32():
    x = away_from_zero((4, 6)).astype(np.float32)
    out = run("relu", {"X": x})["Out"]
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, np.where(x > 0, x, np.float32(0)))


def test_gradient():
    check_grad("relu", {"X": away_from_zero((2, 3, 4, 5))})


def test_gradient_masks_by_out_and_agrees_in_float32():
    out = np.maximum(away_from_zero((6, 7), seed=1), 0)
    dout = np.random.default_rng(2).standard_normal((6, 7))
    want = np.where(out > 0, dout, 0.0)
    for dtype in (np.float64, np.float32):
        got = run("relu_grad", {"Out": out.astype(dtype), "Out@GRAD": dout.astype(dtype)})["X@GRAD"]
        assert got.dtype == dtype
        np.testing.assert_allclose(got, want, rtol=1e-7 if dtype == np.float32 else 0, atol=0)


def test_gradient_reads_out_not_x():
    (spec,) = get_op_def("relu").grad(OpSpec("relu", {"X": ["x"]}, {"Out": ["y"]}))
    assert spec.inputs == {"Out": ["y"], "Out@GRAD": ["y@GRAD"]}
    assert spec.outputs == {"X@GRAD": ["x@GRAD"]}


def test_gradient_shape_mismatch():
    with pytest.raises(
        rf.OpError, match=r"relu_grad: Out@GRAD must have Out's shape \[2, 3\], given \[3, 2\]"
    ):
        run("relu_grad", {"Out": np.ones((2, 3)), "Out@GRAD": np.ones((3, 2))})


def test_infer_shape_and_cost():
    relu, grad = get_op_def("relu"), get_op_def("relu_grad")
    assert relu.infer_shape({"X": [(-1, 64, 56, 56)]}, {}) == {"Out": [(-1, 64, 56, 56)]}
    assert grad.infer_shape({"Out": [(-1, 8)], "Out@GRAD": [(-1, 8)]}, {}) == {"X@GRAD": [(-1, 8)]}
    n = 8 * 64 * 56 * 56
    assert relu.cost({"X": [(8, 64, 56, 56)]}, {}, 4) == (float(n), 8.0 * n)
    assert grad.cost({"Out": [(8, 64, 56, 56)], "Out@GRAD": [(8, 64, 56, 56)]}, {}, 4) == (
        float(n),
        12.0 * n,
    )


@requires_gpu
def test_gpu_matches_cpu():
    x = away_from_zero((4, 5, 6)).astype(np.float32)
    dout = np.random.default_rng(3).standard_normal(x.shape).astype(np.float32)
    place = rf.CUDAPlace(0)
    out = run("relu", {"X": x}, place=place)["Out"]
    np.testing.assert_array_equal(out, run("relu", {"X": x})["Out"])
    np.testing.assert_array_equal(
        run("relu_grad", {"Out": out, "Out@GRAD": dout}, place=place)["X@GRAD"],
        run("relu_grad", {"Out": out, "Out@GRAD": dout})["X@GRAD"],
    )
