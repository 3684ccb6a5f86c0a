"""pool2d and pool2d_grad against direct-loop numpy references and finite differences."""

from __future__ import annotations

import numpy as np
import pytest

import reference_framework as rf
from reference_framework.registry import OpError, get_op_def

from .op_test import check_grad, check_output, requires_gpu, run


def _windows(x_shape, ksize, strides, paddings, global_pooling=False):
    """Yield (oy, ox, rows, cols): each output position and the real cells of its window."""
    h, w = x_shape[2:]
    if global_pooling:
        ksize, strides, paddings = (h, w), (1, 1), (0, 0)
    (kh, kw), (sh, sw), (ph, pw) = ksize, strides, paddings
    oh, ow = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    for oy in range(oh):
        for ox in range(ow):
            y0, x0 = oy * sh - ph, ox * sw - pw
            yield oy, ox, slice(max(y0, 0), min(y0 + kh, h)), slice(max(x0, 0), min(x0 + kw, w))


def _window_attrs(attrs):
    return {
        "ksize": attrs.get("ksize"),
        "strides": attrs.get("strides", (1, 1)),
        "paddings": attrs.get("paddings", (0, 0)),
        "global_pooling": attrs.get("global_pooling", False),
    }


def _out_hw(x_shape, attrs):
    cells = list(_windows(x_shape, **_window_attrs(attrs)))
    return cells[-1][0] + 1, cells[-1][1] + 1


def pool_reference(x: np.ndarray, attrs: dict) -> np.ndarray:
    """Max or mean of each window's real cells (padding never counts)."""
    reduce = np.max if attrs.get("pooling_type", "max") == "max" else np.mean
    out = np.zeros((*x.shape[:2], *_out_hw(x.shape, attrs)))
    for oy, ox, rows, cols in _windows(x.shape, **_window_attrs(attrs)):
        out[:, :, oy, ox] = reduce(x[:, :, rows, cols], axis=(2, 3))
    return out


def pool_grad_reference(x: np.ndarray, dout: np.ndarray, attrs: dict) -> np.ndarray:
    """Max: each window's gradient to its first maximum in row-major order.
    Avg: shared equally by the window's real cells."""
    dx = np.zeros_like(x, dtype=np.float64)
    for oy, ox, rows, cols in _windows(x.shape, **_window_attrs(attrs)):
        for n in range(x.shape[0]):
            for c in range(x.shape[1]):
                window = x[n, c, rows, cols]
                g = dout[n, c, oy, ox]
                if attrs.get("pooling_type", "max") == "max":
                    i, j = np.unravel_index(
                        np.argmax(window), window.shape
                    )  # argmax: the first maximum
                    dx[n, c, rows.start + i, cols.start + j] += g
                else:
                    dx[n, c, rows, cols] += g / window.size
    return dx


CASES = {
    "resnet-3x3s2p1": ((2, 3, 9, 11), {"ksize": [3, 3], "strides": [2, 2], "paddings": [1, 1]}),
    "2x2s2": ((2, 2, 7, 8), {"ksize": [2, 2], "strides": [2, 2]}),
    "overlapping-3x3s1p1": ((1, 2, 5, 6), {"ksize": [3, 3], "strides": [1, 1], "paddings": [1, 1]}),
    "non-square": ((2, 2, 9, 7), {"ksize": [3, 2], "strides": [2, 1], "paddings": [1, 0]}),
    "odd-leftover": (
        (1, 3, 8, 8),
        {"ksize": [3, 3], "strides": [3, 2]},
    ),  # floor drops the last rows
    "global": ((2, 3, 5, 7), {"ksize": [1, 1], "global_pooling": True}),
}


def _case(name: str, pooling_type: str, dtype=np.float64, seed: int = 0) -> tuple[np.ndarray, dict]:
    x_shape, attrs = CASES[name]
    return np.random.default_rng(seed).standard_normal(x_shape).astype(dtype), {
        **attrs,
        "pooling_type": pooling_type,
    }


both_types = pytest.mark.parametrize("pooling_type", ["max", "avg"])


@both_types
@pytest.mark.parametrize("name", CASES)
def test_pool2d_matches_direct_loops(name, pooling_type):
    x, attrs = _case(name, pooling_type)
    check_output(
        "pool2d", {"X": x}, attrs, {"Out": pool_reference(x, attrs)}, rtol=1e-12, atol=1e-14
    )


