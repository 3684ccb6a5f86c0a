"""Helpers the suites share: the workload, the distinct ops of the training
program, their test ids, and the executor ablation table."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from tabulate import tabulate

from pytest_opperf.glue.settings import SETTINGS
from pytest_opperf.plugin import session_info
from reference_framework.benchmark import (
    WORKLOADS,
    BenchmarkConfig,
    TrainingProgram,
    build_training_program,
)
from reference_framework.cost import op_shapes
from reference_framework.data import batch, dataset, reader
from reference_framework.framework import Operator, Program
from reference_framework.registry import get_op_def


def plugin_loaded(config: pytest.Config) -> bool:
    """Whether pytest-opperf runs in this session (not with ``-p no:opperf``): its settings are
    there from its ``pytest_configure`` on."""
    return SETTINGS in config.stash


def on_gpu(config: pytest.Config) -> bool:
    """Whether the session's device is a GPU (never without the plugin)."""
    return plugin_loaded(config) and session_info(config).device.is_gpu


def suite_workload(config: pytest.Config) -> tuple[str, BenchmarkConfig]:
    """The workload's name and benchmark config, on the session's device.
    Without ``--opperf`` the suites are a smoke test: always ``tiny``; without the plugin
    (``-p no:opperf``, :mod:`suites.plain`) ``tiny`` on the CPU."""
    if not plugin_loaded(config):
        return "tiny", WORKLOADS["tiny"].replace(device="CPU")
    info = session_info(config)
    name = info.workload if info.enabled else "tiny"
    return name, WORKLOADS[name].replace(device="GPU" if info.device.is_gpu else "CPU")


def numpy_batches(config: BenchmarkConfig) -> Any:
    """The reference benchmark's batches (synthetic Flowers, shuffled) as numpy arrays, images
    ``[N, 3, H, W]`` float32 and labels ``[N]`` int64, ``config.iterations`` of them (the peer
    suites feed their frameworks these)."""
    train = batch(reader.shuffle(dataset.flowers.train(image_size=config.image_size,
                                                       seed=config.seed), buf_size=config.buf_size,
                                 seed=config.seed), batch_size=config.batch_size)
    shape = (3, config.image_size, config.image_size)
    count = 0
    while True:
        for data in train():
            if count == config.iterations:
                return
            images = np.array([x[0].reshape(shape) for x in data], dtype=np.float32)
            labels = np.array([x[1] for x in data], dtype=np.int64)
            yield images, labels
            count += 1


# --- the executor ablation: what the reference executor's overheads cost ---------------

_OVERHEADS = [("clone", ["ProgramCloneTimer"]), ("op creation", ["CreateOpTimer"]),
              ("local scope", ["CreateLocalScopeTimer", "DeleteLocalScopeTimer"])]


def ablation_lines(runs: list[Any]) -> list[str]:
    """One row per e2e run of the ResNet-50 suite: throughput, Python share and
    the per-step cost (ms) of each executor overhead, then the speed-up of switching
    them all off. Empty when the suite's runs are not there."""
    rows = []
    for run in runs:
        executor = run.config.get("executor") if run.kind == "e2e" else None
        if executor is None or not run.batches:
            continue
        totals = {s.name: s.total_ms for s in run.stats}
        per_step = [sum(totals.get(n, 0.0) for n in names) / run.batches for _, names in _OVERHEADS]
        rows.append([run.config.get("workload", ""), executor, run.examples_per_sec,
                     100 * run.python_share, *per_step, totals.get("ExecutorRunTimer",
                                                                   0.0) / run.batches,
                     run.kernel_ms / run.batches])
    if not rows:
        return []
    # headers on several lines keep the table within 100 columns; the costs are ms per step
    headers = ["workload", "executor", "examples\n/sec", "Python\n%", "clone\nms",
               "op\ncreation\nms", "local\nscope\nms", "executor\nms", "kernels\nms"]
    lines = tabulate(rows, headers=headers, floatfmt=".3f").splitlines()
    by_setting = {(r[0], r[1]): r[2] for r in rows}
    for (name, executor), eps in by_setting.items():
        faithful = by_setting.get((name, "faithful"))
        if executor != "faithful" and faithful:
            lines.append(f"{name}: {executor} runs {eps / faithful:.2f}x the faithful executor's "
                         "examples/sec")
    return lines


