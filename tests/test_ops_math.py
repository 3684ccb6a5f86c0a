"""mean (and its gradient) and the n-ary sum."""

from __future__ import annotations

import numpy as np
import pytest

import reference_framework as rf
from reference_framework.registry import get_op_def
from tests.op_test import check_grad, check_output, requires_gpu, run


@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 3, 4, 5)])
def test_mean_forward(shape):
    x = np.random.default_rng(0).standard_normal(shape)
    check_output(
        "mean", {"X": x}, None, {"Out": np.array([np.sum(x) / x.size])}, rtol=1e-12, atol=1e-15
    )


def test_mean_gradient():
    check_grad("mean", {"X": np.random.default_rng(1).standard_normal((3, 4, 2))})


def test_mean_gradient_spreads_evenly_and_keeps_float32():
    x = np.zeros((4, 5), np.float32)
    dx = run("mean_grad", {"X": x, "Out@GRAD": np.array([2.0], np.float32)})["X@GRAD"]
    assert dx.dtype == np.float32 and dx.shape == (4, 5)
    np.testing.assert_array_equal(dx, np.full((4, 5), 0.1, np.float32))


def test_mean_float32_agrees_with_float64():
    x = np.random.default_rng(2).standard_normal((32, 1000)) + 3.0
    out32 = run("mean", {"X": x.astype(np.float32)})["Out"]
    assert out32.dtype == np.float32 and out32.shape == (1,)
    np.testing.assert_allclose(out32, [x.mean()], rtol=1e-6)


@pytest.mark.parametrize("count", [1, 2, 3, 5])
def test_sum_of_n_inputs(count):
    rng = np.random.default_rng(count)
    xs = [rng.standard_normal((3, 4)).astype(np.float32) for _ in range(count)]
    want = np.zeros((3, 4))
    for x in xs:
        want += x
    outs = check_output("sum", {"X": xs}, None, {"Out": want}, rtol=1e-6, atol=1e-6)
    assert outs["Out"].dtype == np.float32


def test_sum_leaves_its_inputs_untouched():
    xs = [np.full((2, 2), float(i), np.float32) for i in range(1, 4)]
    copies = [x.copy() for x in xs]
    out = rf.run_op("sum", {"X": xs})["Out"]
    np.testing.assert_array_equal(out, np.full((2, 2), 6.0))
    assert all(out is not x and not np.shares_memory(out, x) for x in xs)
    for x, c in zip(xs, copies, strict=True):
        np.testing.assert_array_equal(x, c)
    single = rf.run_op("sum", {"X": xs[:1]})["Out"]
    assert single is not xs[0] and not np.shares_memory(single, xs[0])


def test_sum_shape_mismatch():
    with pytest.raises(rf.OpError, match=r"sum: every X must have shape \[2, 3\], given \[3, 2\]"):
        run("sum", {"X": [np.ones((2, 3)), np.ones((2, 3)), np.ones((3, 2))]})
    with pytest.raises(
        rf.OpError,
        match=r"sum: input slot 'X' is duplicable and takes a list of arrays, "
        r"given ndarray",
    ):
        rf.run_op("sum", {"X": np.ones(3)})


def test_infer_shape_and_cost():
    mean, sum_ = get_op_def("mean"), get_op_def("sum")
    assert mean.infer_shape({"X": [(-1, 1)]}, {}) == {"Out": [(1,)]}
    assert get_op_def("mean_grad").infer_shape({"X": [(-1, 1)], "Out@GRAD": [(1,)]}, {}) == {
        "X@GRAD": [(-1, 1)]
    }
    assert sum_.infer_shape({"X": [(-1, 8), (-1, 8), (-1, 8)]}, {}) == {"Out": [(-1, 8)]}
    assert mean.cost({"X": [(32, 1)]}, {}, 4) == (32.0, 128.0)
    assert sum_.cost({"X": [(4, 8)] * 3}, {}, 4) == (64.0, 512.0)


@requires_gpu
def test_gpu_matches_cpu():
    x = np.random.default_rng(3).standard_normal((16, 8)).astype(np.float32)
    place = rf.CUDAPlace(0)
    np.testing.assert_allclose(
        run("mean", {"X": x}, place=place)["Out"], run("mean", {"X": x})["Out"], rtol=1e-6
    )
    xs = [x, 2 * x, 3 * x]
    np.testing.assert_allclose(run("sum", {"X": xs}, place=place)["Out"], 6 * x, rtol=1e-6)
