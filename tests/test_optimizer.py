"""Momentum.minimize: the state and ops it adds, and the updates they make."""

from __future__ import annotations

import numpy as np
import pytest

import reference_framework as rf
from reference_framework import layers


@pytest.fixture
def classifier():
    """softmax(fc(x)) with cross entropy, plus a frozen parameter nothing trains."""
    main, startup = rf.Program(), rf.Program()
    with rf.unique_name_guard(), rf.program_guard(main, startup), rf.scope_guard(rf.Scope()):
        x = layers.data("x", [5], "float64")
        label = layers.data("label", [1], "int64")
        frozen = main.global_block().create_parameter("frozen", [5], "float64", trainable=False)
        startup.global_block().create_var(
            name="frozen", shape=[5], dtype="float64", persistable=True
        )
        startup.global_block().append_op("fill_constant", outputs={"Out": ["frozen"]},
                                         attrs={"shape": [5], "value": 0.5, "dtype": "float64"})
        probs = layers.fc(layers.elementwise_add(x, frozen), size=3, act="softmax")
        loss = layers.mean(layers.cross_entropy(probs, label))
        yield main, startup, loss


def momentum_ops(main: rf.Program) -> list[rf.Operator]:
    return [op for op in main.global_block().ops if op.type == "momentum"]


def test_minimize_adds_one_rate_one_velocity_and_one_momentum_op_per_trainable_parameter(
    classifier,
):
    main, startup, loss = classifier
    ops, pairs = rf.optimizer.Momentum(learning_rate=0.1, momentum=0.9).minimize(loss)
    trainable = [p.name for p in main.global_block().all_parameters() if p.trainable]
    assert [p.name for p, _ in pairs] == trainable and len(trainable) == 2
    assert ops == momentum_ops(main) and len(ops) == 2
    rates = {op.input("LearningRate")[0] for op in ops}
    assert len(rates) == 1
    rate = main.global_block().var(rates.pop())
    assert rate.persistable and rate.shape == (1,)
    for op, (param, grad) in zip(ops, pairs, strict=True):
        velocity = main.global_block().var(op.input("Velocity")[0])
        assert op.input("Param") == op.output("ParamOut") == [param.name]
        assert op.input("Grad") == [grad.name] and op.output("VelocityOut") == [velocity.name]
        assert (
            velocity.persistable and velocity.shape == param.shape and velocity.dtype == param.dtype
        )
        assert op.attrs == {"mu": 0.9, "use_nesterov": False}
    inits = {op.output("Out")[0]: op for op in startup.global_block().ops}
    assert inits[rate.name].type == "fill_constant" and inits[rate.name].attrs["value"] == 0.1
    for op in ops:
        init = inits[op.input("Velocity")[0]]
        assert init.type == "fill_constant" and init.attrs["value"] == 0.0


def test_each_step_is_v_mu_plus_g_then_p_minus_lr_v(classifier):
    main, startup, loss = classifier
    lr, mu = 0.5, 0.9
    _, pairs = rf.optimizer.Momentum(learning_rate=lr, momentum=mu).minimize(loss)
    exe = rf.Executor(rf.CPUPlace())
    exe.run(startup)
    scope = rf.global_scope()
    rng = np.random.default_rng(0)
    feed = {"x": rng.standard_normal((6, 5)), "label": rng.integers(0, 3, (6, 1))}
    velocity = {p.name: np.zeros(p.shape) for p, _ in pairs}
    losses = []
    for _ in range(4):
        before = {p.name: scope.find_var(p.name).value.copy() for p, _ in pairs}
        out = exe.run(main, feed=feed, fetch_list=[loss] + [g for _, g in pairs])
        losses.append(out[0][0])
        for (p, _), g in zip(pairs, out[1:], strict=True):
            velocity[p.name] = mu * velocity[p.name] + g
            np.testing.assert_allclose(
                scope.find_var(p.name).value,
                before[p.name] - lr * velocity[p.name],
                rtol=1e-12,
                atol=1e-15,
                err_msg=p.name,
            )
    assert losses[-1] < losses[0]
    np.testing.assert_array_equal(scope.find_var("frozen").value, np.full(5, 0.5))


def test_float32_parameters_stay_float32():
    main, startup = rf.Program(), rf.Program()
    with rf.unique_name_guard(), rf.program_guard(main, startup), rf.scope_guard(rf.Scope()):
        x = layers.data("x", [4])
        loss = layers.mean(layers.fc(x, size=2))
        rf.optimizer.Momentum(learning_rate=0.01, momentum=0.9).minimize(loss)
        exe = rf.Executor(rf.CPUPlace())
        exe.run(startup)
        exe.run(main, feed={"x": np.ones((2, 4), np.float32)})
        for p in main.global_block().all_parameters():
            assert rf.global_scope().find_var(p.name).value.dtype == np.float32


def test_bad_hyperparameters_are_errors():
    with pytest.raises(ValueError, match="learning_rate must be a positive number, given 0"):
        rf.optimizer.Momentum(learning_rate=0, momentum=0.9)
    with pytest.raises(ValueError, match=r"momentum must be in \[0, 1\), given 1.5"):
        rf.optimizer.Momentum(learning_rate=0.1, momentum=1.5)
