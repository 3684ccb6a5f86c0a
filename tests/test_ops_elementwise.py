"""elementwise_add / elementwise_div and their gradients, with the axis broadcast rule."""

from __future__ import annotations

import numpy as np
import pytest

import reference_framework as rf
from reference_framework.registry import get_op_def
from tests.op_test import check_grad, check_output, requires_gpu, run

# (X shape, Y shape, axis, Y reshaped by hand to broadcast against X)
BROADCASTS = [
    ((2, 3, 4), (2, 3, 4), -1, (2, 3, 4)),
    ((2, 3, 4), (4,), -1, (1, 1, 4)),
    ((2, 3, 4), (3, 4), -1, (1, 3, 4)),
    ((2, 3, 4, 5), (3,), 1, (1, 3, 1, 1)),  # a conv bias over channels
    ((2, 3, 4, 5), (3, 4), 1, (1, 3, 4, 1)),
    ((2, 3, 4), (2,), 0, (2, 1, 1)),
    ((2, 3, 4), (2, 3), 0, (2, 3, 1)),
    ((6, 10), (10,), 1, (1, 10)),  # the fc bias
]


def inputs(xs, ys, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.uniform(0.5, 2.0, ys) * rng.choice([-1.0, 1.0], ys)  # away from 0 for the division
    return rng.standard_normal(xs), y


@pytest.mark.parametrize("xs, ys, axis, yb", BROADCASTS)
def test_add_and_div_forward(xs, ys, axis, yb):
    x, y = inputs(xs, ys)
    check_output(
        "elementwise_add",
        {"X": x, "Y": y},
        {"axis": axis},
        {"Out": x + y.reshape(yb)},
        rtol=0,
        atol=0,
    )
    check_output(
        "elementwise_div",
        {"X": x, "Y": y},
        {"axis": axis},
        {"Out": x / y.reshape(yb)},
        rtol=1e-15,
        atol=0,
    )


@pytest.mark.parametrize("op", ["elementwise_add", "elementwise_div"])
@pytest.mark.parametrize("xs, ys, axis, yb", BROADCASTS)
def test_gradients(op, xs, ys, axis, yb):
    x, y = inputs(xs, ys, seed=1)
    check_grad(op, {"X": x, "Y": y}, {"axis": axis})


@pytest.mark.parametrize("xs, ys, axis, yb", BROADCASTS[1:4])
def test_y_gradient_sums_the_broadcast_dims(xs, ys, axis, yb):
    x, y = inputs(xs, ys, seed=2)
    dout = np.random.default_rng(3).standard_normal(xs)
    dims = tuple(i for i, d in enumerate(yb) if d == 1)
    add = run("elementwise_add_grad", {"Y": y, "Out@GRAD": dout}, {"axis": axis})
    np.testing.assert_allclose(add["Y@GRAD"], dout.sum(axis=dims).reshape(ys), rtol=1e-12)
    np.testing.assert_array_equal(add["X@GRAD"], dout)
    out = x / y.reshape(yb)
    div = run("elementwise_div_grad", {"Y": y, "Out": out, "Out@GRAD": dout}, {"axis": axis})
    np.testing.assert_allclose(div["X@GRAD"], dout / y.reshape(yb), rtol=1e-12)
    np.testing.assert_allclose(
        div["Y@GRAD"], (-dout * x / y.reshape(yb) ** 2).sum(axis=dims).reshape(ys), rtol=1e-10
    )


def test_add_x_gradient_is_out_gradient_itself():
    dout = np.ones((2, 3), np.float32)
    outs = rf.run_op("elementwise_add_grad", {"Y": np.ones(3, np.float32), "Out@GRAD": dout})
    assert outs["X@GRAD"] is dout  # documented: no copy, so nothing may write into it


@pytest.mark.parametrize("op", ["elementwise_add", "elementwise_div"])
def test_float32_agrees_with_float64(op):
    x, y = inputs((4, 8, 5, 5), (8,), seed=4)
    out32 = run(op, {"X": x.astype(np.float32), "Y": y.astype(np.float32)}, {"axis": 1})["Out"]
    assert out32.dtype == np.float32
    np.testing.assert_allclose(
        out32, run(op, {"X": x, "Y": y}, {"axis": 1})["Out"], rtol=1e-6, atol=1e-7
    )
    dout = np.random.default_rng(5).standard_normal(x.shape)
    grad_ins = {"Y": y, "Out": run(op, {"X": x, "Y": y}, {"axis": 1})["Out"], "Out@GRAD": dout}
    if op == "elementwise_add":
        del grad_ins["Out"]
    g64 = run(op + "_grad", grad_ins, {"axis": 1})
    g32 = run(op + "_grad", {k: v.astype(np.float32) for k, v in grad_ins.items()}, {"axis": 1})
    for slot in ("X@GRAD", "Y@GRAD"):
        assert g32[slot].dtype == np.float32
        np.testing.assert_allclose(g32[slot], g64[slot], rtol=1e-5, atol=1e-5, err_msg=slot)


@pytest.mark.parametrize("op", ["elementwise_add", "elementwise_div"])
@pytest.mark.parametrize("xs, ys, axis, start", [
    ((2, 3, 4), (3,), -1, 2),  # trailing dim is 4, not 3
    ((2, 3, 4), (4,), 1, 1),  # X's dim 1 is 3
    ((2, 3), (3,), 2, 2),  # runs past X's last dim
    ((2, 3), (2, 3, 1), -1, -1),  # Y has more dims than X
])
def test_bad_axes_are_named(op, xs, ys, axis, start):
    x, y = np.ones(xs), np.ones(ys)
    want = (rf"{op}: Y's shape \[{', '.join(map(str, ys))}\] must equal X's dims from axis {start} "
            rf"\(X's shape \[{', '.join(map(str, xs))}\], attribute axis={axis}\)")
    with pytest.raises(rf.OpError, match=want):
        run(op, {"X": x, "Y": y}, {"axis": axis})


def test_infer_shape_and_cost():
    add = get_op_def("elementwise_add")
    assert add.infer_shape({"X": [(-1, 64, 56, 56)], "Y": [(64,)]}, {"axis": 1}) == {
        "Out": [(-1, 64, 56, 56)]
    }
    assert add.infer_shape({"X": [(-1, 10)], "Y": [(-1, 10)]}, {"axis": -1}) == {"Out": [(-1, 10)]}
    with pytest.raises(rf.OpError, match=r"Y's shape \[10\] must equal X's dims from axis 1"):
        add.infer_shape({"X": [(-1, 64, 56, 56)], "Y": [(10,)]}, {"axis": 1})
    for grad in ("elementwise_add_grad", "elementwise_div_grad"):
        shapes = {"Y": [(64,)], "Out": [(-1, 64, 56, 56)], "Out@GRAD": [(-1, 64, 56, 56)]}
        assert get_op_def(grad).infer_shape(shapes, {"axis": 1}) == {
            "X@GRAD": [(-1, 64, 56, 56)],
            "Y@GRAD": [(64,)],
        }
    n = 8 * 64 * 56 * 56
    assert add.cost({"X": [(8, 64, 56, 56)], "Y": [(64,)]}, {"axis": 1}, 4) == (
        float(n),
        4.0 * (2 * n + 64),
    )


@requires_gpu
def test_gpu_matches_cpu():
    x, y = inputs((4, 8, 5, 5), (8,), seed=6)
    x, y = x.astype(np.float32), y.astype(np.float32)
    place = rf.CUDAPlace(0)
    for op in ("elementwise_add", "elementwise_div"):
        np.testing.assert_allclose(run(op, {"X": x, "Y": y}, {"axis": 1}, place=place)["Out"],
                                   run(op, {"X": x, "Y": y}, {"axis": 1})["Out"], rtol=1e-6)
    dout = np.ones_like(x)
    np.testing.assert_allclose(
        run("elementwise_add_grad", {"Y": y, "Out@GRAD": dout}, {"axis": 1}, place=place)["Y@GRAD"],
        np.full(8, 100.0), rtol=1e-6)