# --- the distinct ops of the training program -----------------------------------------

@functools.cache
def training_program(config: BenchmarkConfig) -> TrainingProgram:
    """The benchmark's training program for ``config``, built once per process
    (collection and the fixtures must see the same ops)."""
    return build_training_program(config)


@dataclass(frozen=True)
class OpCase:
    """One distinct (op type, input shapes, attributes) of a program."""

    id: str  # e.g. conv2d-N8xC64x56x56-k3s1p1-o64
    index: int  # of its first occurrence in the global block
    type: str
    shapes: dict[str, list[tuple[int, ...]]] = field(compare=False)


def _dims(shape: tuple[int, ...], batched: bool = True) -> str:
    """NCHW activations as N8xC64x56x56; anything else (weights...) as 64x3x7x7."""
    if batched and len(shape) == 4:
        n, c, h, w = shape
        return f"N{n}xC{c}x{h}x{w}"
    return "x".join(map(str, shape)) or "scalar"


def _hw(values: list[int]) -> str:
    return str(values[0]) if len(set(values)) == 1 else "x".join(map(str, values))


def shape_id(op: Operator, shapes: dict[str, list[tuple[int, ...]]]) -> str:
    """The shape part of a test id: the main input's dims, plus the attributes
    that tell ops of one shape apart (kernel, stride, padding, channels out...)."""
    slots = [name for name in get_op_def(op.type).input_slots if name in shapes]
    main = shapes[slots[0]] if slots else [tuple(op.attrs.get("shape", ()))]
    declared = op.block.var(op.inputs[slots[0]][0]).shape if slots else ()
    text = (f"{len(main)}x" if len(main) > 1 else "") + _dims(main[0],
                                                              batched=declared is not None
                                                              and declared[:1] == (-1,))
    a = op.attrs
    if op.type.startswith("conv2d"):
        w = shapes["Filter"][0]
        text += f"-k{_hw(list(w[2:]))}s{_hw(a['strides'])}p{_hw(a['paddings'])}-o{w[0]}"
        if a["groups"] != 1:
            text += f"-g{a['groups']}"
    elif op.type.startswith("pool2d"):
        text += f"-{a['pooling_type']}-" + (
            "global" if a["global_pooling"]
            else f"k{_hw(a['ksize'])}s{_hw(a['strides'])}p{_hw(a['paddings'])}")
    elif "Y" in shapes and shapes["Y"][0] != main[0]:  # broadcasting binary ops, mul
        text += "-" + _dims(shapes["Y"][0])
    return text


def distinct_ops(program: Program, batch_size: int) -> list[OpCase]:
    """Every distinct (op, input shapes, attributes) of the program's global
    block, in program order (feed and fetch are the executor's, not the program's)."""
    cases: dict[tuple, OpCase] = {}
    ids: set[str] = set()
    for index, op in enumerate(program.global_block().ops):
        shapes = op_shapes(op, batch_size)
        if op.type in ("feed", "fetch") or shapes is None:
            continue
        key = (op.type, tuple(sorted((k, tuple(v)) for k, v in shapes.items())),
               tuple(sorted((k, repr(v)) for k, v in op.attrs.items())))
        if key in cases:
            continue
        case_id = base = f"{op.type}-{shape_id(op, shapes)}"
        n = 2
        while case_id in ids:  # same shapes, other attributes (e.g. momentum's mu)
            case_id, n = f"{base}-{n}", n + 1
        ids.add(case_id)
        cases[key] = OpCase(case_id, index, op.type, shapes)
    return list(cases.values())
