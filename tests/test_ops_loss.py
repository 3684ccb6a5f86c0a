"""softmax and cross_entropy (hard and soft labels), forward and gradient."""

from __future__ import annotations

import numpy as np
import pytest

import reference_framework as rf
from reference_framework.registry import get_op_def
from tests.op_test import check_grad, check_output, requires_gpu, run


def ref_softmax(x):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def probabilities(n, d, seed=0, low=0.05):
    p = np.random.default_rng(seed).uniform(low, 1.0, (n, d))
    return p / p.sum(axis=1, keepdims=True)


def hard_labels(n, d, seed=0):
    return np.random.default_rng(seed).integers(0, d, (n, 1)).astype(np.int64)


# softmax


@pytest.mark.parametrize("shape", [(4, 7), (2, 3, 5)])
def test_softmax_matches_reference(shape):
    x = np.random.default_rng(0).standard_normal(shape) * 3
    check_output("softmax", {"X": x}, None, {"Out": ref_softmax(x)}, rtol=1e-12, atol=1e-15)


def test_softmax_is_stable_for_large_inputs():
    x = np.array([[1000.0, 1001.0, 1002.0], [-1000.0, -1000.0, -1e4]], dtype=np.float32)
    out = run("softmax", {"X": x})["Out"]
    assert out.dtype == np.float32 and np.all(np.isfinite(out))
    np.testing.assert_allclose(
        out, ref_softmax(np.array([[0.0, 1.0, 2.0], [0.0, 0.0, -9000.0]])), rtol=1e-6
    )


def test_softmax_float32_agrees_with_float64():
    x = np.random.default_rng(1).standard_normal((8, 102)) * 4
    out32 = run("softmax", {"X": x.astype(np.float32)})["Out"]
    assert out32.dtype == np.float32
    np.testing.assert_allclose(out32, ref_softmax(x), rtol=1e-5, atol=1e-8)


def test_softmax_gradient():
    check_grad("softmax", {"X": np.random.default_rng(2).standard_normal((3, 6))})
    check_grad("softmax", {"X": np.random.default_rng(3).standard_normal((2, 2, 4))})


def test_softmax_gradient_float32_and_shape_check():
    out = ref_softmax(np.random.default_rng(4).standard_normal((5, 9)))
    dout = np.random.default_rng(5).standard_normal((5, 9))
    want = out * (dout - (dout * out).sum(axis=1, keepdims=True))
    got64 = run("softmax_grad", {"Out": out, "Out@GRAD": dout})["X@GRAD"]
    np.testing.assert_allclose(got64, want, rtol=1e-12, atol=1e-15)
    got32 = run(
        "softmax_grad", {"Out": out.astype(np.float32), "Out@GRAD": dout.astype(np.float32)}
    )["X@GRAD"]
    assert got32.dtype == np.float32
    np.testing.assert_allclose(got32, want, rtol=1e-5, atol=1e-6)
    with pytest.raises(
        rf.OpError, match=r"softmax_grad: Out@GRAD must have Out's shape \[5, 9\], given \[5, 8\]"
    ):
        run("softmax_grad", {"Out": out, "Out@GRAD": dout[:, :8]})


# cross_entropy


def test_cross_entropy_hard_matches_reference():
    x, label = probabilities(6, 5), hard_labels(6, 5)
    want = -np.log(x[np.arange(6), label[:, 0]]).reshape(6, 1)
    check_output("cross_entropy", {"X": x, "Label": label}, None, {"Y": want}, rtol=1e-12, atol=0)


def test_cross_entropy_soft_matches_reference():
    x, label = probabilities(4, 7, seed=1), probabilities(4, 7, seed=2, low=0.0)
    want = -(label * np.log(x)).sum(axis=1, keepdims=True)
    check_output(
        "cross_entropy",
        {"X": x, "Label": label},
        {"soft_label": True},
        {"Y": want},
        rtol=1e-12,
        atol=0,
    )


def test_cross_entropy_soft_with_one_hot_equals_hard():
    x, label = probabilities(5, 4, seed=3), hard_labels(5, 4, seed=3)
    hard = run("cross_entropy", {"X": x, "Label": label})["Y"]
    soft = run("cross_entropy", {"X": x, "Label": np.eye(4)[label[:, 0]]}, {"soft_label": True})[
        "Y"
    ]
    np.testing.assert_allclose(soft, hard, rtol=1e-12)


