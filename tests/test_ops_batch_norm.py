"""batch_norm and batch_norm_grad against a plain numpy reference and finite differences."""

from __future__ import annotations

import numpy as np
import pytest

import reference_framework as rf
from reference_framework.backend import cupy_or_none, to_host
from reference_framework.registry import get_op_def
from tests.op_test import check_grad, check_output, requires_gpu, run

EPS = 1e-5


def ref_batch_norm(x, scale, bias, mean, var, momentum=0.9, epsilon=EPS, is_test=False):
    """Textbook batch normalisation in float64.

    Returns (Y, new running mean, new running var, batch mean, 1/std)."""
    x = x.astype(np.float64)
    axes = (0,) + tuple(range(2, x.ndim))
    bshape = (1, -1) + (1,) * (x.ndim - 2)
    if is_test:
        mu, v = mean.astype(np.float64), var.astype(np.float64)
    else:
        mu = x.mean(axis=axes)
        v = ((x - mu.reshape(bshape)) ** 2).mean(axis=axes)
    inv_std = 1.0 / np.sqrt(v + epsilon)
    y = (x - mu.reshape(bshape)) * (inv_std * scale).reshape(bshape) + bias.reshape(bshape)
    if is_test:
        return y, mean, var, mu, inv_std
    return (
        y,
        mean * momentum + mu * (1 - momentum),
        var * momentum + v * (1 - momentum),
        mu,
        inv_std,
    )


def bn_inputs(shape, dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    c = shape[1]
    return {
        "X": (2.0 * rng.standard_normal(shape) + 0.5).astype(dtype),
        "Scale": rng.uniform(0.5, 1.5, c).astype(dtype),
        "Bias": rng.standard_normal(c).astype(dtype),
        "Mean": rng.standard_normal(c).astype(dtype),
        "Variance": rng.uniform(0.5, 2.0, c).astype(dtype),
    }


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (6, 4)])
@pytest.mark.parametrize("is_test", [False, True])
def test_forward_matches_reference(shape, is_test):
    ins = bn_inputs(shape)
    attrs = {"momentum": 0.8, "epsilon": 1e-3, "is_test": is_test}
    y, mean_out, var_out, saved_mean, saved_inv = ref_batch_norm(
        ins["X"], ins["Scale"], ins["Bias"], ins["Mean"], ins["Variance"], 0.8, 1e-3, is_test)
    check_output("batch_norm", ins, attrs,
                 {"Y": y, "MeanOut": mean_out, "VarianceOut": var_out, "SavedMean": saved_mean,
                  "SavedVariance": saved_inv}, rtol=1e-10, atol=1e-12)


def test_training_output_is_normalised_per_channel():
    ins = bn_inputs((4, 3, 5, 5))
    ins["Scale"][:] = 1.0
    ins["Bias"][:] = 0.0
    y = run("batch_norm", ins)["Y"]
    var = ins["X"].var(axis=(0, 2, 3))
    np.testing.assert_allclose(y.mean(axis=(0, 2, 3)), 0.0, atol=1e-12)
    np.testing.assert_allclose(y.var(axis=(0, 2, 3)), var / (var + EPS), rtol=1e-12)


def test_running_statistics_are_updated_in_place():
    ins = bn_inputs((3, 4, 3, 3), np.float32, seed=1)
    x_before = ins["X"].copy()
    mean0, var0 = ins["Mean"].copy(), ins["Variance"].copy()
    outs = rf.run_op("batch_norm", ins, {"momentum": 0.7})
    _, want_mean, want_var, _, _ = ref_batch_norm(
        ins["X"], ins["Scale"], ins["Bias"], mean0, var0, momentum=0.7
    )
    assert outs["MeanOut"] is ins["Mean"]
    assert outs["VarianceOut"] is ins["Variance"]
    np.testing.assert_allclose(ins["Mean"], want_mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ins["Variance"], want_var, rtol=1e-5)
    assert not np.allclose(ins["Mean"], mean0)  # the update did happen
    np.testing.assert_array_equal(ins["X"], x_before)  # and X was left alone


def test_is_test_uses_running_statistics_and_leaves_them():
    ins = bn_inputs((3, 4, 3, 3), np.float32, seed=2)
    mean0, var0 = ins["Mean"].copy(), ins["Variance"].copy()
    outs = rf.run_op("batch_norm", ins, {"is_test": True})
    want, *_ = ref_batch_norm(ins["X"], ins["Scale"], ins["Bias"], mean0, var0, is_test=True)
    np.testing.assert_allclose(outs["Y"], want, rtol=1e-5, atol=1e-5)
    assert outs["MeanOut"] is ins["Mean"] and outs["VarianceOut"] is ins["Variance"]
    np.testing.assert_array_equal(ins["Mean"], mean0)
    np.testing.assert_array_equal(ins["Variance"], var0)
    assert outs["SavedMean"] is not ins["Mean"]  # a copy: later updates of Mean cannot change it