@both_types
@pytest.mark.parametrize("name", CASES)
def test_pool2d_gradient_matches_finite_differences(name, pooling_type):
    x, attrs = _case(name, pooling_type)
    check_grad("pool2d", {"X": x}, attrs, wrt=["X"], rtol=1e-6, atol=1e-8, max_elements=None)


@both_types
@pytest.mark.parametrize("name", CASES)
def test_pool2d_gradient_matches_direct_loops(name, pooling_type):
    x, attrs = _case(name, pooling_type)
    out = pool_reference(x, attrs)
    dout = np.random.default_rng(5).standard_normal(out.shape)
    got = run("pool2d_grad", {"X": x, "Out": out, "Out@GRAD": dout}, attrs)["X@GRAD"]
    np.testing.assert_allclose(got, pool_grad_reference(x, dout, attrs), rtol=1e-12, atol=1e-14)


@both_types
def test_pool2d_float32_stays_float32_and_close_to_float64(pooling_type):
    x, attrs = _case("resnet-3x3s2p1", pooling_type, np.float32)
    out = run("pool2d", {"X": x}, attrs)["Out"]
    assert out.dtype == np.float32
    np.testing.assert_allclose(
        out, pool_reference(x.astype(np.float64), attrs), rtol=1e-6, atol=1e-6
    )
    dx = run("pool2d_grad", {"X": x, "Out": out, "Out@GRAD": np.ones_like(out)}, attrs)["X@GRAD"]
    assert dx.dtype == np.float32
    want = pool_grad_reference(x, np.ones(out.shape), attrs)
    np.testing.assert_allclose(dx, want, rtol=1e-6, atol=1e-6)


def test_max_gradient_goes_to_the_first_maximum_of_a_tie():
    # every cell equal: each 2x2 window (stride 1) sends its gradient to its top-left cell
    x = np.ones((1, 1, 3, 3))
    attrs = {"ksize": [2, 2], "strides": [1, 1]}
    out = run("pool2d", {"X": x}, attrs)["Out"]
    dout = np.array([[[[1.0, 2.0], [4.0, 8.0]]]])
    dx = run("pool2d_grad", {"X": x, "Out": out, "Out@GRAD": dout}, attrs)["X@GRAD"]
    np.testing.assert_array_equal(dx[0, 0], [[1, 2, 0], [4, 8, 0], [0, 0, 0]])


def test_max_gradient_tie_later_in_the_window_loses():
    # window [[0, 5], [5, 1]]: the maximum 5 appears twice; the first (row-major) wins
    x = np.array([[[[0.0, 5.0], [5.0, 1.0]]]])
    out = run("pool2d", {"X": x}, {"ksize": [2, 2]})["Out"]
    dx = run(
        "pool2d_grad",
        {"X": x, "Out": out, "Out@GRAD": np.full((1, 1, 1, 1), 3.0)},
        {"ksize": [2, 2]},
    )["X@GRAD"]
    np.testing.assert_array_equal(dx[0, 0], [[0, 3], [0, 0]])


def test_padded_cells_never_win_a_max():
    x = -np.arange(1.0, 10.0).reshape(1, 1, 3, 3)  # all negative: a zero pad would win
    attrs = {"ksize": [3, 3], "strides": [2, 2], "paddings": [1, 1]}
    out = run("pool2d", {"X": x}, attrs)["Out"]
    np.testing.assert_array_equal(out[0, 0], [[-1, -2], [-4, -5]])
    dx = run("pool2d_grad", {"X": x, "Out": out, "Out@GRAD": np.ones_like(out)}, attrs)["X@GRAD"]
    np.testing.assert_array_equal(dx[0, 0], [[1, 1, 0], [1, 1, 0], [0, 0, 0]])


def test_average_excludes_padding_from_the_divisor():
    x = np.full((1, 1, 4, 4), 2.0)
    attrs = {"pooling_type": "avg", "ksize": [3, 3], "strides": [1, 1], "paddings": [1, 1]}
    out = run("pool2d", {"X": x}, attrs)["Out"]
    np.testing.assert_array_equal(
        out, np.full((1, 1, 4, 4), 2.0)
    )  # a padded zero would pull corners to 8/9
    dx = run("pool2d_grad", {"X": x, "Out": out, "Out@GRAD": np.ones_like(out)}, attrs)["X@GRAD"]
    # the corner cell is in the windows centred on (0, 0), (0, 1), (1, 0), (1, 1),
    # which hold 4, 6, 6 and 9 real cells; cell (1, 1) is in 9 windows
    assert dx[0, 0, 0, 0] == pytest.approx(1 / 4 + 2 / 6 + 1 / 9)
    assert dx[0, 0, 1, 1] == pytest.approx(1 / 4 + 4 / 6 + 4 / 9)


