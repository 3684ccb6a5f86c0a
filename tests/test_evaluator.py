"""evaluator.Accuracy: pass accuracy accumulated in persistable states."""

from __future__ import annotations

import numpy as np
import pytest

import reference_framework as rf
from pytest_opperf import timers
from reference_framework import layers


@pytest.fixture
def setup():
    main, startup = rf.Program(), rf.Program()
    with rf.unique_name_guard(), rf.program_guard(main, startup), rf.scope_guard(rf.Scope()):
        scores = layers.data("scores", [4])
        label = layers.data("label", [1], "int64")
        yield main, startup, scores, label


def batches(n: int, size: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        yield rng.random((size, 4)).astype(np.float32), rng.integers(0, 4, (size, 1))


@pytest.mark.parametrize("k", [1, 2])
def test_pass_accuracy_is_correct_over_total_since_reset(setup, k):
    main, startup, scores, label = setup
    acc = rf.evaluator.Accuracy(input=scores, label=label, k=k)
    exe = rf.Executor(rf.CPUPlace())
    exe.run(startup)
    acc.reset(exe)
    correct = total = 0
    for s, lab in batches(4, 5):
        batch_acc, = exe.run(main, feed={"scores": s, "label": lab}, fetch_list=acc.metrics)
        topk = np.argsort(-s, axis=1, kind="stable")[:, :k]
        hits = int((topk == lab).any(axis=1).sum())
        correct, total = correct + hits, total + len(lab)
        np.testing.assert_allclose(batch_acc, [hits / len(lab)], rtol=1e-6)
        pass_acc = acc.eval(exe)
        assert pass_acc.dtype == np.float32 and pass_acc.shape == (1,)
        np.testing.assert_allclose(pass_acc, [correct / total], rtol=1e-6)
    acc.reset(exe)
    s, lab = next(batches(1, 3, seed=9))
    exe.run(main, feed={"scores": s, "label": lab})
    hits = int((np.argsort(-s, axis=1, kind="stable")[:, :k] == lab).any(axis=1).sum())
    np.testing.assert_allclose(acc.eval(exe), [hits / 3], rtol=1e-6)  # the earlier batches are gone


def test_states_and_the_ops_of_main_reset_and_eval(setup):
    main, startup, scores, label = setup
    acc = rf.evaluator.Accuracy(input=scores, label=label)
    assert [op.type for op in main.global_block().ops] == [
        "top_k",
        "accuracy",
        "cast",
        "sum",
        "cast",
        "sum",
    ]
    assert len(acc.states) == 2 and len(acc.metrics) == 1
    for state in acc.states:
        assert state.persistable and state.dtype == "int64" and state.shape == (1,)
        assert not isinstance(state, rf.Parameter)
    sums = [op for op in main.global_block().ops if op.type == "sum"]
    assert {op.output("Out")[0] for op in sums} == {s.name for s in acc.states}
    assert all(op.output("Out")[0] in op.input("X") for op in sums)  # state += batch count
    inits = [
        op
        for op in startup.global_block().ops
        if op.output("Out")[0] in {s.name for s in acc.states}
    ]
    assert len(inits) == 2 and all(
        op.type == "fill_constant" and op.attrs["value"] == 0 for op in inits
    )

    exe = rf.Executor(rf.CPUPlace())
    exe.run(startup)
    s, lab = next(batches(1, 4))
    exe.run(main, feed={"scores": s, "label": lab})
    with timers.recording() as eval_table:
        acc.eval(exe)
    with timers.recording() as reset_table:
        acc.reset(exe)
    assert {n: reset_table[n].count for n in ("ExecutorRunTimer", "fill_constant")} == {
        "ExecutorRunTimer": 1, "fill_constant": 2}
    assert {
        n: eval_table[n].count for n in ("ExecutorRunTimer", "cast", "elementwise_div", "fetch")
    } == {"ExecutorRunTimer": 1, "cast": 2, "elementwise_div": 1, "fetch": 1}
    assert "top_k" not in eval_table  # a fresh program: nothing of main runs again