def test_saved_variance_is_the_inverse_standard_deviation():
    ins = bn_inputs((4, 2, 3, 3))
    outs = run("batch_norm", ins, {"epsilon": 0.01})
    var = ins["X"].var(axis=(0, 2, 3))
    np.testing.assert_allclose(outs["SavedVariance"], 1.0 / np.sqrt(var + 0.01), rtol=1e-12)


def test_variance_is_two_pass_accurate_for_a_large_mean_in_float32():
    # Data around 1e4 with unit spread: x^2 ~ 1e8, where a float32 ulp is 8, so
    # E[x^2] - E[x]^2 loses the variance entirely; two passes keep it.
    ins = bn_inputs((8, 3, 16, 16), np.float32, seed=3)
    ins["X"] = (1e4 + np.random.default_rng(4).standard_normal((8, 3, 16, 16))).astype(np.float32)
    x64 = ins["X"].astype(np.float64)
    true_var = x64.var(axis=(0, 2, 3))
    x32 = ins["X"].reshape(8, 3, -1)
    one_pass = (x32 * x32).mean(axis=(0, 2)) - x32.mean(axis=(0, 2)) ** 2
    assert np.max(np.abs(one_pass / true_var - 1)) > 0.1  # the trap is real at this offset
    outs = run("batch_norm", ins, {"momentum": 0.0})
    np.testing.assert_allclose(outs["VarianceOut"], true_var, rtol=1e-3)
    np.testing.assert_allclose(outs["SavedVariance"], 1 / np.sqrt(true_var + EPS), rtol=1e-3)
    y = outs["Y"].astype(np.float64)
    want, *_ = ref_batch_norm(x64, ins["Scale"], ins["Bias"], ins["Mean"], ins["Variance"])
    np.testing.assert_allclose(y, want, atol=5e-3)


@pytest.mark.parametrize("shape", [(2, 3, 3, 4), (5, 3)])
def test_gradient(shape):
    check_grad(
        "batch_norm",
        bn_inputs(shape, seed=5),
        {"epsilon": 1e-3},
        wrt=["X", "Scale", "Bias"],
        rtol=1e-5,
        atol=1e-7,
    )


def test_gradient_outputs_dtype_and_values_in_float32():
    ins64 = bn_inputs((4, 3, 5, 5), seed=6)
    ins32 = {k: v.astype(np.float32) for k, v in ins64.items()}
    dy = np.random.default_rng(7).standard_normal((4, 3, 5, 5))
    grads = {}
    for name, ins, g in (("64", ins64, dy), ("32", ins32, dy.astype(np.float32))):
        fwd = run("batch_norm", ins)
        grads[name] = run(
            "batch_norm_grad",
            {
                "X": ins["X"],
                "Scale": ins["Scale"],
                "SavedMean": fwd["SavedMean"],
                "SavedVariance": fwd["SavedVariance"],
                "Y@GRAD": g,
            },
        )
    for slot in ("X@GRAD", "Scale@GRAD", "Bias@GRAD"):
        assert grads["32"][slot].dtype == np.float32, slot
        np.testing.assert_allclose(
            grads["32"][slot], grads["64"][slot], rtol=1e-4, atol=1e-4, err_msg=slot
        )


def test_float32_forward_agrees_with_float64():
    ins64 = bn_inputs((4, 8, 7, 7), seed=8)
    ins32 = {k: v.astype(np.float32) for k, v in ins64.items()}
    o32, o64 = run("batch_norm", ins32), run("batch_norm", ins64)
    for slot in ("Y", "MeanOut", "VarianceOut", "SavedMean", "SavedVariance"):
        assert o32[slot].dtype == np.float32, slot
        np.testing.assert_allclose(o32[slot], o64[slot], rtol=1e-5, atol=1e-5, err_msg=slot)


def test_gradient_op_keeps_only_what_backward_needs_and_shapes_chain():
    opdef = get_op_def("batch_norm")
    fwd = rf.Program()
    block = fwd.global_block()
    for name, shape in (("x", (-1, 3, 4, 4)), ("s", (3,)), ("b", (3,)), ("m", (3,)), ("v", (3,))):
        block.create_var(name=name, shape=shape)
    for name in ("y", "sm", "sv"):
        block.create_var(name=name)
    op = block.append_op(
        "batch_norm",
        {"X": "x", "Scale": "s", "Bias": "b", "Mean": "m", "Variance": "v"},
        {"Y": "y", "MeanOut": "m", "VarianceOut": "v", "SavedMean": "sm", "SavedVariance": "sv"},
    )
    (spec,) = opdef.grad(op)
    assert spec.type == "batch_norm_grad"
    assert spec.inputs == {"X": ["x"], "Scale": ["s"], "SavedMean": ["sm"], "SavedVariance": ["sv"],
                           "Y@GRAD": ["y@GRAD"]}
    assert spec.outputs == {"X@GRAD": ["x@GRAD"], "Scale@GRAD": ["s@GRAD"], "Bias@GRAD": ["b@GRAD"]}
    assert block.var("y").shape == (-1, 3, 4, 4)
    assert block.var("sm").shape == (3,) and block.var("sv").shape == (3,)


