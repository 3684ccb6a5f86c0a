"""The ops together in a program: shapes chain from a -1 batch, gradient makers wire
up, and a few momentum steps train a small batch_norm/relu/fc/softmax classifier."""

from __future__ import annotations

import numpy as np
import pytest

import reference_framework as rf
from reference_framework.registry import get_op_def

PARAMS = {"scale": (3,), "bias": (3,), "w": (48, 5), "b": (5,)}
STATS = {"bn_mean": (3,), "bn_var": (3,)}
N_FORWARD_TRAINED = 7  # the ops before top_k/accuracy, which have no gradient


def build(dtype: str, train: bool) -> rf.Program:
    main = rf.Program()
    block = main.global_block()
    x = block.create_var("x", shape=[-1, 3, 4, 4], dtype=dtype)
    label = block.create_var("label", shape=[-1, 1], dtype="int64")
    for name, shape in {**PARAMS, **STATS}.items():
        block.create_parameter(name, shape, dtype, trainable=name in PARAMS)
    v = {n: block.create_var(n, dtype=dtype) for n in
         ("bn_y", "bn_sm", "bn_sv", "h", "z", "logits", "p", "ce", "loss", "top_v", "top_i", "acc")}
    for n in ("correct", "total"):
        v[n] = block.create_var(n, dtype="int64")
    block.append_op(
        "batch_norm",
        {"X": x, "Scale": "scale", "Bias": "bias", "Mean": "bn_mean", "Variance": "bn_var"},
        {
            "Y": v["bn_y"],
            "MeanOut": "bn_mean",
            "VarianceOut": "bn_var",
            "SavedMean": v["bn_sm"],
            "SavedVariance": v["bn_sv"],
        },
    )
    block.append_op("relu", {"X": v["bn_y"]}, {"Out": v["h"]})
    block.append_op("mul", {"X": v["h"], "Y": "w"}, {"Out": v["z"]})
    block.append_op("elementwise_add", {"X": v["z"], "Y": "b"}, {"Out": v["logits"]}, {"axis": 1})
    block.append_op("softmax", {"X": v["logits"]}, {"Out": v["p"]})
    block.append_op("cross_entropy", {"X": v["p"], "Label": label}, {"Y": v["ce"]})
    block.append_op("mean", {"X": v["ce"]}, {"Out": v["loss"]})
    block.append_op("top_k", {"X": v["p"]}, {"Out": v["top_v"], "Indices": v["top_i"]}, {"k": 1})
    block.append_op("accuracy", {"Out": v["top_v"], "Indices": v["top_i"], "Label": label},
                    {"Accuracy": v["acc"], "Correct": v["correct"], "Total": v["total"]})
    if train:
        append_backward_and_momentum(block, dtype)
    return main


def append_backward_and_momentum(block, dtype: str) -> None:
    forward = block.ops[:N_FORWARD_TRAINED]
    block.create_var("loss@GRAD", dtype=dtype)
    block.append_op(
        "fill_constant", {}, {"Out": "loss@GRAD"}, {"shape": [1], "value": 1.0, "dtype": dtype}
    )
    for op in reversed(forward):
        for spec in get_op_def(op.type).grad(op):
            for names in spec.outputs.values():
                for n in names:
                    block.create_var(n, dtype=dtype)
            block.append_op(spec.type, spec.inputs, spec.outputs, spec.attrs)
    block.create_parameter("lr", (1,), dtype, trainable=False)
    for name in PARAMS:
        block.create_parameter(name + "_vel", PARAMS[name], dtype, trainable=False)
        block.append_op(
            "momentum",
            {
                "Param": name,
                "Grad": name + "@GRAD",
                "Velocity": name + "_vel",
                "LearningRate": "lr",
            },
            {"ParamOut": name, "VelocityOut": name + "_vel"},
            {"mu": 0.9},
        )


