"""append_backward: gradient ops, @RENAME@ accumulation, stop_gradient, and correctness
against finite differences, on programs of the elementwise and reduction ops."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import reference_framework as rf
from reference_framework.backward import RENAME
from reference_framework.registry import OpDef, make_grad, optional, register, registered_ops

from .grad_check import numeric_grad

# A two-output op for the paths ResNet does not take: A = 2x and B = 3x, whose
# gradient op reads both output gradients.
PAIR = "backward_test_pair"


def _pair(ins: dict[str, Any], attrs: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return {"A": ins["X"] * 2, "B": ins["X"] * 3}


def _pair_grad(ins: dict[str, Any], attrs: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return {"X@GRAD": ins["A@GRAD"] * 2 + ins["B@GRAD"] * 3}


if PAIR not in registered_ops():
    register(OpDef(PAIR, inputs=["X"], outputs=["A", "B"], kernel=_pair,
                   infer_shape=lambda shapes, attrs: {"A": shapes["X"], "B": shapes["X"]},
                   grad=make_grad(PAIR + "_grad", grads_of=["A", "B"], grads_for=["X"])))
    register(
        OpDef(
            PAIR + "_grad",
            inputs=["A@GRAD", "B@GRAD"],
            outputs=[optional("X@GRAD")],
            kernel=_pair_grad,
        )
    )


@pytest.fixture
def programs():
    main, startup = rf.Program(), rf.Program()
    with (
        rf.unique_name_guard(),
        rf.program_guard(main, startup),
        rf.scope_guard(rf.Scope()) as scope,
    ):
        yield main, scope


def param(main: rf.Program, name: str, shape: list[int], trainable: bool = True) -> rf.Parameter:
    return main.global_block().create_parameter(name, shape, "float64", trainable=trainable)


def op_types(main: rf.Program) -> list[str]:
    return [op.type for op in main.global_block().ops]


def set_values(scope: rf.Scope, values: dict[str, np.ndarray]) -> None:
    for name, value in values.items():
        scope.var(name).value = value


def test_gradients_match_finite_differences(programs):
    """loss = mean((x + w) / v + (x + w)): x + w is read twice, w and v are parameters."""
    main, scope = programs
    x = rf.layers.data("x", [4], "float64")
    w = param(main, "w", [3, 4])
    v = param(main, "v", [4])
    z = rf.layers.elementwise_add(x, w)
    loss = rf.layers.mean(rf.layers.elementwise_add(rf.layers.elementwise_div(z, v), z))
    forward = main.clone()
    pairs = rf.append_backward(loss)
    assert [(p.name, g.name) for p, g in pairs] == [("w", "w@GRAD"), ("v", "v@GRAD")]

    rng = np.random.default_rng(0)
    feed = {"x": rng.standard_normal((3, 4))}
    set_values(scope, {"w": rng.standard_normal((3, 4)), "v": rng.uniform(1, 2, 4)})
    exe = rf.Executor(rf.CPUPlace())
    dw, dv = exe.run(main, feed=feed, fetch_list=["w@GRAD", "v@GRAD"])

    def run_loss() -> float:
        return float(exe.run(forward, feed=feed, fetch_list=[loss])[0][0])

    for name, got in (("w", dw), ("v", dv)):
        value = scope.find_var(name).value
        want = numeric_grad(run_loss, value, range(value.size))
        np.testing.assert_allclose(got.reshape(-1), want, rtol=1e-6, atol=1e-9, err_msg=name)
    # the analytic values, as a second opinion: d/dv of mean(z / v) is -sum_rows(z) / v^2 / 12
    zv = feed["x"] + scope.find_var("w").value
    np.testing.assert_allclose(dv, -zv.sum(0) / scope.find_var("v").value ** 2 / 12, rtol=1e-12)


def test_loss_gradient_is_seeded_with_ones(programs):
    main, _ = programs
    w = param(main, "w", [2])
    loss = rf.layers.mean(w)
    n = len(main.global_block().ops)
    rf.append_backward(loss)
    seed = main.global_block().ops[n]
    assert seed.type == "fill_constant"
    assert seed.outputs == {"Out": [loss.name + "@GRAD"]}
    assert (
        seed.attrs["shape"] == [1]
        and seed.attrs["value"] == 1.0
        and seed.attrs["dtype"] == "float64"
    )


def test_variable_read_twice_gets_renamed_writes_and_a_sum_before_its_reader(programs):
    main, scope = programs
    w = param(main, "w", [3])
    u = param(main, "u", [3])
    z = rf.layers.elementwise_add(w, u)  # z is read by both ops below
    a = rf.layers.elementwise_add(z, z)  # ...and twice by this one
    loss = rf.layers.mean(rf.layers.elementwise_div(a, z))
    rf.append_backward(loss)
    ops = main.global_block().ops
    grad = z.name + "@GRAD"
    writers = [
        i for i, op in enumerate(ops) for n in op.output_arg_names if n.startswith(grad + RENAME)
    ]
    written = sorted(n for op in ops for n in op.output_arg_names if n.startswith(grad + RENAME))
    assert written == [f"{grad}{RENAME}{k}" for k in range(3)]  # div's Y, add's X and Y
    sums = [i for i, op in enumerate(ops) if op.type == "sum"]
    assert len(sums) == 1
    s = ops[sums[0]]
    assert sorted(s.input("X")) == written and s.output("Out") == [grad]
    reader = next(i for i, op in enumerate(ops) if grad in op.input_arg_names)
    assert max(writers) < sums[0] < reader
    assert not any(grad in op.output_arg_names for op in ops if op.type != "sum")

    # and the sum is right: loss = mean((2z) / z) is constant, so d/dz = 0 and d/dw = 0
    set_values(scope, {"w": np.array([1.0, 2.0, 3.0]), "u": np.array([0.5, 0.25, 1.0])})
    dz, dw = rf.Executor(rf.CPUPlace()).run(main, fetch_list=[grad, "w@GRAD"])
    np.testing.assert_allclose(dz, 0.0, atol=1e-12)
    np.testing.assert_allclose(dw, 0.0, atol=1e-12)


def test_leaf_read_twice_is_summed_at_the_end(programs):
    main, scope = programs
    w = param(main, "w", [2])
    loss = rf.layers.mean(rf.layers.elementwise_add(w, w))
    rf.append_backward(loss)
    last = main.global_block().ops[-1]
    assert last.type == "sum" and last.output("Out") == ["w@GRAD"]
    assert sorted(last.input("X")) == [f"w@GRAD{RENAME}0", f"w@GRAD{RENAME}1"]
    set_values(scope, {"w": np.array([1.0, -1.0])})
    dw, = rf.Executor(rf.CPUPlace()).run(main, fetch_list=["w@GRAD"])
    np.testing.assert_allclose(dw, [1.0, 1.0])  # d mean(2w) / dw = 2 / 2


def test_stop_gradient_blocks_gradients(programs):
    main, scope = programs
    x = rf.layers.data("x", [2], "float64")  # data: stop_gradient
    w = param(main, "w", [2])
    frozen = param(main, "frozen", [2], trainable=False)
    u = param(main, "u", [2])
    hidden = rf.layers.elementwise_add(x, w)
    hidden.stop_gradient = True  # nothing flows back through it to w
    out = rf.layers.elementwise_add(rf.layers.elementwise_add(hidden, frozen), u)
    loss = rf.layers.mean(out)
    pairs = rf.append_backward(loss)
    assert [p.name for p, _ in pairs] == ["u"]
    grads = {n for op in main.global_block().ops for n in op.output_arg_names if "@GRAD" in n}
    for blocked in ("x", "w", "frozen", hidden.name):
        assert not any(g.startswith(blocked + "@GRAD") for g in grads), blocked
    # the add of hidden and frozen has nothing to compute: no grad op for it
    add_grads = [op for op in main.global_block().ops if op.type == "elementwise_add_grad"]
    assert len(add_grads) == 1 and add_grads[0].output("Y@GRAD") == ["u@GRAD"]
    assert add_grads[0].output("X@GRAD") == []


def test_no_grad_set_works_like_stop_gradient(programs):
    main, _ = programs
    w, u = param(main, "w", [2]), param(main, "u", [2])
    loss = rf.layers.mean(rf.layers.elementwise_add(w, u))
    pairs = rf.append_backward(loss, no_grad_set={"w"})
    assert [p.name for p, _ in pairs] == ["u"]
    assert not main.global_block().has_var("w@GRAD")


def test_forward_ops_are_untouched(programs):
    main, _ = programs
    w = param(main, "w", [2])
    z = rf.layers.elementwise_add(w, w)
    loss = rf.layers.mean(rf.layers.elementwise_div(z, w))
    before = [(op, repr(op)) for op in main.global_block().ops]
    rf.append_backward(loss)
    after = main.global_block().ops
    assert len(after) > len(before)
    assert [(op, repr(op)) for op in after[:len(before)]] == before


def test_output_nobody_differentiates_gets_zeros(programs):
    """A two-output op whose second output does not lead to the loss: its
    gradient is filled with zeros so the gradient op can read it."""
    main, scope = programs
    w = param(main, "w", [2])
    block = main.global_block()
    a, b = block.create_var("a", dtype="float64"), block.create_var("b", dtype="float64")
    block.append_op(PAIR, inputs={"X": [w]}, outputs={"A": [a], "B": [b]})
    loss = rf.layers.mean(a)
    rf.append_backward(loss)
    zeros = [op for op in block.ops if op.type == "fill_zeros_like"]
    assert len(zeros) == 1 and zeros[0].output("Out") == ["b@GRAD"]
    set_values(scope, {"w": np.array([1.0, 2.0])})
    dw, = rf.Executor(rf.CPUPlace()).run(main, fetch_list=["w@GRAD"])
    np.testing.assert_allclose(dw, [1.0, 1.0])  # d mean(2w) / dw, nothing from B


def test_op_without_gradient_on_the_path_is_an_error(programs):
    main, _ = programs
    w = param(main, "w", [2])
    loss = rf.layers.mean(rf.layers.cast(w, "float64"))  # cast has no gradient maker
    with pytest.raises(rf.OpError, match="cast .*no gradient.*'w'"):
        rf.append_backward(loss)


def test_loss_must_be_one_element_and_differentiated_once(programs):
    main, _ = programs
    w = param(main, "w", [2])
    with pytest.raises(ValueError, match=r"shape \[1\].*\[2\]"):
        rf.append_backward(rf.layers.elementwise_add(w, w))
    loss = rf.layers.mean(w)
    rf.append_backward(loss)
    with pytest.raises(ValueError, match="appended before"):
        rf.append_backward(loss)