@pytest.mark.parametrize("dtype, clamp", [(np.float32, 87.33655), (np.float64, 708.39642)])
def test_cross_entropy_zero_probability_is_large_and_finite(dtype, clamp):
    x = np.array([[0.0, 1.0], [0.5, 0.5]], dtype=dtype)
    label = np.array([[0], [1]], dtype=np.int64)
    y = run("cross_entropy", {"X": x, "Label": label})["Y"]
    assert y.dtype == dtype
    np.testing.assert_allclose(y[:, 0], [clamp, np.log(2)], rtol=1e-6)
    soft = run("cross_entropy", {"X": x, "Label": np.array([[1.0, 0.0], [0.0, 1.0]], dtype)},
               {"soft_label": True})["Y"]
    np.testing.assert_allclose(soft[:, 0], [clamp, np.log(2)], rtol=1e-6)
    dx = run("cross_entropy_grad", {"X": x, "Label": label, "Y@GRAD": np.ones((2, 1), dtype)})[
        "X@GRAD"
    ]
    assert np.all(np.isfinite(dx)) and dx[0, 0] < -1e30


def test_cross_entropy_float32_agrees_with_float64():
    x, label = probabilities(32, 102, seed=4), hard_labels(32, 102, seed=4)
    y32 = run("cross_entropy", {"X": x.astype(np.float32), "Label": label})["Y"]
    y64 = run("cross_entropy", {"X": x, "Label": label})["Y"]
    assert y32.dtype == np.float32
    np.testing.assert_allclose(y32, y64, rtol=1e-6)
    dy = np.full((32, 1), 1 / 32)
    g32 = run(
        "cross_entropy_grad",
        {"X": x.astype(np.float32), "Label": label, "Y@GRAD": dy.astype(np.float32)},
    )
    g64 = run("cross_entropy_grad", {"X": x, "Label": label, "Y@GRAD": dy})
    assert g32["X@GRAD"].dtype == np.float32
    np.testing.assert_allclose(g32["X@GRAD"], g64["X@GRAD"], rtol=1e-6)


def test_cross_entropy_gradient_hard():
    check_grad(
        "cross_entropy", {"X": probabilities(5, 6, seed=5), "Label": hard_labels(5, 6, seed=5)}
    )


def test_cross_entropy_gradient_soft():
    check_grad(
        "cross_entropy",
        {"X": probabilities(4, 5, seed=6), "Label": probabilities(4, 5, seed=7)},
        {"soft_label": True},
        wrt=["X"],
    )


def test_cross_entropy_gradient_is_zero_off_the_label():
    x, label = probabilities(3, 4, seed=8), np.array([[2], [0], [3]])
    dx = run(
        "cross_entropy_grad", {"X": x, "Label": label, "Y@GRAD": np.array([[1.0], [2.0], [3.0]])}
    )["X@GRAD"]
    want = np.zeros((3, 4))
    want[[0, 1, 2], [2, 0, 3]] = [-1.0 / x[0, 2], -2.0 / x[1, 0], -3.0 / x[2, 3]]
    np.testing.assert_allclose(dx, want, rtol=1e-12)