def test_global_pooling_ignores_ksize_strides_and_paddings():
    x = np.random.default_rng(0).standard_normal((2, 3, 5, 4))
    attrs = {"ksize": [-1, -1], "strides": [3, 3], "paddings": [2, 2], "global_pooling": True}
    out = run("pool2d", {"X": x}, {**attrs, "pooling_type": "avg"})["Out"]
    np.testing.assert_allclose(out, x.mean(axis=(2, 3), keepdims=True), rtol=1e-12)
    out = run("pool2d", {"X": x}, attrs)["Out"]
    np.testing.assert_array_equal(out, x.max(axis=(2, 3), keepdims=True))


def test_infer_shape_passes_the_batch_dim_through():
    main, startup = rf.Program(), rf.Program()
    with rf.program_guard(main, startup):
        block = main.global_block()
        block.create_var(name="x", shape=[-1, 64, 112, 112], dtype="float32")
        block.create_var(name="p")
        block.create_var(name="g")
        block.append_op(
            type="pool2d",
            inputs={"X": ["x"]},
            outputs={"Out": ["p"]},
            attrs={"pooling_type": "max", "ksize": [3, 3], "strides": [2, 2], "paddings": [1, 1]},
        )
        block.append_op(type="pool2d", inputs={"X": ["p"]}, outputs={"Out": ["g"]},
                        attrs={"pooling_type": "avg", "ksize": [7, 7], "global_pooling": True})
    assert tuple(block.var("p").shape) == (-1, 64, 56, 56)
    assert tuple(block.var("g").shape) == (-1, 64, 1, 1)
    grad = get_op_def("pool2d_grad").infer_shape(
        {"X": [(-1, 64, 112, 112)]}, get_op_def("pool2d_grad").complete_attrs({"ksize": [3, 3]})
    )
    assert grad == {"X@GRAD": [(-1, 64, 112, 112)]}


def test_grad_op_reads_x_and_out():
    main, startup = rf.Program(), rf.Program()
    with rf.program_guard(main, startup):
        block = main.global_block()
        block.create_var(name="x", shape=[-1, 4, 8, 8], dtype="float32")
        block.create_var(name="y")
        op = block.append_op(
            type="pool2d", inputs={"X": ["x"]}, outputs={"Out": ["y"]}, attrs={"ksize": [2, 2]}
        )
    (spec,) = get_op_def("pool2d").grad(op)
    assert (spec.type, spec.inputs, spec.outputs) == (
        "pool2d_grad", {"X": ["x"], "Out": ["y"], "Out@GRAD": ["y@GRAD"]}, {"X@GRAD": ["x@GRAD"]})


def test_cost_counts_window_reads():
    attrs = get_op_def("pool2d").complete_attrs(
        {"ksize": [3, 3], "strides": [2, 2], "paddings": [1, 1]}
    )
    flops, moved = get_op_def("pool2d").cost({"X": [(2, 4, 9, 9)]}, attrs, 4)
    outputs = 2 * 4 * 5 * 5
    assert flops == outputs * 9
    assert moved == (outputs * 9 + outputs) * 4
    gflops, gmoved = get_op_def("pool2d_grad").cost({"X": [(2, 4, 9, 9)]}, attrs, 4)
    assert gflops == outputs * 9
    assert gmoved == (outputs * 9 + 2 * outputs + 2 * 4 * 9 * 9) * 4


