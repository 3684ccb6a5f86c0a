"""models.resnet: architecture (op counts, parameter counts, shapes), whole-network
gradients against finite differences, and that it learns (one batch; learning the
synthetic dataset is tested through the benchmark loop in test_benchmark.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import reference_framework as rf
from reference_framework import layers

from .grad_check import numeric_grad, sample_indices


def build(
    size: int = 32,
    class_dim: int = 102,
    depth: int = 50,
    stem_pool: str = "max",
    dtype: str = "float32",
    train: bool = False,
    lr: float = 0.01,
):
    """(main, startup, image, label, predict, loss) in fresh programs."""
    main, startup = rf.Program(), rf.Program()
    with rf.unique_name_guard(), rf.program_guard(main, startup):
        image = layers.data("data", [3, size, size], dtype)
        label = layers.data("label", [1], "int64")
        predict = rf.models.resnet(image, class_dim=class_dim, depth=depth, stem_pool=stem_pool)
        loss = layers.mean(layers.cross_entropy(predict, label))
        if train:
            rf.optimizer.Momentum(learning_rate=lr, momentum=0.9).minimize(loss)
    return main, startup, image, label, predict, loss


def counts(program: rf.Program) -> dict[str, int]:
    out: dict[str, int] = {}
    for op in program.global_block().ops:
        out[op.type] = out.get(op.type, 0) + 1
    return out


def test_resnet50_has_the_reference_reports_operators():
    main, startup, *_ = build()
    assert counts(main) == {
        "conv2d": 53,
        "batch_norm": 53,
        "relu": 49,
        "elementwise_add": 17,
        "pool2d": 2,
        "mul": 1,
        "softmax": 1,
        "cross_entropy": 1,
        "mean": 1,
    }
    assert counts(startup) == {
        "gaussian_random": 53,
        "uniform_random": 1,
        "fill_constant": 53 * 4 + 1,
    }
    assert len([p for p in main.global_block().all_parameters() if p.trainable]) == 161


# Parameter counts of the standard ImageNet models (1000 classes): conv and fc
# weights, fc bias, batch norm scale and bias.
PARAMETERS = {18: 11_689_512, 34: 21_797_672, 50: 25_557_032, 101: 44_549_160, 152: 60_192_808}


@pytest.mark.parametrize("depth", sorted(PARAMETERS))
def test_parameter_counts_are_the_standard_ones(depth):
    main, *_ = build(size=224, class_dim=1000, depth=depth)
    params = main.global_block().all_parameters()
    assert sum(math.prod(p.shape) for p in params) == PARAMETERS[depth]


@pytest.mark.parametrize(
    ("size", "stem_pool", "final"),
    [(32, "max", 1), (64, "max", 2), (224, "max", 7), (224, "avg", 7), (32, "avg", 1)],
)
def test_shapes_from_32_to_224(size, stem_pool, final):
    main, _, _, _, predict, _ = build(size=size, stem_pool=stem_pool)
    pools = [op for op in main.global_block().ops if op.type == "pool2d"]
    stem, head = pools
    assert stem.attrs["pooling_type"] == stem_pool and stem.attrs["ksize"] == [3, 3]
    assert stem.attrs["strides"] == [2, 2] and stem.attrs["paddings"] == (
        [1, 1] if stem_pool == "max" else [0, 0]
    )
    assert head.attrs["global_pooling"] and head.attrs["pooling_type"] == "avg"
    assert main.global_block().var(head.input("X")[0]).shape == (-1, 2048, final, final)
    assert predict.shape == (-1, 102)


def test_stage_stride_sits_on_the_bottlenecks_3x3_conv():
    main, *_ = build(size=64)
    convs = [op for op in main.global_block().ops if op.type == "conv2d"]
    filters = [main.global_block().var(op.input("Filter")[0]).shape for op in convs]
    strided = [
        (f[2], op.attrs["strides"][0])
        for op, f in zip(convs, filters, strict=True)
        if op.attrs["strides"] != [1, 1]
    ]
    # the stem (7x7), then per stage 2-4 the 3x3 conv and the 1x1 projection
    assert strided == [(7, 2), (3, 2), (1, 2), (3, 2), (1, 2), (3, 2), (1, 2)]
    # a projection is the second conv to read a block's input (the first is the 1x1 reduce)
    inputs = [op.input("Input")[0] for op in convs]
    projections = [
        f for i, (f, x) in enumerate(zip(filters, inputs, strict=True)) if inputs.index(x) != i
    ]
    assert [p[:3] for p in projections] == [
        (256, 64, 1),
        (512, 256, 1),
        (1024, 512, 1),
        (2048, 1024, 1),
    ]


@pytest.mark.parametrize("depth, convs", [(18, 20), (34, 36), (101, 104), (152, 155)])
def test_other_depths(depth, convs):
    main, *_ = build(size=32, depth=depth)
    assert counts(main)["conv2d"] == convs


def test_bad_arguments():
    with pytest.raises(
        ValueError, match=r"depth must be one of \[18, 34, 50, 101, 152\], given 42"
    ):
        build(depth=42)
    with pytest.raises(ValueError, match="stem_pool must be 'max' or 'avg', given 'min'"):
        build(stem_pool="min")


def test_whole_network_gradients_match_finite_differences():
    """ResNet-50 in float64 on four 32x32 images: parameters of every kind and the
    input image (whose gradient passes through every layer)."""
    main, startup, image, label, _, loss = build(size=32, dtype="float64")
    image.stop_gradient = False
    forward = main.clone()
    pairs = {p.name: g.name for p, g in rf.append_backward(loss)}
    params = [p.name for p in main.global_block().all_parameters()]
    convs = [n for n in params if n.startswith("conv2d")]
    scales = [n for n in params if n.startswith("batch_norm") and n.endswith(".w_0")]
    biases = [n for n in params if n.startswith("batch_norm") and n.endswith(".b_0")]
    fc_w, fc_b = [n for n in params if n.startswith("fc")]
    # The stem conv's weights move every activation of the network at once, so
    # some ReLU inputs cross zero within eps and blur its differences a little.
    rtol = {n: 1e-4 for n in [convs[26], scales[26], biases[26], fc_w, fc_b, "data"]}
    rtol[convs[0]] = 2e-2

    rng = np.random.default_rng(0)
    feed = {"data": rng.standard_normal((4, 3, 32, 32)), "label": np.array([[3], [40], [101], [0]])}
    with rf.scope_guard(rf.Scope()) as scope:
        exe = rf.Executor(rf.CPUPlace(), cache_ops=True)
        exe.run(startup)
        for name in (scales[26], biases[26]):  # off their 1 / 0 start, so nothing is special
            value = scope.find_var(name).value
            value[...] = rng.uniform(0.5, 1.5, value.shape)
        names = list(rtol)
        grads = exe.run(main, feed=feed, fetch_list=[pairs.get(n, "data@GRAD") for n in names])

        def run_loss() -> float:
            return float(
                exe.run(forward, feed=feed, fetch_list=[loss], use_program_cache=True)[0][0]
            )

        for name, got in zip(names, grads, strict=True):
            array = feed["data"] if name == "data" else scope.find_var(name).value
            assert got.shape == array.shape, name
            idx = sample_indices(array.size, 3, seed=len(name))
            want = numeric_grad(run_loss, array, idx, eps=1e-7)
            np.testing.assert_allclose(
                got.reshape(-1)[idx], want, rtol=rtol[name], atol=1e-9, err_msg=name
            )


def test_training_on_one_batch_halves_the_loss_within_25_steps():
    main, startup, image, label, predict, loss = build(size=32, train=True)
    data = next(rf.batch(rf.dataset.flowers.train(image_size=32, seed=0), batch_size=8)())
    feed = {"data": np.stack([x.reshape(3, 32, 32) for x, _ in data]),
            "label": np.array([[y] for _, y in data], dtype=np.int64)}
    with rf.scope_guard(rf.Scope()):
        exe = rf.Executor(rf.CPUPlace(), cache_ops=True, reuse_local_scope=True)
        exe.run(startup)
        losses = []
        for _ in range(25):
            losses.append(
                float(exe.run(main, feed=feed, fetch_list=[loss], use_program_cache=True)[0][0])
            )
            if losses[-1] < losses[0] / 2:
                break
    assert losses[-1] < losses[0] / 2, losses
