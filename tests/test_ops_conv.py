"""conv2d and conv2d_grad against a direct-loop numpy reference and finite differences."""

from __future__ import annotations

import numpy as np
import pytest

import reference_framework as rf
from pytest_opperf import timers
from reference_framework.ops.conv import conv2d_grad
from reference_framework.registry import KernelContext, OpError, get_op_def

from .op_test import check_grad, check_output, requires_gpu, run


def conv_reference(x: np.ndarray, w: np.ndarray, strides=(1, 1), paddings=(0, 0), dilations=(1, 1),
                   groups: int = 1) -> np.ndarray:
    """A loop over output positions: each output is the sum of its window times the filter."""
    n, c, h, wd = x.shape
    oc, cg, kh, kw = w.shape
    (sh, sw), (ph, pw), (dh, dw) = strides, paddings, dilations
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    xpad = np.zeros((n, c, h + 2 * ph, wd + 2 * pw), dtype=np.float64)
    xpad[:, :, ph:ph + h, pw:pw + wd] = x
    out = np.zeros((n, oc, oh, ow))
    per_group = oc // groups
    for o in range(oc):
        chans = slice(o // per_group * cg, (o // per_group + 1) * cg)
        for i in range(oh):
            for j in range(ow):
                window = xpad[
                    :,
                    chans,
                    i * sh : i * sh + dh * (kh - 1) + 1 : dh,
                    j * sw : j * sw + dw * (kw - 1) + 1 : dw,
                ]
                out[:, o, i, j] = np.sum(window * w[o], axis=(1, 2, 3))
    return out


# (Input shape, Filter shape, attrs): odd and non-square sizes, strides 1 and 2,
# padding, dilation 2, groups 2, 1x1 at stride 1 and 2 (the no-im2col path).
CASES = {
    "3x3": ((2, 3, 7, 9), (4, 3, 3, 3), {"paddings": [1, 1]}),
    "3x3-stride2": ((2, 3, 9, 7), (5, 3, 3, 3), {"strides": [2, 2], "paddings": [1, 1]}),
    "dilation2": ((1, 2, 9, 8), (3, 2, 3, 3), {"dilations": [2, 2], "paddings": [2, 1]}),
    "groups2": ((2, 4, 6, 7), (6, 2, 3, 3), {"groups": 2, "paddings": [1, 1]}),
    "non-square": (
        (2, 3, 8, 11),
        (4, 3, 2, 3),
        {"strides": [2, 1], "paddings": [0, 1], "dilations": [1, 2]},
    ),
    "1x1": ((2, 5, 6, 7), (4, 5, 1, 1), {}),
    "1x1-stride2": ((2, 5, 7, 6), (3, 5, 1, 1), {"strides": [2, 2]}),
    "1x1-stride2-groups": ((1, 4, 5, 5), (6, 2, 1, 1), {"strides": [2, 2], "groups": 2}),
    "1x1-padded": ((1, 3, 4, 5), (2, 3, 1, 1), {"paddings": [1, 0]}),
    "7x7-stem": ((1, 3, 15, 13), (4, 3, 7, 7), {"strides": [2, 2], "paddings": [3, 3]}),
    "kernel-fills-input": ((2, 2, 3, 3), (2, 2, 5, 5), {"paddings": [1, 1]}),
}


def _case(name: str, dtype=np.float64, seed: int = 0) -> tuple[np.ndarray, np.ndarray, dict]:
    x_shape, w_shape, attrs = CASES[name]
    rng = np.random.default_rng(seed)
    return (
        rng.standard_normal(x_shape).astype(dtype),
        rng.standard_normal(w_shape).astype(dtype),
        attrs,
    )


def _reference(x: np.ndarray, w: np.ndarray, attrs: dict) -> np.ndarray:
    return conv_reference(x, w, attrs.get("strides", (1, 1)), attrs.get("paddings", (0, 0)),
                          attrs.get("dilations", (1, 1)), attrs.get("groups", 1))


@pytest.mark.parametrize("name", CASES)
def test_conv2d_matches_direct_loops(name):
    x, w, attrs = _case(name)
    check_output("conv2d", {"Input": x, "Filter": w}, attrs, {"Output": _reference(x, w, attrs)},
                 rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", CASES)
def test_conv2d_float32_stays_close_to_float64(name):
    x, w, attrs = _case(name, np.float32)
    got = run("conv2d", {"Input": x, "Filter": w}, attrs)["Output"]
    assert got.dtype == np.float32
    # float32 sums of at most 147 products of unit-normal values
    np.testing.assert_allclose(got, _reference(x, w, attrs), rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("name", CASES)
def test_conv2d_gradients_match_finite_differences(name):
    x, w, attrs = _case(name)
    check_grad(
        "conv2d",
        {"Input": x, "Filter": w},
        attrs,
        wrt=["Input", "Filter"],
        rtol=1e-6,
        atol=1e-8,
        max_elements=150,
    )


@pytest.mark.parametrize("name", ["3x3-stride2", "groups2", "1x1-stride2"])
def test_conv2d_grad_float32_stays_close_to_float64(name):
    x, w, attrs = _case(name)
    dy = np.random.default_rng(3).standard_normal(_reference(x, w, attrs).shape)
    ins = {"Input": x, "Filter": w, "Output@GRAD": dy}
    want = run("conv2d_grad", ins, attrs)
    got = run("conv2d_grad", {k: v.astype(np.float32) for k, v in ins.items()}, attrs)
    for slot in ("Input@GRAD", "Filter@GRAD"):
        assert got[slot].dtype == np.float32
        np.testing.assert_allclose(got[slot], want[slot], rtol=1e-4, atol=1e-4, err_msg=slot)


def _grad_only(wanted: str, x, w, dy, attrs) -> dict:
    ctx = KernelContext(rf.CPUPlace(), np, "conv2d_grad", frozenset({wanted}))
    return conv2d_grad(
        {"Input": x, "Filter": w, "Output@GRAD": dy},
        get_op_def("conv2d_grad").complete_attrs(attrs),
        ctx,
    )


@pytest.mark.parametrize("wanted", ["Input@GRAD", "Filter@GRAD"])
def test_conv2d_grad_computes_only_the_wanted_gradient(wanted):
    x, w, attrs = _case("groups2")
    dy = np.random.default_rng(1).standard_normal(_reference(x, w, attrs).shape)
    both = run("conv2d_grad", {"Input": x, "Filter": w, "Output@GRAD": dy}, attrs)
    with timers.recording() as table:
        outs = _grad_only(wanted, x, w, dy, attrs)
    assert list(outs) == [wanted]
    np.testing.assert_allclose(outs[wanted], both[wanted], rtol=1e-12)
    # groups=2: one GEMM per group, for the wanted gradient only; col2im only for Input@GRAD
    assert table["GemmTimer"].count == 2
    assert ("Col2ImTimer" in table) == (wanted == "Input@GRAD")
    assert ("Im2ColTimer" in table) == (wanted == "Filter@GRAD")


def test_the_grad_op_reads_input_and_filter_but_not_output():
    main, startup = rf.Program(), rf.Program()
    with rf.program_guard(main, startup):
        block = main.global_block()
        block.create_var(name="image", shape=[-1, 3, 9, 9], dtype="float32")
        block.create_var(name="w", shape=[4, 3, 3, 3], dtype="float32")
        block.create_var(name="y")
        op = block.append_op(
            type="conv2d", inputs={"Input": ["image"], "Filter": ["w"]}, outputs={"Output": ["y"]}
        )
    (spec,) = get_op_def("conv2d").grad(op)
    assert spec.type == "conv2d_grad"
    assert spec.inputs == {
        "Input": ["image"],
        "Filter": ["w"],
        "Output@GRAD": ["y@GRAD"],
    }  # not Output
    assert spec.outputs == {"Input@GRAD": ["image@GRAD"], "Filter@GRAD": ["w@GRAD"]}


def test_timers_nest_inside_the_op():
    x, w, attrs = _case("groups2", np.float32)
    dy = np.ones((2, 6, 6, 7), np.float32)
    with timers.recording() as table:
        rf.run_op("conv2d", {"Input": x, "Filter": w}, attrs)
        rf.run_op("conv2d_grad", {"Input": x, "Filter": w, "Output@GRAD": dy}, attrs)
    assert table["conv2d"].count == table["conv2d_grad"].count == 1
    # each op's nested timers are its own: 2 groups x 1 GEMM forward, x 2 GEMMs backward
    counts = {name: (s.parent, s.count) for name, s in table.items() if "/" in name}
    assert counts == {
        "conv2d/Im2ColTimer": ("conv2d", 1),
        "conv2d/GemmTimer": ("conv2d", 2),
        "conv2d_grad/Im2ColTimer": ("conv2d_grad", 1),
        "conv2d_grad/GemmTimer": ("conv2d_grad", 4),
        "conv2d_grad/Col2ImTimer": ("conv2d_grad", 1),
    }
    assert all(table[name].kernel for name in counts)
    for op in ("conv2d", "conv2d_grad"):
        assert sum(s.total_ms for n, s in table.items() if s.parent == op) <= table[op].total_ms
    # nested stats are not counted twice in kernel time
    assert table.kernel_ms() == pytest.approx(
        table["conv2d"].total_ms + table["conv2d_grad"].total_ms
    )


@pytest.mark.parametrize("name", ["3x3", "1x1"])
def test_results_are_fresh_arrays_and_inputs_stay_untouched(name):
    # the column matrix and GEMM output are reused scratch memory: nothing
    # returned may be a view of it, whatever runs next
    x, w, attrs = _case(name, np.float32)
    x1 = x[:1].copy()  # batch 1: the transposed GEMM output is already contiguous
    dy = np.ones(_reference(x1, w, attrs).shape, np.float32)
    keep = (x1.copy(), w.copy(), dy.copy())
    y = rf.run_op("conv2d", {"Input": x1, "Filter": w}, attrs)["Output"]
    grads = rf.run_op("conv2d_grad", {"Input": x1, "Filter": w, "Output@GRAD": dy}, attrs)
    saved = [y.copy(), grads["Input@GRAD"].copy(), grads["Filter@GRAD"].copy()]
    other = np.full_like(x1, 7.0)
    rf.run_op("conv2d", {"Input": other, "Filter": w}, attrs)
    rf.run_op(
        "conv2d_grad",
        {"Input": other, "Filter": w * 3, "Output@GRAD": np.full_like(dy, 2.0)},
        attrs,
    )
    for got, want in zip([y, grads["Input@GRAD"], grads["Filter@GRAD"]], saved, strict=True):
        np.testing.assert_array_equal(got, want)
    for got, want in zip((x1, w, dy), keep, strict=True):
        np.testing.assert_array_equal(got, want)


def test_infer_shape_passes_the_batch_dim_through_and_layers_can_chain():
    main, startup = rf.Program(), rf.Program()
    with rf.program_guard(main, startup):
        block = main.global_block()
        block.create_var(name="x", shape=[-1, 3, 224, 224], dtype="float32")
        block.create_var(name="w1", shape=[64, 3, 7, 7], dtype="float32")
        block.create_var(name="w2", shape=[64, 64, 3, 3], dtype="float32")
        for name in ("y1", "y2"):
            block.create_var(name=name)
        block.append_op(
            type="conv2d",
            inputs={"Input": ["x"], "Filter": ["w1"]},
            outputs={"Output": ["y1"]},
            attrs={"strides": [2, 2], "paddings": [3, 3]},
        )
        block.append_op(
            type="conv2d",
            inputs={"Input": ["y1"], "Filter": ["w2"]},
            outputs={"Output": ["y2"]},
            attrs={"strides": [2, 2], "paddings": [1, 1], "dilations": [2, 2]},
        )
    assert tuple(block.var("y1").shape) == (-1, 64, 112, 112)
    assert tuple(block.var("y2").shape) == (-1, 64, 55, 55)  # (112 + 2 - 2*2 - 1) // 2 + 1
    grad_shapes = get_op_def("conv2d_grad").infer_shape(
        {
            "Input": [(-1, 3, 224, 224)],
            "Filter": [(64, 3, 7, 7)],
            "Output@GRAD": [(-1, 64, 112, 112)],
        },
        {"strides": [2, 2], "paddings": [3, 3], "dilations": [1, 1], "groups": 1},
    )
    assert grad_shapes == {"Input@GRAD": [(-1, 3, 224, 224)], "Filter@GRAD": [(64, 3, 7, 7)]}


def test_cost_counts_the_gemm_flops_and_the_bytes_moved():
    attrs = {"strides": [2, 2], "paddings": [1, 1], "dilations": [1, 1], "groups": 2}
    shapes = {"Input": [(8, 4, 9, 9)], "Filter": [(6, 2, 3, 3)]}
    flops, moved = get_op_def("conv2d").cost(shapes, attrs, 4)
    # output 8 x 6 x 5 x 5; each output: C/groups * kh * kw = 18 multiply-adds
    assert flops == 2 * 8 * 6 * 5 * 5 * 2 * 3 * 3
    assert moved == (8 * 4 * 9 * 9 + 6 * 2 * 3 * 3 + 8 * 6 * 5 * 5) * 4
    gflops, gmoved = get_op_def("conv2d_grad").cost(
        {**shapes, "Output@GRAD": [(8, 6, 5, 5)]}, attrs, 4
    )
    assert gflops == 2 * flops
    assert gmoved == (2 * 8 * 4 * 9 * 9 + 2 * 6 * 2 * 3 * 3 + 8 * 6 * 5 * 5) * 4


BAD_ATTRS = [
    ({"strides": [0, 1]}, "conv2d: attribute 'strides' expects 2 ints each >= 1, given [0, 1]"),
    ({"strides": [-2, 1]}, "conv2d: attribute 'strides' expects 2 ints each >= 1, given [-2, 1]"),
    ({"paddings": [1, -1]}, "conv2d: attribute 'paddings' expects 2 ints each >= 0, given [1, -1]"),
    ({"dilations": [0, 1]}, "conv2d: attribute 'dilations' expects 2 ints each >= 1, given [0, 1]"),
    ({"groups": 0}, "conv2d: attribute 'groups' expects an int >= 1, given 0"),
    (
        {"strides": [1, 1, 1]},
        "conv2d: attribute 'strides' expects 2 ints each >= 1, given [1, 1, 1]",
    ),
]


@pytest.mark.parametrize("attrs, message", BAD_ATTRS)
def test_bad_attribute_values_are_refused(attrs, message):
    x, w, _ = _case("3x3")
    with pytest.raises(OpError) as info:
        rf.run_op("conv2d", {"Input": x, "Filter": w}, attrs)
    assert str(info.value) == message
    with pytest.raises(OpError, match="conv2d_grad: attribute"):
        rf.run_op(
            "conv2d_grad", {"Input": x, "Filter": w, "Output@GRAD": np.ones((2, 4, 7, 9))}, attrs
        )


BAD_SHAPES = [
    (
        (1, 3, 5, 5),
        (4, 2, 3, 3),
        {},
        "conv2d: Filter.shape[1] * groups must equal Input's channels 3, given 2 * 1 = 2 "
        "(Input [1, 3, 5, 5], Filter [4, 2, 3, 3])",
    ),
    (
        (1, 4, 5, 5),
        (3, 2, 3, 3),
        {"groups": 2},
        "conv2d: Filter's output channels must be divisible by attribute 'groups', "
        "given 3 output channels and groups=2",
    ),
    (
        (1, 1, 3, 4),
        (1, 1, 5, 3),
        {"paddings": [0, 0]},
        "conv2d: the kernel height (dilated: 5) must not exceed the padded input height 3, "
        "given Filter [1, 1, 5, 3], Input [1, 1, 3, 4], paddings [0, 0], dilations [1, 1]",
    ),
    (
        (1, 1, 6, 6),
        (1, 1, 3, 3),
        {"dilations": [1, 4]},
        "conv2d: the kernel width (dilated: 9) must not exceed the padded input width 6, "
        "given Filter [1, 1, 3, 3], Input [1, 1, 6, 6], paddings [0, 0], dilations [1, 4]",
    ),
    (
        (1, 3, 5, 5, 1),
        (1, 3, 3, 3),
        {},
        "conv2d: Input must be 4-D [N, C, H, W], given shape [1, 3, 5, 5, 1]",
    ),
]


@pytest.mark.parametrize("x_shape, w_shape, attrs, message", BAD_SHAPES)
def test_mismatched_shapes_are_refused_when_running(x_shape, w_shape, attrs, message):
    with pytest.raises(OpError) as info:
        rf.run_op("conv2d", {"Input": np.ones(x_shape), "Filter": np.ones(w_shape)}, attrs)
    assert str(info.value) == message


@pytest.mark.parametrize("x_shape, w_shape, attrs, message", BAD_SHAPES)
def test_mismatched_shapes_are_refused_when_building_the_program(x_shape, w_shape, attrs, message):
    main, startup = rf.Program(), rf.Program()
    with rf.program_guard(main, startup):
        block = main.global_block()
        block.create_var(name="x", shape=[-1, *x_shape[1:]], dtype="float32")
        block.create_var(name="w", shape=list(w_shape), dtype="float32")
        block.create_var(name="y")
        with pytest.raises(OpError) as info:
            block.append_op(
                type="conv2d",
                inputs={"Input": ["x"], "Filter": ["w"]},
                outputs={"Output": ["y"]},
                attrs=attrs,
            )
    # the batch dimension is unknown (-1) while building
    assert str(info.value) == message.replace("Input [1, ", "Input [-1, ").replace(
        "shape [1, ", "shape [-1, "
    )


def test_grad_refuses_an_output_gradient_of_the_wrong_shape_or_dtype():
    x, w, attrs = _case("3x3")
    with pytest.raises(OpError) as info:
        rf.run_op(
            "conv2d_grad", {"Input": x, "Filter": w, "Output@GRAD": np.ones((2, 4, 7, 8))}, attrs
        )
    assert str(info.value) == (
        "conv2d_grad: Output@GRAD must be float64 of the output's shape [2, 4, 7, 9], "
        "given float64 of shape [2, 4, 7, 8]"
    )
    with pytest.raises(OpError, match="given float32 of shape"):
        rf.run_op(
            "conv2d_grad",
            {"Input": x, "Filter": w, "Output@GRAD": np.ones((2, 4, 7, 9), np.float32)},
            attrs,
        )


def test_mixed_dtypes_are_refused():
    x, w, attrs = _case("3x3")
    with pytest.raises(OpError) as info:
        rf.run_op("conv2d", {"Input": x.astype(np.float32), "Filter": w}, attrs)
    assert str(info.value) == "conv2d: Filter must have Input's dtype float32, given float64"


# GPU variants: the raw im2col/col2im kernels and cuBLAS against the same references.

@requires_gpu
@pytest.mark.parametrize("name", CASES)
def test_conv2d_on_gpu_matches_direct_loops(name):
    x, w, attrs = _case(name)
    check_output("conv2d", {"Input": x, "Filter": w}, attrs, {"Output": _reference(x, w, attrs)},
                 rtol=1e-10, atol=1e-12, place=rf.CUDAPlace(0))


@requires_gpu
@pytest.mark.parametrize("name", CASES)
def test_conv2d_grad_on_gpu_matches_the_checked_cpu_gradients(name):
    x, w, attrs = _case(name)
    dy = np.random.default_rng(2).standard_normal(_reference(x, w, attrs).shape)
    ins = {"Input": x, "Filter": w, "Output@GRAD": dy}
    want = run("conv2d_grad", ins, attrs)
    got = run("conv2d_grad", ins, attrs, place=rf.CUDAPlace(0))
    for slot in ("Input@GRAD", "Filter@GRAD"):
        np.testing.assert_allclose(got[slot], want[slot], rtol=1e-10, atol=1e-12, err_msg=slot)


@requires_gpu
def test_conv2d_float32_on_gpu_stays_close_to_float64():
    x, w, attrs = _case("3x3-stride2", np.float32)
    got = run("conv2d", {"Input": x, "Filter": w}, attrs, place=rf.CUDAPlace(0))["Output"]
    assert got.dtype == np.float32
    # loose enough for TF32 GEMMs (CUPY_TF32=1): 10-bit mantissas, 27-term sums
    np.testing.assert_allclose(got, _reference(x, w, attrs), rtol=1e-2, atol=1e-2)
