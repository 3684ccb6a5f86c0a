"""momentum: in-place update, plain and Nesterov, against hand-computed steps."""

from __future__ import annotations

import numpy as np
import pytest

import reference_framework as rf
from reference_framework.backend import cupy_or_none
from reference_framework.registry import get_op_def
from tests.op_test import requires_gpu


def momentum_inputs(shape=(3, 4), dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    return {
        "Param": rng.standard_normal(shape).astype(dtype),
        "Grad": rng.standard_normal(shape).astype(dtype),
        "Velocity": rng.standard_normal(shape).astype(dtype),
        "LearningRate": np.array([0.1], dtype),
    }


def test_plain_step_by_hand_in_place():
    p, g, v = (
        np.array([1.0, -2.0], np.float32),
        np.array([0.5, 1.0], np.float32),
        np.array([2.0, 0.0], np.float32),
    )
    lr = np.array([0.1], np.float32)
    outs = rf.run_op(
        "momentum", {"Param": p, "Grad": g, "Velocity": v, "LearningRate": lr}, {"mu": 0.9}
    )
    # v = 0.9 * [2, 0] + [0.5, 1] = [2.3, 1.0]; p = [1, -2] - 0.1 * v = [0.77, -2.1]
    assert outs["ParamOut"] is p and outs["VelocityOut"] is v
    np.testing.assert_allclose(v, [2.3, 1.0], rtol=1e-6)
    np.testing.assert_allclose(p, [0.77, -2.1], rtol=1e-6)
    np.testing.assert_array_equal(g, [0.5, 1.0])  # the gradient is read only


def test_nesterov_step_by_hand_in_place():
    p, g, v = (
        np.array([1.0, -2.0], np.float32),
        np.array([0.5, 1.0], np.float32),
        np.array([2.0, 0.0], np.float32),
    )
    lr = np.array([0.1], np.float32)
    outs = rf.run_op("momentum", {"Param": p, "Grad": g, "Velocity": v, "LearningRate": lr},
                     {"mu": 0.9, "use_nesterov": True})
    # v = [2.3, 1.0]; p -= 0.1 * (g + 0.9 * v) = 0.1 * [2.57, 1.9]  ->  [0.743, -2.19]
    assert outs["ParamOut"] is p and outs["VelocityOut"] is v
    np.testing.assert_allclose(v, [2.3, 1.0], rtol=1e-6)
    np.testing.assert_allclose(p, [0.743, -2.19], rtol=1e-6)


@pytest.mark.parametrize("nesterov", [False, True])
def test_several_steps_match_reference_and_float32_agrees(nesterov):
    ins64 = momentum_inputs((5, 6), np.float64, seed=1)
    ins32 = {k: v.astype(np.float32) for k, v in ins64.items()}
    p_ref, v_ref = ins64["Param"].copy(), ins64["Velocity"].copy()
    rng = np.random.default_rng(2)
    for _ in range(3):
        g = rng.standard_normal((5, 6))
        v_ref = 0.8 * v_ref + g
        p_ref = p_ref - 0.1 * (g + 0.8 * v_ref if nesterov else v_ref)
        for ins in (ins64, ins32):
            ins["Grad"][...] = g
            rf.run_op("momentum", ins, {"mu": 0.8, "use_nesterov": nesterov})
    np.testing.assert_allclose(ins64["Param"], p_ref, rtol=1e-12)
    np.testing.assert_allclose(ins64["Velocity"], v_ref, rtol=1e-12)
    assert ins32["Param"].dtype == np.float32 and ins32["Velocity"].dtype == np.float32
    np.testing.assert_allclose(ins32["Param"], p_ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ins32["Velocity"], v_ref, rtol=1e-5, atol=1e-6)


def test_a_float64_learning_rate_keeps_float32_parameters():
    ins = momentum_inputs()
    ins["LearningRate"] = np.array([0.1])
    p, v = ins["Param"], ins["Velocity"]
    want_v = 0.9 * v.astype(np.float64) + ins["Grad"]
    want_p = p - 0.1 * want_v
    outs = rf.run_op("momentum", ins, {"mu": 0.9})
    assert outs["ParamOut"].dtype == np.float32
    np.testing.assert_allclose(p, want_p, rtol=1e-6)


def test_bad_inputs_and_attributes():
    ins = momentum_inputs()
    with pytest.raises(rf.OpError, match=r"momentum: attribute 'mu' is required and was not given"):
        rf.run_op("momentum", ins)
    with pytest.raises(
        rf.OpError, match=r"momentum: attribute 'mu' expects a number >= 0, given -0.5"
    ):
        rf.run_op("momentum", ins, {"mu": -0.5})
    with pytest.raises(
        rf.OpError, match=r"momentum: attribute 'mu' expects a number >= 0, given 'fast'"
    ):
        rf.run_op("momentum", ins, {"mu": "fast"})
    with pytest.raises(
        rf.OpError, match=r"momentum: Grad must have Param's shape \[3, 4\], given \[4, 3\]"
    ):
        rf.run_op("momentum", {**ins, "Grad": np.ones((4, 3), np.float32)}, {"mu": 0.9})
    with pytest.raises(
        rf.OpError, match=r"momentum: Velocity must have Param's shape \[3, 4\], given \[3\]"
    ):
        rf.run_op("momentum", {**ins, "Velocity": np.ones(3, np.float32)}, {"mu": 0.9})
    with pytest.raises(
        rf.OpError, match=r"momentum: Velocity must have Param's dtype float32, given float64"
    ):
        rf.run_op("momentum", {**ins, "Velocity": np.ones((3, 4))}, {"mu": 0.9})
    with pytest.raises(
        rf.OpError,
        match=r"momentum: LearningRate must hold one value \(shape \[1\]\), "
        r"given shape \[2\]",
    ):
        rf.run_op("momentum", {**ins, "LearningRate": np.ones(2, np.float32)}, {"mu": 0.9})


def test_infer_shape_and_cost():
    op = get_op_def("momentum")
    shapes = {
        "Param": [(64, 3, 7, 7)],
        "Grad": [(64, 3, 7, 7)],
        "Velocity": [(64, 3, 7, 7)],
        "LearningRate": [(1,)],
    }
    attrs = op.complete_attrs({"mu": 0.9})
    assert op.infer_shape(shapes, attrs) == {
        "ParamOut": [(64, 3, 7, 7)],
        "VelocityOut": [(64, 3, 7, 7)],
    }
    with pytest.raises(
        rf.OpError, match=r"momentum: Grad must have Param's shape \[64, 3, 7, 7\], given \[64\]"
    ):
        op.infer_shape({**shapes, "Grad": [(64,)]}, attrs)
    n = 64 * 3 * 7 * 7
    assert op.cost(shapes, attrs, 4) == (4.0 * n, 20.0 * n)
    assert op.cost(shapes, op.complete_attrs({"mu": 0.9, "use_nesterov": True}), 4) == (
        6.0 * n,
        20.0 * n,
    )


@requires_gpu
def test_gpu_in_place_matches_cpu():
    cp = cupy_or_none()
    for nesterov in (False, True):
        ins = momentum_inputs((16, 8), seed=3)
        dev = {k: cp.asarray(v) for k, v in ins.items()}
        outs = rf.run_op("momentum", dev, {"mu": 0.9, "use_nesterov": nesterov})
        rf.run_op("momentum", ins, {"mu": 0.9, "use_nesterov": nesterov})
        assert outs["ParamOut"] is dev["Param"] and outs["VelocityOut"] is dev["Velocity"]
        np.testing.assert_allclose(cp.asnumpy(dev["Param"]), ins["Param"], rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(
            cp.asnumpy(dev["Velocity"]), ins["Velocity"], rtol=1e-6, atol=1e-7
        )
