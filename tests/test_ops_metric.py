"""top_k and accuracy against plain Python references."""

from __future__ import annotations

import numpy as np
import pytest

import reference_framework as rf
from reference_framework.registry import get_op_def
from tests.op_test import check_output, requires_gpu, run


def ref_top_k(x, k):
    """Row by row with Python's stable sort on (-value, index)."""
    rows = x.reshape(-1, x.shape[-1])
    idx = np.array(
        [sorted(range(len(r)), key=lambda i: (-r[i], i))[:k] for r in rows], dtype=np.int64
    )
    vals = np.take_along_axis(rows, idx, axis=1)
    return vals.reshape(x.shape[:-1] + (k,)), idx.reshape(x.shape[:-1] + (k,))


@pytest.mark.parametrize("shape, k", [((5, 8), 1), ((5, 8), 3), ((2, 3, 6), 6), ((7,), 2)])
def test_top_k_matches_reference(shape, k):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    vals, idx = ref_top_k(x, k)
    outs = check_output("top_k", {"X": x}, {"k": k}, {"Out": vals, "Indices": idx}, rtol=0, atol=0)
    assert outs["Indices"].dtype == np.int64 and outs["Out"].dtype == np.float32


def test_top_k_ties_take_the_lower_index_first():
    x = np.array([[1.0, 3.0, 3.0, 2.0, 3.0], [0.0, 0.0, 0.0, 0.0, 0.0]])
    outs = run("top_k", {"X": x}, {"k": 3})
    np.testing.assert_array_equal(outs["Indices"], [[1, 2, 4], [0, 1, 2]])
    np.testing.assert_array_equal(outs["Out"], [[3.0, 3.0, 3.0], [0.0, 0.0, 0.0]])
    np.testing.assert_array_equal(run("top_k", {"X": x}, {"k": 1})["Indices"], [[1], [0]])


def test_top_k_float32_agrees_with_float64():
    x = np.random.default_rng(1).standard_normal((16, 102))
    o64, o32 = run("top_k", {"X": x}, {"k": 5}), run("top_k", {"X": x.astype(np.float32)}, {"k": 5})
    np.testing.assert_array_equal(o32["Indices"], o64["Indices"])
    np.testing.assert_allclose(o32["Out"], o64["Out"], rtol=1e-7)


def test_top_k_bad_k():
    with pytest.raises(
        rf.OpError, match=r"top_k: attribute 'k' must be at most X's last dim \(4\), given 5"
    ):
        run("top_k", {"X": np.ones((2, 4))}, {"k": 5})
    with pytest.raises(rf.OpError, match=r"top_k: attribute 'k' expects an int >= 1, given 0"):
        run("top_k", {"X": np.ones((2, 4))}, {"k": 0})
    with pytest.raises(rf.OpError, match=r"top_k: attribute 'k' expects an int, given 2.0"):
        run("top_k", {"X": np.ones((2, 4))}, {"k": 2.0})


def test_accuracy_counts_labels_among_the_top_k():
    indices = np.array([[3, 1], [0, 2], [4, 4], [1, 0]], dtype=np.int64)
    label = np.array([[1], [3], [4], [0]], dtype=np.int64)
    correct = sum(int(label[i, 0] in indices[i]) for i in range(4))  # rows 0, 2, 3
    outs = check_output(
        "accuracy",
        {"Out": np.zeros((4, 2), np.float32), "Indices": indices, "Label": label},
        None,
        {
            "Accuracy": np.array([correct / 4]),
            "Correct": np.array([correct]),
            "Total": np.array([4]),
        },
        rtol=1e-7,
        atol=0,
    )
    assert correct == 3
    assert outs["Accuracy"].dtype == np.float32
    assert outs["Correct"].dtype == np.int64 and outs["Total"].dtype == np.int64


def test_accuracy_after_top_k_end_to_end():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((32, 10)).astype(np.float32)
    label = rng.integers(0, 10, (32, 1)).astype(np.int64)
    top = run("top_k", {"X": x}, {"k": 1})
    acc = run("accuracy", {"Out": top["Out"], "Indices": top["Indices"], "Label": label})
    want = int(np.sum(np.argmax(x, axis=1) == label[:, 0]))
    assert int(acc["Correct"][0]) == want
    np.testing.assert_allclose(acc["Accuracy"], [want / 32], rtol=1e-7)


def test_accuracy_of_an_empty_batch_is_zero():
    outs = run(
        "accuracy",
        {
            "Out": np.zeros((0, 1), np.float32),
            "Indices": np.zeros((0, 1), np.int64),
            "Label": np.zeros((0, 1), np.int64),
        },
    )
    assert outs["Accuracy"][0] == 0.0 and outs["Total"][0] == 0


def test_accuracy_bad_label():
    ins = {"Out": np.zeros((4, 1), np.float32), "Indices": np.zeros((4, 1), np.int64)}
    with pytest.raises(
        rf.OpError,
        match=r"accuracy: Label must have shape \[4, 1\] \(one label per row of "
        r"Indices\), given \[3, 1\]",
    ):
        run("accuracy", {**ins, "Label": np.zeros((3, 1), np.int64)})
    with pytest.raises(
        rf.OpError, match=r"accuracy: Label must have an integer dtype such as int64, given float32"
    ):
        run("accuracy", {**ins, "Label": np.zeros((4, 1), np.float32)})


def test_infer_shape():
    top_k, accuracy = get_op_def("top_k"), get_op_def("accuracy")
    assert top_k.infer_shape({"X": [(-1, 102)]}, {"k": 5}) == {
        "Out": [(-1, 5)],
        "Indices": [(-1, 5)],
    }
    with pytest.raises(
        rf.OpError, match=r"top_k: attribute 'k' must be at most X's last dim \(102\), given 200"
    ):
        top_k.infer_shape({"X": [(-1, 102)]}, {"k": 200})
    shapes = {"Out": [(-1, 1)], "Indices": [(-1, 1)], "Label": [(-1, 1)]}
    assert accuracy.infer_shape(shapes, {}) == {
        "Accuracy": [(1,)],
        "Correct": [(1,)],
        "Total": [(1,)],
    }


@requires_gpu
def test_gpu_matches_cpu():
    x = np.array([[1.0, 3.0, 3.0, 2.0], [5.0, 0.0, 5.0, 5.0]], dtype=np.float32)
    place = rf.CUDAPlace(0)
    top = run("top_k", {"X": x}, {"k": 2}, place=place)
    np.testing.assert_array_equal(top["Indices"], [[1, 2], [0, 2]])
    acc = run(
        "accuracy",
        {"Out": top["Out"], "Indices": top["Indices"], "Label": np.array([[2], [3]])},
        place=place,
    )
    assert acc["Correct"][0] == 1 and acc["Total"][0] == 2
    np.testing.assert_allclose(acc["Accuracy"], [0.5])
