"""Tests of program descriptions: validation, lookup, clone, guards."""

from __future__ import annotations

import pytest

import reference_framework as rf
from reference_framework.registry import OpError


@pytest.fixture
def prog():
    main, startup = rf.Program(), rf.Program()
    with rf.program_guard(main, startup), rf.unique_name_guard():
        yield main


def add_op(block, x="x", y="y", out="z"):
    return block.append_op(
        type="elementwise_add",
        inputs={"X": [x], "Y": [y]},
        outputs={"Out": [out]},
        attrs={"axis": -1},
    )


def test_create_var_and_infer_shape(prog):
    b = prog.global_block()
    x = b.create_var(name="x", shape=[-1, 4], dtype="float32")
    b.create_var(name="y", shape=[4])
    b.create_var(name="z")
    add_op(b)
    assert b.var("z").shape == (-1, 4)
    assert x.dtype == "float32" and b.create_var(name="x") is x
    m = b.create_var(name="m")
    b.append_op(type="mean", inputs={"X": "z"}, outputs={"Out": m})
    assert m.shape == (1,)


def test_dtype_names_are_normalised_and_checked(prog):
    b = prog.global_block()
    assert b.create_var(name="l", dtype="int64").dtype == "int64"
    assert b.create_var(name="f", dtype=float).dtype == "float64"
    with pytest.raises(TypeError, match="not a numpy dtype"):
        b.create_var(name="bad", dtype="floaty")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            dict(type="elementwise_ad"),
            r"unknown op type 'elementwise_ad'.*did you mean 'elementwise_add'",
        ),
        (
            dict(type="elementwise_add", inputs={"X": ["x"]}, outputs={"Out": ["z"]}),
            r"elementwise_add: input slot 'Y' is required; given inputs \['X'\]",
        ),
        (
            dict(
                type="elementwise_add",
                inputs={"X": ["x"], "Y": ["y"], "W": ["y"]},
                outputs={"Out": ["z"]},
            ),
            r"unknown input slot 'W'; elementwise_add has inputs \['X', 'Y'\]",
        ),
        (
            dict(
                type="elementwise_add", inputs={"X": ["x", "y"], "Y": ["y"]}, outputs={"Out": ["z"]}
            ),
            r"input slot 'X' takes one variable, given 2",
        ),
        (
            dict(
                type="elementwise_add", inputs={"X": ["x"], "Y": ["nope"]}, outputs={"Out": ["z"]}
            ),
            r"input slot 'Y' names variable 'nope', which is not in block 0",
        ),
        (
            dict(
                type="elementwise_add",
                inputs={"X": ["x"], "Y": ["y"]},
                outputs={"Out": ["z"]},
                attrs={"axes": 1},
            ),
            r"unknown attribute 'axes'; elementwise_add takes \['axis'\]",
        ),
        (
            dict(
                type="elementwise_add",
                inputs={"X": ["x"], "Y": ["y"]},
                outputs={"Out": ["z"]},
                attrs={"axis": "1"},
            ),
            r"attribute 'axis' expects an int, given '1'",
        ),
        (
            dict(type="fill_constant", outputs={"Out": ["z"]}),
            r"fill_constant: attribute 'shape' is required and was not given",
        ),
        (
            dict(type="fill_constant", outputs={"Out": ["z"]}, attrs={"shape": [2, 0]}),
            r"fill_constant: attribute 'shape' expects a list of ints each >= 1, given \[2, 0\]",
        ),
        (
            dict(type="elementwise_add", inputs={"X": ["x"], "Y": ["w"]}, outputs={"Out": ["z"]}),
            r"Y's shape \[3\] must equal X's dims from axis 1",
        ),
    ],
)
def test_operator_validation_messages(prog, kwargs, message):
    b = prog.global_block()
    b.create_var(name="x", shape=[-1, 4])
    b.create_var(name="y", shape=[4])
    b.create_var(name="w", shape=[3])
    b.create_var(name="z")
    with pytest.raises(OpError, match=message):
        b.append_op(**kwargs)
    assert b.ops == [] and prog.global_block().var("z").shape is None


def test_lookup_through_parent_blocks(prog):
    g = prog.global_block()
    g.create_var(name="outer", shape=[2])
    sub = prog.create_block()
    assert sub.parent is g and prog.current_block() is sub
    assert sub.var("outer") is g.var("outer")
    assert sub.find_var("missing") is None
    with pytest.raises(KeyError, match="'missing' is not in block 1"):
        sub.var("missing")
    prog.rollback()
    assert prog.current_block() is g


def test_clone_is_a_deep_independent_copy(prog):
    b = prog.global_block()
    b.create_var(name="x", shape=[-1, 4])
    b.create_var(name="y", shape=[4])
    b.create_var(name="z")
    b.create_parameter(name="w", shape=[4], trainable=True)
    op = add_op(b)
    clone = prog.clone()
    cb = clone.global_block()
    assert clone.to_string() == prog.to_string()
    assert cb is not b and cb.program is clone
    assert cb.ops[0] is not op and cb.ops[0].block is cb
    assert cb.var("x") is not b.var("x") and cb.var("x").block is cb
    assert isinstance(cb.var("w"), rf.Parameter) and cb.var("w").trainable
    # Changing the clone in every way leaves the original untouched.
    cb.ops[0].inputs["X"].append("y")
    cb.ops[0].attrs["axis"] = 5
    cb.var("x").stop_gradient = True
    cb.create_var(name="extra")
    cb.append_op(type="mean", inputs={"X": ["z"]}, outputs={"Out": ["extra"]})
    assert op.inputs["X"] == ["x"] and op.attrs["axis"] == -1
    assert not b.var("x").stop_gradient and not b.has_var("extra") and len(b.ops) == 1


def test_clone_for_test_sets_is_test(monkeypatch):
    from reference_framework import registry

    monkeypatch.setitem(registry._OPS, "test_only_dropout_like", registry.OpDef(
        "test_only_dropout_like", inputs=["X"], outputs=["Out"], attrs={"is_test": False},
        kernel=lambda ins, attrs, ctx: {"Out": ins["X"]}))
    p = rf.Program()
    b = p.global_block()
    b.create_var(name="x")
    b.create_var(name="o")
    b.append_op(type="test_only_dropout_like", inputs={"X": ["x"]}, outputs={"Out": ["o"]})
    assert p.clone(for_test=True).global_block().ops[0].attrs["is_test"] is True
    assert b.ops[0].attrs["is_test"] is False


def test_version_changes_with_the_program(prog):
    b = prog.global_block()
    v0 = prog.version
    b.create_var(name="x", shape=[2])
    v1 = prog.version
    b.create_var(name="x")  # existing: no change
    assert v1 > v0 and prog.version == v1


def test_program_guard_restores_defaults():
    outer_main = rf.default_main_program()
    main, startup = rf.Program(), rf.Program()
    with rf.program_guard(main, startup):
        assert rf.default_main_program() is main and rf.default_startup_program() is startup
        with pytest.raises(TypeError, match="must be a Program"):
            with rf.program_guard("main"):
                pass
    assert rf.default_main_program() is outer_main


def test_unique_names_and_grad_names():
    with rf.unique_name_guard():
        assert [rf.unique_name("conv2d") for _ in range(2)] == ["conv2d_0", "conv2d_1"]
        with rf.unique_name_guard():
            assert rf.unique_name("conv2d") == "conv2d_0"
    assert rf.grad_var_name("fc_0.w_0") == "fc_0.w_0@GRAD"
