"""The work a program does: FLOPs and bytes moved per op, from the ops' cost models.

Reports divide these by measured time to show achieved GFLOP/s and GB/s.
Shapes come from the program's variable descriptions with the batch
dimension (-1) set to the batch size.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from .framework import Operator, Program
from .registry import get_op_def

__all__ = ["OpWork", "op_shapes", "op_work", "program_work"]


@dataclass(frozen=True)
class OpWork:
    flops: float
    bytes: float


def op_shapes(op: Operator, batch_size: int) -> dict[str, list[tuple[int, ...]]] | None:
    """The op's input shapes by slot, batch dimension filled in; ``None`` when
    some input's shape is unknown."""
    shapes = {}
    for slot, names in op.inputs.items():
        dims = [op.block.var(n).shape for n in names]
        shapes[slot] = [tuple(batch_size if d == -1 else d for d in s)
                        for s in dims if s is not None]
        if len(shapes[slot]) < len(dims):
            return None
    return shapes


def op_work(op: Operator, batch_size: int) -> OpWork | None:
    """FLOPs and bytes of one run of ``op``, or ``None`` when its type has no cost model."""
    cost = get_op_def(op.type).cost
    shapes = op_shapes(op, batch_size)
    if cost is None or shapes is None:
        return None
    first = next((n for names in op.inputs.values() for n in names), None)
    itemsize = np.dtype(op.block.var(first).dtype).itemsize if first else 4
    flops, nbytes = cost(shapes, op.attrs, itemsize)
    return OpWork(float(flops), float(nbytes))


def _ops(program: Program) -> Iterator[Operator]:
    for block in program.blocks:
        yield from block.ops


def program_work(program: Program, batch_size: int) -> dict[str, OpWork]:
    """Work of one run of ``program``, summed per op type (types without a cost model left out)."""
    totals: dict[str, list[float]] = {}
    for op in _ops(program):
        work = op_work(op, batch_size)
        if work is not None:
            t = totals.setdefault(op.type, [0.0, 0.0])
            t[0] += work.flops
            t[1] += work.bytes
    return {name: OpWork(f, b) for name, (f, b) in totals.items()}
