"""Layers: the ops, parameters and initialisers each emits, the shapes they
infer, and the values the small ones compute (against numpy)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import reference_framework as rf
from reference_framework import layers


@pytest.fixture
def progs():
    main, startup = rf.Program(), rf.Program()
    with rf.unique_name_guard(), rf.program_guard(main, startup), rf.scope_guard(rf.Scope()):
        yield main, startup


def types(program: rf.Program) -> list[str]:
    return [op.type for op in program.global_block().ops]


def run_startup(startup: rf.Program) -> rf.Scope:
    rf.Executor(rf.CPUPlace()).run(startup)
    return rf.global_scope()


def value(name: str) -> np.ndarray:
    return rf.global_scope().find_var(name).value


def test_data_prepends_the_batch_dim_and_stops_gradients(progs):
    x = layers.data("image", [3, 8, 8])
    assert x.shape == (-1, 3, 8, 8) and x.dtype == "float32" and x.stop_gradient
    y = layers.data("label", [1], "int64", append_batch_size=False)
    assert y.shape == (1,) and y.dtype == "int64"
    with pytest.raises(ValueError, match="already has a variable 'image'"):
        layers.data("image", [1])


def test_conv2d_emits_one_conv_and_a_seeded_normal_filter(progs):
    main, startup = progs
    x = layers.data("x", [3, 16, 16])
    y = layers.conv2d(x, num_filters=64, filter_size=7, stride=2, padding=3)
    assert types(main) == ["conv2d"]
    op = main.global_block().ops[0]
    assert (
        op.attrs["strides"] == [2, 2]
        and op.attrs["paddings"] == [3, 3]
        and op.attrs["dilations"] == [1, 1]
    )
    w = main.global_block().var(op.input("Filter")[0])
    assert isinstance(w, rf.Parameter) and w.trainable and w.shape == (64, 3, 7, 7)
    assert [p.name for p in main.global_block().all_parameters()] == [w.name]  # no bias
    assert y.shape == (-1, 64, 8, 8) and y.dtype == "float32"
    init, = startup.global_block().ops
    std = math.sqrt(2.0 / (7 * 7 * 3))
    assert init.type == "gaussian_random" and init.output("Out") == [w.name]
    assert (
        init.attrs["mean"] == 0.0
        and init.attrs["std"] == pytest.approx(std)
        and init.attrs["seed"] != 0
    )
    weights = run_startup(startup).find_var(w.name).value
    assert weights.shape == (64, 3, 7, 7) and weights.dtype == np.float32
    assert abs(weights.std() / std - 1) < 0.03 and abs(weights.mean()) < 0.03 * std


def test_conv2d_act_is_an_op_of_its_own(progs):
    main, _ = progs
    y = layers.conv2d(layers.data("x", [2, 6, 6]), 4, 3, padding=1, act="relu")
    assert types(main) == ["conv2d", "relu"] and y.shape == (-1, 4, 6, 6)


def test_batch_norm_parameters_state_and_activation(progs):
    main, startup = progs
    x = layers.data("x", [5, 4, 4])
    y = layers.batch_norm(x, act="relu")
    assert types(main) == ["batch_norm", "relu"]
    bn = main.global_block().ops[0]
    block = main.global_block()
    scale, bias = block.var(bn.input("Scale")[0]), block.var(bn.input("Bias")[0])
    mean, variance = block.var(bn.input("Mean")[0]), block.var(bn.input("Variance")[0])
    assert isinstance(scale, rf.Parameter) and isinstance(bias, rf.Parameter) and scale.trainable
    for state in (mean, variance):  # updated by the op itself, never by the optimizer
        assert not isinstance(state, rf.Parameter) and state.persistable and state.stop_gradient
    assert bn.output("MeanOut") == [mean.name] and bn.output("VarianceOut") == [variance.name]
    assert all(v.shape == (5,) for v in (scale, bias, mean, variance))
    assert (
        bn.attrs["is_test"] is False and bn.attrs["momentum"] == 0.9 and bn.attrs["epsilon"] == 1e-5
    )
    assert y.shape == (-1, 5, 4, 4)
    run_startup(startup)
    for var, fill in ((scale, 1.0), (bias, 0.0), (mean, 0.0), (variance, 1.0)):
        np.testing.assert_array_equal(value(var.name), np.full(5, fill, np.float32))


def test_pool2d_attributes_and_shapes(progs):
    main, _ = progs
    x = layers.data("x", [8, 16, 16])
    y = layers.pool2d(x, pool_size=3, pool_type="max", pool_stride=2, pool_padding=1)
    g = layers.pool2d(y, pool_type="avg", global_pooling=True)
    first, second = main.global_block().ops
    assert first.attrs["pooling_type"] == "max" and first.attrs["ksize"] == [3, 3]
    assert first.attrs["strides"] == [2, 2] and first.attrs["paddings"] == [1, 1]
    assert second.attrs["global_pooling"] is True and second.attrs["pooling_type"] == "avg"
    assert y.shape == (-1, 8, 8, 8) and g.shape == (-1, 8, 1, 1)
    with pytest.raises(ValueError, match="pool_type must be 'max' or 'avg', given 'min'"):
        layers.pool2d(x, 2, pool_type="min")


def test_fc_is_mul_plus_bias_plus_act_with_a_xavier_weight(progs):
    main, startup = progs
    x = layers.data("x", [16, 2, 2])
    y = layers.fc(x, size=10, act="softmax")
    assert types(main) == ["mul", "elementwise_add", "softmax"]
    mul, add, _ = main.global_block().ops
    assert (
        mul.attrs["x_num_col_dims"] == 1
        and mul.attrs["y_num_col_dims"] == 1
        and add.attrs["axis"] == 1
    )
    w, b = main.global_block().all_parameters()
    assert (
        w.shape == (64, 10)
        and b.shape == (10,)
        and mul.input("Y") == [w.name]
        and add.input("Y") == [b.name]
    )
    assert y.shape == (-1, 10)
    limit = math.sqrt(6.0 / (64 + 10))
    init_w, init_b = startup.global_block().ops
    assert init_w.type == "uniform_random" and init_w.attrs["min"] == pytest.approx(-limit)
    assert init_w.attrs["max"] == pytest.approx(limit) and init_w.attrs["seed"] != 0
    assert init_b.type == "fill_constant" and init_b.attrs["value"] == 0.0
    run_startup(startup)
    weights = value(w.name)
    assert np.abs(weights).max() <= limit and np.abs(weights).max() > 0.9 * limit
    np.testing.assert_array_equal(value(b.name), np.zeros(10, np.float32))


def test_fc_computes_x_times_w_plus_b(progs):
    main, startup = progs
    x = layers.data("x", [3], "float64")
    y = layers.fc(x, size=2)
    exe = rf.Executor(rf.CPUPlace())
    exe.run(startup)
    w, b = (value(p.name) for p in main.global_block().all_parameters())
    b[...] = [0.5, -1.0]
    xs = np.arange(6, dtype=np.float64).reshape(2, 3)
    out, = exe.run(main, feed={"x": xs}, fetch_list=[y])
    np.testing.assert_allclose(out, xs @ w + b, rtol=1e-12)


def test_layers_follow_the_input_dtype(progs):
    main, startup = progs
    x = layers.data("x", [2, 8, 8], "float64")
    y = layers.fc(layers.batch_norm(layers.conv2d(x, 4, 3)), 3)
    assert y.dtype == "float64"
    assert {p.dtype for p in main.global_block().all_parameters()} == {"float64"}
    assert {op.attrs["dtype"] for op in startup.global_block().ops} == {"float64"}


def test_cross_entropy_mean_and_accuracy_against_numpy(progs):
    main, startup = progs
    probs = layers.data("p", [4])
    label = layers.data("label", [1], "int64")
    loss = layers.mean(layers.cross_entropy(probs, label))
    acc = layers.accuracy(probs, label, k=2)
    assert types(main) == ["cross_entropy", "mean", "top_k", "accuracy"]
    assert loss.shape == (1,) and acc.shape == (1,)
    p = np.array([[0.1, 0.2, 0.3, 0.4], [0.7, 0.1, 0.1, 0.1], [0.25, 0.25, 0.4, 0.1]], np.float32)
    lab = np.array([[3], [3], [0]], np.int64)
    got_loss, got_acc = rf.Executor(rf.CPUPlace()).run(
        main, feed={"p": p, "label": lab}, fetch_list=[loss, acc]
    )
    np.testing.assert_allclose(got_loss, [-np.log(p[[0, 1, 2], [3, 3, 0]]).mean()], rtol=1e-6)
    np.testing.assert_allclose(
        got_acc, [2 / 3]
    )  # rows 0 and 2 have their label in the top 2, row 1 not


def test_small_layers_compute_what_they_say(progs):
    main, _ = progs
    x = layers.data("x", [3])
    y = layers.data("y", [3])
    total = layers.sums([x, y, x])
    ratio = layers.elementwise_div(x, y)
    ints = layers.cast(x, "int32")
    ones = layers.fill_constant([2, 2], "float64", 1.5)
    r = layers.relu(layers.elementwise_add(x, y))
    xs = np.array([[1.0, -2.0, 3.5]], np.float32)
    ys = np.array([[2.0, 4.0, -0.5]], np.float32)
    outs = rf.Executor(rf.CPUPlace()).run(
        main, feed={"x": xs, "y": ys}, fetch_list=[total, ratio, ints, ones, r]
    )
    np.testing.assert_allclose(outs[0], 2 * xs + ys)
    np.testing.assert_allclose(outs[1], xs / ys)
    assert outs[2].dtype == np.int32 and outs[2].tolist() == [[1, -2, 3]]
    np.testing.assert_array_equal(outs[3], np.full((2, 2), 1.5))
    np.testing.assert_allclose(outs[4], np.maximum(xs + ys, 0))


def test_names_are_unique_and_repeatable():
    def build() -> tuple[list[str], list[tuple]]:
        main, startup = rf.Program(), rf.Program()
        with rf.unique_name_guard(), rf.program_guard(main, startup):
            x = layers.data("x", [2, 8, 8])
            layers.conv2d(layers.conv2d(x, 4, 3), 4, 3)
        return list(main.global_block().vars), [
            tuple(op.attrs.items()) for op in startup.global_block().ops
        ]

    names, inits = build()
    assert len(names) == len(set(names))
    assert build() == (names, inits)  # same model, same names, same seeds
    seeds = [dict(a)["seed"] for a in inits]
    assert len(set(seeds)) == 2 and 0 not in seeds  # each layer its own stream


def test_random_seed_of_the_startup_program_changes_the_weights():
    def seeds(random_seed: int) -> list[int]:
        main, startup = rf.Program(), rf.Program()
        startup.random_seed = random_seed
        with rf.unique_name_guard(), rf.program_guard(main, startup):
            layers.conv2d(layers.data("x", [2, 8, 8]), 4, 3)
        return [op.attrs["seed"] for op in startup.global_block().ops]

    assert seeds(0) == seeds(0) and seeds(0) != seeds(1)


def test_bad_layer_arguments_are_errors(progs):
    x = layers.data("x", [3, 8, 8])
    with pytest.raises(ValueError, match="unknown activation 'gelu'"):
        layers.conv2d(x, 4, 3, act="gelu")
    with pytest.raises(ValueError, match=r"groups \(2\) must divide the input channels \(3\)"):
        layers.conv2d(x, 4, 3, groups=2)
    with pytest.raises(ValueError, match="filter_size takes an int or 2 ints"):
        layers.conv2d(x, 4, [3, 3, 3])
    with pytest.raises(ValueError, match="sums: needs at least one input"):
        layers.sums([])