def test_softmax_then_cross_entropy_gradient_is_p_minus_onehot():
    logits = np.random.default_rng(9).standard_normal((4, 5))
    label = hard_labels(4, 5, seed=9)
    p = run("softmax", {"X": logits})["Out"]
    dp = run("cross_entropy_grad", {"X": p, "Label": label, "Y@GRAD": np.ones((4, 1))})["X@GRAD"]
    dlogits = run("softmax_grad", {"Out": p, "Out@GRAD": dp})["X@GRAD"]
    np.testing.assert_allclose(dlogits, p - np.eye(5)[label[:, 0]], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("op", ["cross_entropy", "cross_entropy_grad"])
def test_labels_out_of_range_are_named(op):
    x = probabilities(4, 3)
    ins = {"X": x, "Label": np.array([[0], [3], [2], [-1]]), "Y@GRAD": np.ones((4, 1))}
    if op == "cross_entropy":
        del ins["Y@GRAD"]
    with pytest.raises(
        rf.OpError,
        match=rf"{op}: Label values must be in \[0, 3\) \(X has 3 classes\), "
        r"given 3 at row 1, -1 at row 3$",
    ):
        run(op, ins)


def test_cross_entropy_bad_shapes_and_dtypes():
    x = probabilities(4, 3)
    with pytest.raises(
        rf.OpError,
        match=r"cross_entropy: Label must have shape \[4, 1\] \(hard labels, one per "
        r"row of X\), given \[4\]",
    ):
        run("cross_entropy", {"X": x, "Label": np.zeros(4, np.int64)})
    with pytest.raises(
        rf.OpError,
        match=r"cross_entropy: hard Label must have an integer dtype such as int64, "
        r"given float64",
    ):
        run("cross_entropy", {"X": x, "Label": np.zeros((4, 1))})
    with pytest.raises(
        rf.OpError,
        match=r"cross_entropy: with soft_label, Label must have X's shape \[4, 3\], "
        r"given \[4, 1\]",
    ):
        run("cross_entropy", {"X": x, "Label": np.zeros((4, 1))}, {"soft_label": True})
    with pytest.raises(
        rf.OpError, match=r"cross_entropy: X must be 2-D \[N, D\] probabilities, given shape \[4\]"
    ):
        run("cross_entropy", {"X": x[:, 0], "Label": np.zeros((4, 1), np.int64)})
    with pytest.raises(
        rf.OpError, match=r"cross_entropy_grad: Y@GRAD must have shape \[4, 1\], given \[4\]"
    ):
        run(
            "cross_entropy_grad",
            {"X": x, "Label": np.zeros((4, 1), np.int64), "Y@GRAD": np.ones(4)},
        )


def test_infer_shape_and_cost():
    sm, smg = get_op_def("softmax"), get_op_def("softmax_grad")
    ce, ceg = get_op_def("cross_entropy"), get_op_def("cross_entropy_grad")
    assert sm.infer_shape({"X": [(-1, 102)]}, {}) == {"Out": [(-1, 102)]}
    assert smg.infer_shape({"Out": [(-1, 102)], "Out@GRAD": [(-1, 102)]}, {}) == {
        "X@GRAD": [(-1, 102)]
    }
    assert sm.cost({"X": [(32, 102)]}, {}, 4) == (5.0 * 3264, 8.0 * 3264)
    assert smg.cost({"Out": [(32, 102)], "Out@GRAD": [(32, 102)]}, {}, 4) == (
        4.0 * 3264,
        12.0 * 3264,
    )
    hard, soft = ce.complete_attrs({}), ce.complete_attrs({"soft_label": True})
    assert ce.infer_shape({"X": [(-1, 102)], "Label": [(-1, 1)]}, hard) == {"Y": [(-1, 1)]}
    assert ce.infer_shape({"X": [(-1, 102)], "Label": [(-1, 102)]}, soft) == {"Y": [(-1, 1)]}
    assert ceg.infer_shape({"X": [(-1, 102)], "Label": [(-1, 1)], "Y@GRAD": [(-1, 1)]}, hard) == {
        "X@GRAD": [(-1, 102)]
    }
    with pytest.raises(
        rf.OpError,
        match=r"cross_entropy: Label must have shape \[-1, 1\] \(soft_label=False\), "
        r"given \[-1, 102\]",
    ):
        ce.infer_shape({"X": [(-1, 102)], "Label": [(-1, 102)]}, hard)


@requires_gpu
def test_gpu_matches_cpu():
    place = rf.CUDAPlace(0)
    logits = np.random.default_rng(10).standard_normal((8, 10)).astype(np.float32)
    label = hard_labels(8, 10, seed=10)
    p_gpu = run("softmax", {"X": logits}, place=place)["Out"]
    p = run("softmax", {"X": logits})["Out"]
    np.testing.assert_allclose(p_gpu, p, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(run("cross_entropy", {"X": p, "Label": label}, place=place)["Y"],
                               run("cross_entropy", {"X": p, "Label": label})["Y"], rtol=1e-5)
    dy = np.full((8, 1), 0.125, np.float32)
    np.testing.assert_allclose(
        run("cross_entropy_grad", {"X": p, "Label": label, "Y@GRAD": dy}, place=place)["X@GRAD"],
        run("cross_entropy_grad", {"X": p, "Label": label, "Y@GRAD": dy})["X@GRAD"], rtol=1e-5)
    with pytest.raises(rf.OpError, match=r"given 10 at row 0"):
        run("cross_entropy", {"X": p, "Label": np.full((8, 1), 10)}, place=place)
