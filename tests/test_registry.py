"""Tests of the op registry and run_op."""

from __future__ import annotations

import numpy as np
import pytest

import reference_framework as rf
from pytest_opperf import timers
from reference_framework.registry import OpDef, OpError, get_op_def, make_grad, register


def test_run_op_runs_and_times_one_op():
    x = np.ones((2, 3), "float32")
    with timers.recording() as table:
        out = rf.run_op("elementwise_add", {"X": x, "Y": np.arange(3, dtype="float32")})
    np.testing.assert_array_equal(out["Out"], x + np.arange(3))
    assert table["elementwise_add"].count == 1 and table["elementwise_add"].kernel


def test_run_op_checks_slots_and_attributes():
    with pytest.raises(OpError, match=r"elementwise_add: input slot 'Y' is required"):
        rf.run_op("elementwise_add", {"X": np.ones(3)})
    with pytest.raises(OpError, match=r"unknown input slot 'Z'"):
        rf.run_op("elementwise_add", {"X": np.ones(3), "Y": np.ones(3), "Z": np.ones(3)})
    with pytest.raises(
        OpError,
        match=r"sum: input slot 'X' is duplicable and takes a list of arrays, given ndarray",
    ):
        rf.run_op("sum", {"X": np.ones(3)})
    with pytest.raises(OpError, match=r"attribute 'value' expects a number, given 'one'"):
        rf.run_op("fill_constant", {}, {"shape": [2], "value": "one"})
    with pytest.raises(OpError, match=r"unknown op type 'conv2"):
        rf.run_op("conv2", {})


def test_dtype_attributes_accept_numpy_names():
    out = rf.run_op("fill_constant", {}, {"shape": [2], "value": 3, "dtype": np.int64})
    assert out["Out"].dtype == np.int64 and out["Out"].tolist() == [3, 3]
    with pytest.raises(
        OpError,
        match=r"attribute 'dtype' expects a numpy dtype name such as 'float32', given 'f33'",
    ):
        rf.run_op("fill_constant", {}, {"shape": [2], "dtype": "f33"})


def test_registering_a_type_twice_is_an_error():
    with pytest.raises(OpError, match="registered twice"):
        register(get_op_def("mean"))


def test_make_grad_builds_the_gradient_op_description():
    maker = make_grad(
        "elementwise_div_grad",
        inputs=["Y"],
        outputs=["Out"],
        grads_of=["Out"],
        grads_for=["X", "Y"],
    )

    class Fwd:
        inputs = {"X": ["a"], "Y": ["b"]}
        outputs = {"Out": ["c"]}
        attrs = {"axis": 1}

    (spec,) = maker(Fwd)
    assert spec.type == "elementwise_div_grad"
    assert spec.inputs == {"Y": ["b"], "Out": ["c"], "Out@GRAD": ["c@GRAD"]}
    assert spec.outputs == {"X@GRAD": ["a@GRAD"], "Y@GRAD": ["b@GRAD"]}
    assert spec.attrs == {"axis": 1} and spec.attrs is not Fwd.attrs


def test_registered_ops_lists_the_foundation_ops():
    assert {"feed", "fetch", "fill_constant", "cast", "gaussian_random", "uniform_random",
            "elementwise_add", "mean"} <= set(rf.registered_ops())
    assert isinstance(get_op_def("feed"), OpDef)