BAD = [
    (
        {"pooling_type": "min", "ksize": [2, 2]},
        "pool2d: attribute 'pooling_type' expects one of ['max', 'avg'], given 'min'",
    ),
    ({"ksize": [0, 2]}, "pool2d: attribute 'ksize' expects 2 ints each >= 1, given [0, 2]"),
    (
        {"ksize": [2, 2], "strides": [1, 0]},
        "pool2d: attribute 'strides' expects 2 ints each >= 1, given [1, 0]",
    ),
    (
        {"ksize": [2, 2], "paddings": [-1, 0]},
        "pool2d: attribute 'paddings' expects 2 ints each >= 0, given [-1, 0]",
    ),
    (
        {"ksize": [2, 2], "paddings": [1, 2]},
        "pool2d: attribute 'paddings' must be smaller than ksize [2, 2] in each dimension "
        "(so every window holds an input cell), given [1, 2]",
    ),
    ({}, "pool2d: attribute 'ksize' is required and was not given"),
    (
        {"ksize": [6, 2]},
        "pool2d: ksize's height 6 must not exceed the padded input height 5, "
        "given ksize [6, 2], X [1, 2, 5, 5], paddings [0, 0]",
    ),
]


@pytest.mark.parametrize("attrs, message", BAD)
def test_bad_attributes_are_refused(attrs, message):
    with pytest.raises(OpError) as info:
        rf.run_op("pool2d", {"X": np.ones((1, 2, 5, 5))}, attrs)
    assert str(info.value) == message


def test_a_too_large_window_is_refused_when_building_the_program():
    main, startup = rf.Program(), rf.Program()
    with rf.program_guard(main, startup):
        block = main.global_block()
        block.create_var(name="x", shape=[-1, 2, 5, 5], dtype="float32")
        block.create_var(name="y")
        with pytest.raises(
            OpError, match=r"pool2d: ksize's width 8 must not exceed the padded input width 7"
        ):
            block.append_op(type="pool2d", inputs={"X": ["x"]}, outputs={"Out": ["y"]},
                            attrs={"ksize": [3, 8], "paddings": [1, 1]})


def test_grad_refuses_mismatched_out_and_non_float_input():
    x = np.ones((1, 2, 4, 4))
    with pytest.raises(OpError) as info:
        rf.run_op(
            "pool2d_grad",
            {"X": x, "Out": np.ones((1, 2, 2, 2)), "Out@GRAD": np.ones((1, 2, 3, 3))},
            {"ksize": [2, 2], "strides": [2, 2]},
        )
    assert str(info.value) == ("pool2d_grad: Out@GRAD must be float64 of shape [1, 2, 2, 2], "
                               "given float64 of shape [1, 2, 3, 3]")
    with pytest.raises(
        OpError, match="pool2d: X must be a floating-point array, given dtype int64"
    ):
        rf.run_op("pool2d", {"X": np.ones((1, 1, 2, 2), np.int64)}, {"ksize": [2, 2]})


# GPU variants: the raw pooling kernels against the same references.

@requires_gpu
@both_types
@pytest.mark.parametrize("name", CASES)
def test_pool2d_on_gpu_matches_direct_loops(name, pooling_type):
    x, attrs = _case(name, pooling_type)
    out = check_output(
        "pool2d",
        {"X": x},
        attrs,
        {"Out": pool_reference(x, attrs)},
        rtol=1e-12,
        atol=1e-14,
        place=rf.CUDAPlace(0),
    )["Out"]
    dout = np.random.default_rng(5).standard_normal(out.shape)
    check_output(
        "pool2d_grad",
        {"X": x, "Out": out, "Out@GRAD": dout},
        attrs,
        {"X@GRAD": pool_grad_reference(x, dout, attrs)},
        rtol=1e-12,
        atol=1e-14,
        place=rf.CUDAPlace(0),
    )


@requires_gpu
def test_max_gradient_on_gpu_goes_to_the_first_maximum_and_never_to_padding():
    x = np.ones((1, 1, 3, 3), np.float32)
    attrs = {"ksize": [2, 2], "strides": [1, 1]}
    dout = np.array([[[[1.0, 2.0], [4.0, 8.0]]]], np.float32)
    dx = run(
        "pool2d_grad",
        {"X": x, "Out": np.ones((1, 1, 2, 2), np.float32), "Out@GRAD": dout},
        attrs,
        place=rf.CUDAPlace(0),
    )["X@GRAD"]
    np.testing.assert_array_equal(dx[0, 0], [[1, 2, 0], [4, 8, 0], [0, 0, 0]])
    x = -np.arange(1.0, 10.0, dtype=np.float32).reshape(1, 1, 3, 3)
    out = run("pool2d", {"X": x}, {"ksize": [3, 3], "strides": [2, 2], "paddings": [1, 1]},
              place=rf.CUDAPlace(0))["Out"]
    np.testing.assert_array_equal(out[0, 0], [[-1, -2], [-4, -5]])