def fresh_scope(dtype: str, seed: int = 0) -> rf.Scope:
    rng = np.random.default_rng(seed)
    scope = rf.Scope()
    values = {
        "scale": np.ones(3),
        "bias": np.zeros(3),
        "w": rng.standard_normal((48, 5)) * 0.2,
        "b": np.zeros(5),
        "bn_mean": np.zeros(3),
        "bn_var": np.ones(3),
        "lr": np.array([0.1]),
    }
    values.update({n + "_vel": np.zeros(s) for n, s in PARAMS.items()})
    for name, value in values.items():
        scope.var(name).value = value.astype(dtype)
    return scope


def batch(dtype: str, n: int = 8, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    label = rng.integers(0, 5, (n, 1))
    x = rng.standard_normal((n, 3, 4, 4)) + label.reshape(n, 1, 1, 1) * np.linspace(
        -1, 1, 48
    ).reshape(1, 3, 4, 4)
    return {"x": x.astype(dtype), "label": label.astype(np.int64)}


def test_shapes_chain_from_a_batch_dimension():
    block = build("float32", train=True).global_block()
    want = {
        "bn_y": (-1, 3, 4, 4),
        "bn_sm": (3,),
        "h": (-1, 3, 4, 4),
        "z": (-1, 5),
        "logits": (-1, 5),
        "p": (-1, 5),
        "ce": (-1, 1),
        "loss": (1,),
        "top_v": (-1, 1),
        "top_i": (-1, 1),
        "acc": (1,),
        "correct": (1,),
        "w@GRAD": (48, 5),
        "b@GRAD": (5,),
        "scale@GRAD": (3,),
        "h@GRAD": (-1, 3, 4, 4),
        "p@GRAD": (-1, 5),
        "logits@GRAD": (-1, 5),
        "x@GRAD": (-1, 3, 4, 4),
    }
    assert {n: block.var(n).shape for n in want} == want


def test_first_step_updates_parameters_in_place_with_the_gradient():
    program, scope = build("float64", train=True), fresh_scope("float64")
    w, vel = scope.find_var("w").value, scope.find_var("w_vel").value
    w0 = w.copy()
    loss, grad = rf.Executor(rf.CPUPlace()).run(
        program, feed=batch("float64"), fetch_list=["loss", "w@GRAD"], scope=scope
    )
    assert scope.find_var("w").value is w and scope.find_var("w_vel").value is vel
    np.testing.assert_allclose(vel, grad, rtol=1e-12)  # v = 0.9 * 0 + g
    np.testing.assert_allclose(w, w0 - 0.1 * grad, rtol=1e-12)
    assert not np.allclose(scope.find_var("bn_mean").value, 0.0)  # running statistics moved


@pytest.mark.parametrize("param", ["w", "b", "scale", "bias"])
def test_program_gradients_match_finite_differences(param):
    train, forward = build("float64", train=True), build("float64", train=False)
    feed = batch("float64", seed=2)
    scope = fresh_scope("float64", seed=3)
    scope.find_var("lr").value = np.zeros(1)  # keep the parameters where they are
    exe = rf.Executor(rf.CPUPlace())
    (grad,) = exe.run(train, feed=feed, fetch_list=[param + "@GRAD"], scope=scope)
    value = scope.find_var(param).value
    flat = value.reshape(-1)
    for i in np.random.default_rng(4).choice(flat.size, min(6, flat.size), replace=False):
        saved = flat[i]
        losses = []
        for delta in (1e-6, -1e-6):
            flat[i] = saved + delta
            losses.append(exe.run(forward, feed=feed, fetch_list=["loss"], scope=scope)[0][0])
        flat[i] = saved
        np.testing.assert_allclose(
            grad.reshape(-1)[i], (losses[0] - losses[1]) / 2e-6, rtol=1e-5, atol=1e-8
        )


def test_a_few_momentum_steps_learn_the_batch():
    program, scope = build("float32", train=True), fresh_scope("float32")
    exe, feed = rf.Executor(rf.CPUPlace()), batch("float32")
    history = [
        exe.run(program, feed=feed, fetch_list=["loss", "acc"], scope=scope) for _ in range(30)
    ]
    first, last = history[0], history[-1]
    assert last[0].dtype == np.float32
    assert last[0][0] < 0.25 * first[0][0]
    assert last[1][0] == 1.0
