"""Automatic differentiation of a program: ``append_backward`` adds the gradient ops.

The gradient of variable ``x`` is the variable ``x@GRAD``. Starting from
``loss@GRAD`` (a ``fill_constant`` of ones), the ops that lead to the loss are
visited in reverse and each one's gradient ops come from its OpDef's gradient
maker. Because a block is a straight line of ops, every consumer of a
variable comes after its producer, so by the time an op is visited all
contributions to its outputs' gradients have been emitted.

A gradient written by several gradient ops (a variable read twice, e.g. a
ResNet block's input feeding both branches) is accumulated: each write goes
to ``x@GRAD@RENAME@k`` and a ``sum`` into ``x@GRAD`` is inserted before the
first op that reads it.

No gradient is computed into or through a ``stop_gradient`` variable (data,
labels, running statistics, non-trainable parameters): gradient outputs for
such variables are dropped, and gradient ops left with nothing to compute are
not emitted. The forward ops are never modified.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .framework import Block, Operator, Parameter, Variable
from .registry import GRAD_SUFFIX, OpError, get_op_def, grad_var_name

__all__ = ["append_backward", "RENAME"]

RENAME = "@RENAME@"


@dataclass
class _GradOp:
    """A gradient op being planned (mutable, unlike the makers' OpSpec)."""

    type: str
    inputs: dict[str, list[str]]
    outputs: dict[str, list[str]]
    attrs: dict


def append_backward(loss: Variable, parameter_list: Sequence[str | Variable] | None = None,
                    no_grad_set: Iterable[str] | None = None) -> list[tuple[Parameter, Variable]]:
    """Append to ``loss``'s block the ops computing the gradient of ``loss``.

    Returns the (parameter, gradient variable) pairs of the trainable
    parameters (``parameter_list``, default: all of the program's) that the
    loss depends on. ``no_grad_set`` names further variables to treat as
    ``stop_gradient``.
    """
    block = loss.block
    if loss.shape is not None and any(d != 1 for d in loss.shape):
        raise ValueError(f"append_backward: the loss must have shape [1], {loss.name!r} has "
                         f"{list(loss.shape)}")
    if block.has_var(grad_var_name(loss.name)):
        raise ValueError(f"append_backward: {grad_var_name(loss.name)!r} exists already; the "
                         f"backward of {loss.name!r} was appended before")
    end = _last_writer(block, loss.name)
    forward = block.ops[:end + 1]
    no_grad = {name for name, v in block.program.global_block().vars.items() if v.stop_gradient}
    no_grad |= {name for name, v in block.vars.items() if v.stop_gradient}
    no_grad |= set(no_grad_set or ())
    differentiable = _differentiable(forward, no_grad)

    seed = _GradOp("fill_constant", {}, {"Out": [grad_var_name(loss.name)]},
                   {"shape": [1], "value": 1.0, "dtype": loss.dtype})
    planned, have_grad = _plan(block, forward, differentiable, loss.name)
    planned = _accumulate([seed] + planned)

    _create_grad_vars(block, planned)
    for g in planned:
        block.append_op(g.type, inputs=g.inputs, outputs=g.outputs, attrs=g.attrs)
    return _params_grads(block, parameter_list, have_grad)


def _last_writer(block: Block, name: str) -> int:
    for i in range(len(block.ops) - 1, -1, -1):
        if name in block.ops[i].output_arg_names:
            return i
    raise ValueError(f"append_backward: no op of block {block.idx} computes the loss {name!r}")


def _differentiable(forward: list[Operator], no_grad: set[str]) -> set[str]:
    """Variables a gradient can be computed for: leaves (read before anything
    writes them) that are not stop_gradient, and what ops make from
    differentiable inputs. (The outputs of an op without a gradient count too,
    so that :func:`_plan` reports such an op between a parameter and the loss
    instead of silently cutting the path.)"""
    diff: set[str] = set()
    written: set[str] = set()
    for op in forward:
        ins = op.input_arg_names
        for n in ins:
            if n not in written and n not in no_grad:
                diff.add(n)
        if any(n in diff for n in ins):
            diff.update(n for n in op.output_arg_names if n not in no_grad)
        written.update(op.output_arg_names)
    return diff


def _plan(block: Block, forward: list[Operator], differentiable: set[str],
          loss: str) -> tuple[list[_GradOp], set[str]]:
    """The gradient ops of ``forward`` in execution order, and the variables
    that end up with a gradient."""
    have_grad = {loss}
    planned: list[_GradOp] = []
    for op in reversed(forward):
        if not any(n in have_grad for n in op.output_arg_names):
            continue  # the loss does not depend on this op
        wanted = [n for n in op.input_arg_names if n in differentiable]
        if not wanted:
            continue
        opdef = get_op_def(op.type)
        if opdef.grad is None:
            raise OpError(f"append_backward: op {op.type} (outputs {op.outputs}) has no gradient, "
                          "but lies "
                          f"between {wanted} and the loss {loss!r}; mark its inputs stop_gradient")
        for spec in opdef.grad(op):
            g = _GradOp(spec.type, {k: list(v) for k, v in spec.inputs.items()},
                        {k: list(v) for k, v in spec.outputs.items()}, dict(spec.attrs))
            if not _prune_outputs(block, g, differentiable):
                continue  # every gradient it would compute is unwanted
            planned.extend(_zero_missing(g, op, have_grad))
            planned.append(g)
            have_grad.update(b for names in g.outputs.values()
                             for n in names if (b := _grad_base(n)))
    return planned, have_grad


def _prune_outputs(block: Block, g: _GradOp, differentiable: set[str]) -> bool:
    """Drop the gradient outputs of variables that get no gradient; False if
    nothing is left to compute."""
    kept: dict[str, list[str]] = {}
    for slot, names in g.outputs.items():
        base = [_grad_base(n) for n in names]
        useful = [b is None or b in differentiable for b in base]
        if all(useful):
            kept[slot] = names
        elif any(useful):
            # A list slot must stay aligned with its inputs: the unwanted
            # gradients go to throwaway variables instead.
            kept[slot] = [n if ok else _discard(block, n)
                          for n, ok in zip(names, useful, strict=True)]
    g.outputs = kept
    return any(kept.values())


def _zero_missing(g: _GradOp, op: Operator, have_grad: set[str]) -> list[_GradOp]:
    """``fill_zeros_like`` ops for output gradients ``g`` reads that nothing computed
    (an output of ``op`` that does not lead to the loss)."""
    zeros = []
    outputs = set(op.output_arg_names)
    for names in g.inputs.values():
        for n in names:
            base = _grad_base(n)
            if base in outputs and base not in have_grad:
                zeros.append(_GradOp("fill_zeros_like", {"X": [base]}, {"Out": [n]}, {}))
                have_grad.add(base)
    return zeros


def _accumulate(planned: list[_GradOp]) -> list[_GradOp]:
    """Give every write of a gradient written more than once its own
    ``@RENAME@k`` name, and sum the writes before the first reader."""
    out: list[_GradOp] = []
    pending: dict[str, list[tuple[_GradOp, str, int]]] = {}  # gradient -> its writes not yet read
    renamed: dict[str, int] = {}  # gradient -> renames handed out so far

    def rename(name: str, write: tuple[_GradOp, str, int]) -> str:
        k = renamed.get(name, 0)
        renamed[name] = k + 1
        g, slot, i = write
        g.outputs[slot][i] = new = f"{name}{RENAME}{k}"
        return new

    def summed(name: str) -> _GradOp:
        parts = [g.outputs[slot][i] for g, slot, i in pending.pop(name)]
        return _GradOp("sum", {"X": parts}, {"Out": [name]}, {})

    for g in planned:
        for names in g.inputs.values():
            for n in names:
                writes = pending.get(n)
                if writes is not None and len(writes) > 1:
                    out.append(summed(n))
                elif writes is not None:
                    del pending[n]  # read as written
        for slot, names in g.outputs.items():
            for i, n in enumerate(names):
                if _grad_base(n) is None:
                    continue
                writes = pending.setdefault(n, [])
                writes.append((g, slot, i))
                if len(writes) == 2:
                    rename(n, writes[0])
                if len(writes) >= 2:
                    rename(n, writes[-1])
        out.append(g)
    for n in [n for n, writes in pending.items() if len(writes) > 1]:
        out.append(summed(n))  # gradients of leaves nothing reads afterwards
    return out


def _create_grad_vars(block: Block, planned: list[_GradOp]) -> None:
    """Gradient variables shaped and typed like the variables they belong to."""
    for g in planned:
        for names in g.outputs.values():
            for n in names:
                if block.find_var(n) is not None:
                    continue
                base = block.var(_grad_base(n) or n)
                block.create_var(name=n, shape=base.shape, dtype=base.dtype)


def _params_grads(block: Block, parameter_list: Sequence[str | Variable] | None,
                  have_grad: set[str]) -> list[tuple[Parameter, Variable]]:
    gblock = block.program.global_block()
    if parameter_list is None:
        params = [p for p in gblock.all_parameters() if p.trainable]
    else:
        params = []
        for p in parameter_list:
            var = gblock.var(p.name if isinstance(p, Variable) else p)
            if not isinstance(var, Parameter):
                raise TypeError(f"append_backward: parameter_list takes parameters, given {var!r}")
            params.append(var)
    return [(p, block.var(grad_var_name(p.name))) for p in params if p.name in have_grad]


def _grad_base(name: str) -> str | None:
    """``x`` for ``x@GRAD`` (and ``x@GRAD@RENAME@k``), else None."""
    i = name.find(GRAD_SUFFIX)
    return name[:i] if i > 0 else None


def _discard(block: Block, grad_name: str) -> str:
    """A throwaway variable for an unwanted gradient; its name is not a
    gradient name, so nothing accumulates or reads it."""
    base = block.var(grad_name[:grad_name.index(GRAD_SUFFIX)])
    name = f"{base.name}@UNUSED_GRAD"
    if block.find_var(name) is None:
        block.create_var(name=name, shape=base.shape, dtype=base.dtype)
    return name