def test_infer_shape_and_cost():
    opdef = get_op_def("batch_norm")
    stats = [(64,)]
    shapes = {
        "X": [(-1, 64, 56, 56)],
        "Scale": stats,
        "Bias": stats,
        "Mean": stats,
        "Variance": stats,
    }
    out = opdef.infer_shape(shapes, opdef.complete_attrs({}))
    assert out == {
        "Y": [(-1, 64, 56, 56)],
        "MeanOut": stats,
        "VarianceOut": stats,
        "SavedMean": stats,
        "SavedVariance": stats,
    }
    with pytest.raises(
        rf.OpError, match=r"batch_norm: Scale must have shape \[64\] \(X's channels\), given \[32\]"
    ):
        opdef.infer_shape({**shapes, "Scale": [(32,)]}, opdef.complete_attrs({}))
    n, batch8 = 8 * 64 * 56 * 56, {**shapes, "X": [(8, 64, 56, 56)]}
    assert opdef.cost(batch8, opdef.complete_attrs({}), 4) == (6.0 * n, (2 * n + 8 * 64) * 4.0)
    assert opdef.cost(batch8, opdef.complete_attrs({"is_test": True}), 4)[0] == 2.0 * n
    grad = get_op_def("batch_norm_grad")
    gshapes = {"X": [(-1, 64, 56, 56)], "Scale": stats, "SavedMean": stats, "SavedVariance": stats,
               "Y@GRAD": [(-1, 64, 56, 56)]}
    assert grad.infer_shape(gshapes, grad.complete_attrs({})) == {
        "X@GRAD": [(-1, 64, 56, 56)], "Scale@GRAD": stats, "Bias@GRAD": stats}
    assert grad.cost({**gshapes, "X": [(8, 64, 56, 56)]}, grad.complete_attrs({}), 4) == (
        8.0 * n, (3 * n + 6 * 64) * 4.0)


def test_bad_inputs_and_attributes():
    ins = bn_inputs((2, 3, 4, 4), np.float32)
    with pytest.raises(
        rf.OpError, match=r"batch_norm: X must be 4-D NCHW or 2-D \[N, C\], given shape \[2, 3, 4\]"
    ):
        run("batch_norm", {**ins, "X": ins["X"][..., 0]})
    with pytest.raises(
        rf.OpError,
        match=r"batch_norm: Variance must have shape \[3\] \(X's channels\), given \[4\]",
    ):
        run("batch_norm", {**ins, "Variance": np.ones(4, np.float32)})
    with pytest.raises(
        rf.OpError, match=r"batch_norm: attribute 'momentum' expects a value in \[0, 1\], given 1.5"
    ):
        run("batch_norm", ins, {"momentum": 1.5})
    with pytest.raises(
        rf.OpError, match=r"batch_norm: attribute 'epsilon' expects a positive value, given 0.0"
    ):
        run("batch_norm", ins, {"epsilon": 0.0})
    with pytest.raises(
        rf.OpError, match=r"batch_norm: attribute 'is_test' expects a bool, given 'yes'"
    ):
        run("batch_norm", ins, {"is_test": "yes"})
    fwd = run("batch_norm", ins)
    with pytest.raises(
        rf.OpError,
        match=r"batch_norm_grad: Y@GRAD must have X's shape \[2, 3, 4, 4\], "
        r"given \[2, 3, 4, 5\]",
    ):
        run(
            "batch_norm_grad",
            {
                "X": ins["X"],
                "Scale": ins["Scale"],
                "SavedMean": fwd["SavedMean"],
                "SavedVariance": fwd["SavedVariance"],
                "Y@GRAD": np.ones((2, 3, 4, 5), np.float32),
            },
        )


@requires_gpu
def test_gpu_forward_backward_and_in_place_match_cpu():
    cp = cupy_or_none()
    ins = bn_inputs((4, 8, 6, 6), np.float32, seed=9)
    dev = {k: cp.asarray(v) for k, v in ins.items()}
    outs = rf.run_op("batch_norm", dev, place=rf.CUDAPlace(0))
    cpu = run("batch_norm", ins)
    assert outs["MeanOut"] is dev["Mean"] and outs["VarianceOut"] is dev["Variance"]
    for slot in ("Y", "MeanOut", "VarianceOut", "SavedMean", "SavedVariance"):
        np.testing.assert_allclose(
            to_host(outs[slot]), cpu[slot], rtol=1e-5, atol=1e-5, err_msg=slot
        )
    dy = np.random.default_rng(10).standard_normal(ins["X"].shape).astype(np.float32)
    g_in = {"X": ins["X"], "Scale": ins["Scale"], "SavedMean": cpu["SavedMean"],
            "SavedVariance": cpu["SavedVariance"], "Y@GRAD": dy}
    g_gpu = run("batch_norm_grad", g_in, place=rf.CUDAPlace(0))
    g_cpu = run("batch_norm_grad", g_in)
    for slot in ("X@GRAD", "Scale@GRAD", "Bias@GRAD"):
        np.testing.assert_allclose(g_gpu[slot], g_cpu[slot], rtol=1e-4, atol=1e-5, err_msg=slot)
