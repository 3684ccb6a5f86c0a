"""Every op of the ResNet-50 training program, at every distinct (op, input
shapes, attributes) the program contains, timed through pytest-benchmark.

The cases are collected from the built program at the workload's size (ids
like ``test_op[conv2d-N8xC64x56x56-k3s1p1-o64]``). Inputs are the real values
of one training step, run with a kept local scope, each array on a cache line
(:func:`aligned`). Before timing, a quick
check: the kernel's outputs have the shapes and dtypes the program declares,
and are finite. Without ``--opperf`` the kernel runs once (a smoke test).
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import pytest

from reference_framework.backend import array_module, to_host
from reference_framework.benchmark import BenchmarkConfig
from reference_framework.cost import op_work
from reference_framework.executor import Executor
from reference_framework.registry import KernelContext, get_op_def
from reference_framework.scope import Scope
from suites.support import OpCase, distinct_ops, suite_workload, training_program


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "case" in metafunc.fixturenames:
        _, config = suite_workload(metafunc.config)
        cases = distinct_ops(training_program(config).main, config.batch_size)
        metafunc.parametrize("case", cases, ids=[c.id for c in cases])


@pytest.fixture(scope="module")
def step_scope(workload: tuple[str, BenchmarkConfig], place: Any) -> Scope:
    """The local scope of one training step, kept: every op's inputs, as computed."""
    config = workload[1]
    built = training_program(config)
    rng = np.random.default_rng(config.seed)
    images = rng.standard_normal((config.batch_size, *built.image_shape), dtype=np.float32)
    labels = rng.integers(0, config.class_dim, (config.batch_size, 1), dtype=np.int64)
    scope = Scope()
    exe = Executor(place, reuse_local_scope=True)
    exe.run(built.startup, scope=scope)
    exe.run(built.main, feed={"data": images, "label": labels}, fetch_list=[built.avg_cost],
            scope=scope)
    (local,) = [kid for kid in scope.kids() if kid.find_local_var(built.avg_cost.name) is not None]
    return local


# The alignment of every input array: a cache line.
ALIGN = 64


def _value(scope: Scope, name: str) -> Any:
    var = scope.find_var(name)
    if var is None:
        raise KeyError(f"variable {name!r} is not in the step scope")
    return aligned(var.value)


def aligned(value: Any) -> Any:
    """``value`` at a cache line's alignment: a copy in the same order (C or Fortran) when it
    starts elsewhere, so an op's time does not depend on where the step's allocations put its
    inputs (an input 16 bytes off a cache line made relu 10 % slower here, and where the heap puts
    it moves with every allocation before it, so with any change of the code). Arrays that are
    not contiguous, and other values, as they are."""
    if not isinstance(value, np.ndarray) or value.size == 0 or value.ctypes.data % ALIGN == 0:
        return value
    order: Literal["C", "F"]
    if value.flags.c_contiguous:
        order = "C"
    elif value.flags.f_contiguous:
        order = "F"
    else:
        return value
    raw = np.empty(value.nbytes + ALIGN, dtype=np.uint8)
    start = -raw.ctypes.data % ALIGN
    out = np.ndarray(value.shape, value.dtype, raw, start, order=order)
    out[...] = value
    return out


def test_op(case: OpCase, step_scope: Scope, workload: tuple[str, BenchmarkConfig], place: Any,
            opperf_benchmark: Any) -> None:
    config = workload[1]
    op = training_program(config).main.global_block().ops[case.index]
    opdef = get_op_def(op.type)
    ins = {slot: [_value(step_scope, n) for n in names] if opdef.input_slots[slot].duplicable
           else _value(step_scope, names[0]) for slot, names in op.inputs.items() if names}
    ctx = KernelContext(place, array_module(place), op.type,
                        frozenset(k for k, v in op.outputs.items() if v))

    outs = opdef.kernel(ins, op.attrs, ctx)
    for slot, names in op.outputs.items():
        if not names or slot not in outs:
            continue
        var = op.block.var(names[0])
        got = to_host(outs[slot][0] if isinstance(outs[slot], list) else outs[slot])
        want = tuple(config.batch_size if d == -1 else d for d in var.known_shape)
        assert (got.shape, got.dtype.name) == (want, var.dtype), f"{case.id}: output {slot}"
        if np.issubdtype(got.dtype, np.floating):
            assert np.isfinite(got).all(), f"{case.id}: output {slot} is not finite"

    work = op_work(op, config.batch_size)
    opperf_benchmark.describe(stat=op.type, kind="op",
                              config={"op": op.type, "inputs": {k: [list(s) for s in v]
                                                                for k, v in case.shapes.items()},
                                      "attrs": op.attrs}, flops=work.flops if work else None,
                              bytes=work.bytes if work else None)
    opperf_benchmark(opdef.kernel, ins, op.attrs, ctx)
