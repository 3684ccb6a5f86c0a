"""The operator registry: each op type declared as data, plus ``run_op``.

An :class:`OpDef` says what an op takes and gives - input and output slots
(duplicable ones hold a list of variables, optional ones may be left out),
attributes with their defaults - together with its kernel, an optional shape
inference, an optional cost model (FLOPs and bytes) and the maker of its
gradient ops. Creating an operator checks its description against the OpDef,
so a wrong slot or attribute fails where the program is built, with a message
that says what was needed and what was given.

A kernel is ``kernel(ins, attrs, ctx) -> outs``: ``ins`` maps each input slot
to an array (a list of arrays for a duplicable slot, ``None`` for an optional
slot left out); it returns the output arrays it produced, by slot. Kernels are
written once for numpy and cupy, taking the array module from ``ctx.xp``.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pytest_opperf import timers

from .backend import CPUPlace, CUDAPlace, Place, array_module, device_scope, is_gpu_array, to_place

__all__ = [
    "REQUIRED",
    "GradMaker",
    "KernelContext",
    "OpDef",
    "OpError",
    "OpSpec",
    "RuntimeOp",
    "Slot",
    "create_op",
    "duplicable",
    "get_op_def",
    "grad_var_name",
    "make_grad",
    "optional",
    "register",
    "registered_ops",
    "run_op",
]

GRAD_SUFFIX = "@GRAD"


def grad_var_name(name: str) -> str:
    """The name of the gradient of variable (or slot) ``name``: ``name@GRAD``."""
    return name + GRAD_SUFFIX


class OpError(ValueError):
    """An operator was described or called wrongly; the message says how."""


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()  # the default of an attribute that must be given


@dataclass(frozen=True)
class Slot:
    """An input or output slot of an op."""

    name: str
    duplicable: bool = False  # holds a list of variables (``sum``'s X)
    optional: bool = False  # may be absent or empty (unneeded gradients)


def optional(name: str) -> Slot:
    """A slot that may be left out (a gradient nobody needs)."""
    return Slot(name, optional=True)


def duplicable(name: str, optional: bool = False) -> Slot:
    """A slot holding a list of variables."""
    return Slot(name, duplicable=True, optional=optional)


def _slots(specs: Iterable[str | Slot]) -> tuple[Slot, ...]:
    return tuple(s if isinstance(s, Slot) else Slot(s) for s in specs)


@dataclass(frozen=True)
class OpSpec:
    """An op to append: what gradient makers return and ``append_op`` takes."""

    type: str
    inputs: dict[str, list[str]]
    outputs: dict[str, list[str]]
    attrs: dict[str, Any] = field(default_factory=dict)


# A gradient maker turns a forward op (anything with .type/.inputs/.outputs/
# .attrs) into the gradient ops computing its inputs' gradients from its
# outputs' gradients. Gradient outputs are named grad_var_name(input var).
GradMaker = Callable[[Any], list[OpSpec]]
Shapes = dict[str, list[tuple[int, ...]]]  # by slot


@dataclass
class OpDef:
    """Everything the framework knows about one op type."""

    type: str
    inputs: Sequence[str | Slot]  # names or Slots: input_slots holds them as Slots, by name
    outputs: Sequence[str | Slot]
    kernel: Callable[[dict[str, Any], dict[str, Any], KernelContext], dict[str, Any]]
    attrs: Mapping[str, Any] = field(default_factory=dict)
    # attrs -> None, raising OpError naming attribute, expected and given value
    check_attrs: Callable[[dict[str, Any]], None] | None = None
    # (input shapes by slot, attrs) -> output shapes by slot; -1 is the batch dim
    infer_shape: Callable[[Shapes, dict[str, Any]], Shapes] | None = None
    # (input shapes by slot, attrs, itemsize) -> (flops, bytes moved)
    cost: Callable[[Shapes, dict[str, Any], int], tuple[float, float]] | None = None
    grad: GradMaker | None = None

    def __post_init__(self) -> None:
        self.input_slots = {s.name: s for s in _slots(self.inputs)}
        self.output_slots = {s.name: s for s in _slots(self.outputs)}
        self.inputs = tuple(self.input_slots.values())
        self.outputs = tuple(self.output_slots.values())

    def complete_attrs(self, given: Mapping[str, Any] | None) -> dict[str, Any]:
        """``given`` checked and completed with defaults (a new dict)."""
        given = dict(given or {})
        unknown = [k for k in given if k not in self.attrs]
        if unknown:
            raise OpError(
                f"{self.type}: unknown attribute {unknown[0]!r}; {self.type} takes "
                f"{sorted(self.attrs) or 'no attributes'}"
            )
        attrs = {}
        for name, default in self.attrs.items():
            if name in given:
                attrs[name] = _check_attr_type(self.type, name, default, given[name])
            elif default is REQUIRED:
                raise OpError(f"{self.type}: attribute {name!r} is required and was not given")
            else:
                attrs[name] = list(default) if isinstance(default, list) else default
        if self.check_attrs is not None:
            self.check_attrs(attrs)
        return attrs

    def check_slots(self, kind: str, declared: Mapping[str, Slot],
                    given: Mapping[str, Sequence[Any]]) -> None:
        """Check the slots of one side (inputs or outputs) of a description."""
        for name in given:
            if name not in declared:
                raise OpError(
                    f"{self.type}: unknown {kind} slot {name!r}; {self.type} has {kind}s "
                    f"{[s.name for s in declared.values()]}"
                )
        for slot in declared.values():
            args = given.get(slot.name, ())
            if not args and not slot.optional:
                raise OpError(
                    f"{self.type}: {kind} slot {slot.name!r} is required; given {kind}s "
                    f"{sorted(given) or 'none'}"
                )
            if len(args) > 1 and not slot.duplicable:
                raise OpError(
                    f"{self.type}: {kind} slot {slot.name!r} takes one variable, given "
                    f"{len(args)}: {list(args)}"
                )


def _check_attr_type(op_type: str, name: str, default: Any, value: Any) -> Any:
    """``value`` if it has the type the default implies (dtype names normalised)."""
    def bad(expected: str) -> OpError:
        return OpError(f"{op_type}: attribute {name!r} expects {expected}, given {value!r}")

    if name.endswith("dtype"):
        try:
            return np.dtype(value).name
        except TypeError:
            raise bad("a numpy dtype name such as 'float32'") from None
    if default is REQUIRED or default is None:
        return value
    if isinstance(default, bool):
        if not isinstance(value, (bool, np.bool_)):
            raise bad("a bool")
        return bool(value)
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise bad("an int")
        return int(value)
    if isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise bad("a number")
        return float(value)
    if isinstance(default, str):
        if not isinstance(value, str):
            raise bad("a string")
        return value
    if isinstance(default, list):
        if not isinstance(value, (list, tuple)):
            raise bad("a list")
        if default and isinstance(default[0], (int, float)) and not isinstance(default[0], bool):
            kind = type(default[0])
            try:
                return [kind(v) for v in value]
            except (TypeError, ValueError):
                raise bad(f"a list of {kind.__name__}s") from None
        return list(value)
    return value


_OPS: dict[str, OpDef] = {}


def register(opdef: OpDef) -> OpDef:
    """Add an op type to the registry (once)."""
    if opdef.type in _OPS:
        raise OpError(f"op type {opdef.type!r} is registered twice")
    _OPS[opdef.type] = opdef
    return opdef


def get_op_def(op_type: str) -> OpDef:
    """The OpDef of ``op_type``; an unknown type is an error suggesting near names."""
    opdef = _OPS.get(op_type)
    if opdef is None:
        near = difflib.get_close_matches(str(op_type), _OPS, n=3)
        hint = f"; did you mean {' or '.join(map(repr, near))}?" if near else ""
        raise OpError(f"unknown op type {op_type!r}: it is not registered{hint}")
    return opdef


def registered_ops() -> list[str]:
    return sorted(_OPS)


def make_grad(
    grad_type: str,
    inputs: Sequence[str] = (),
    outputs: Sequence[str] = (),
    grads_of: Sequence[str] = (),
    grads_for: Sequence[str] = (),
) -> GradMaker:
    """A gradient maker for the common case: one gradient op.

    The gradient op takes the forward op's ``inputs`` and ``outputs`` slots (only
    those backward needs), the gradients of the outputs in ``grads_of`` as
    ``Slot@GRAD``, and writes the gradients of the inputs in ``grads_for`` as
    ``Slot@GRAD``. It copies the forward attributes.
    """

    def maker(op: Any) -> list[OpSpec]:
        ins = {s: list(op.inputs[s]) for s in inputs if op.inputs.get(s)}
        ins.update({s: list(op.outputs[s]) for s in outputs if op.outputs.get(s)})
        for s in grads_of:
            ins[grad_var_name(s)] = [grad_var_name(n) for n in op.outputs[s]]
        outs = {grad_var_name(s): [grad_var_name(n) for n in op.inputs[s]]
                for s in grads_for if op.inputs.get(s)}
        return [OpSpec(grad_type, ins, outs, dict(op.attrs))]

    return maker


class KernelContext:
    """What a kernel may know besides its inputs and attributes."""

    __slots__ = ("place", "xp", "op_type", "wanted", "outputs", "scope")

    def __init__(self, place: Place, xp: Any, op_type: str, wanted: frozenset[str],
                 outputs: Mapping[str, list[str]] | None = None) -> None:
        self.place = place
        self.xp = xp
        self.op_type = op_type
        self.wanted = wanted  # output slots to produce (unneeded gradients are left out)
        self.outputs = outputs or {}
        self.scope: Any = None  # set while the op runs in a program

    def wants(self, slot: str) -> bool:
        return slot in self.wanted

    def output_value(self, slot: str) -> Any:
        """The current value of the (first) variable an output slot writes, or
        ``None`` (always ``None`` under :func:`run_op`, which has no variables)."""
        names = self.outputs.get(slot)
        if not names or self.scope is None:
            return None
        var = self.scope.find_var(names[0])
        return None if var is None else var.value


class RuntimeOp:
    """An operator created from its description, ready to run on a place.

    Creating one (the executor's ``CreateOpTimer``) looks the type up, checks and
    completes the attributes and binds the kernel.
    """

    __slots__ = ("type", "opdef", "inputs", "outputs", "attrs", "ctx", "_in_items", "_out_items")

    def __init__(self, op_type: str, inputs: Mapping[str, list[str]],
                 outputs: Mapping[str, list[str]], attrs: Mapping[str, Any], place: Place,
                 xp: Any) -> None:
        opdef = get_op_def(op_type)
        self.type = op_type
        self.opdef = opdef
        self.inputs = {k: list(v) for k, v in inputs.items()}
        self.outputs = {k: list(v) for k, v in outputs.items()}
        self.attrs = opdef.complete_attrs(attrs)
        wanted = frozenset(k for k, v in self.outputs.items() if v)
        self.ctx = KernelContext(place, xp, op_type, wanted, self.outputs)
        slots = opdef.input_slots
        self._in_items = [(k, v, slots[k].duplicable) for k, v in self.inputs.items() if k in slots]
        self._out_items = [(k, v, opdef.output_slots[k].duplicable) for k, v in self.outputs.items()
                           if v]

    def run(self, scope: Any) -> None:
        """Read the inputs from ``scope``, run the kernel, write the outputs."""
        ins: dict[str, Any] = {}
        for slot, names, many in self._in_items:
            if many:
                ins[slot] = [_read(scope, self.type, slot, n) for n in names]
            elif names:
                ins[slot] = _read(scope, self.type, slot, names[0])
            else:
                ins[slot] = None
        ctx = self.ctx
        ctx.scope = scope
        outs = self.opdef.kernel(ins, self.attrs, ctx)
        for slot, names, many in self._out_items:
            if slot not in outs:
                continue
            value = outs[slot]
            if many:
                for n, v in zip(names, value, strict=True):
                    _holder(scope, self.type, n).value = v
            else:
                _holder(scope, self.type, names[0]).value = value


def _holder(scope: Any, op_type: str, name: str) -> Any:
    var = scope.find_var(name)
    if var is None:
        raise OpError(f"{op_type}: variable {name!r} is not in the scope")
    return var


def _read(scope: Any, op_type: str, slot: str, name: str) -> Any:
    value = _holder(scope, op_type, name).value
    if value is None:
        raise OpError(f"{op_type}: input {slot} variable {name!r} has no value (nothing wrote it)")
    return value


def create_op(desc: Any, place: Place, xp: Any) -> RuntimeOp:
    """A runnable op from a description (``framework.Operator`` or :class:`OpSpec`)."""
    return RuntimeOp(desc.type, desc.inputs, desc.outputs, desc.attrs, place, xp)


def _infer_place(inputs: Mapping[str, Any]) -> Place:
    for value in inputs.values():
        for a in value if isinstance(value, (list, tuple)) else (value,):
            if is_gpu_array(a):
                return CUDAPlace(a.device.id)
    return CPUPlace()


def run_op(op_type: str, inputs: Mapping[str, Any], attrs: Mapping[str, Any] | None = None,
           place: Place | None = None) -> dict[str, Any]:
    """Run one op on arrays, without a program: ``{"X": x, ...} -> {"Out": y, ...}``.

    Inputs are keyed by slot (a list of arrays for a duplicable slot) and moved
    to ``place`` (default: where the inputs are, else the CPU). Every output slot
    is computed and returned, as arrays of the place; on a GPU place everything
    runs with the place's device current. In-place ops (``momentum``,
    ``batch_norm``'s running statistics) update their input arrays, as in a
    program. Timed as a kernel region named ``op_type``.
    """
    opdef = get_op_def(op_type)
    place = place or _infer_place(inputs)
    with device_scope(place):  # inputs, outputs and launches on the place's device
        return _run_op(opdef, op_type, inputs, attrs, place)


def _run_op(opdef: OpDef, op_type: str, inputs: Mapping[str, Any], attrs: Mapping[str, Any] | None,
            place: Place) -> dict[str, Any]:
    xp = array_module(place)
    opdef.check_slots("input", opdef.input_slots,
                      {k: (v if isinstance(v, (list, tuple)) else [v]) if v is not None else []
                       for k, v in inputs.items()})
    full_attrs = opdef.complete_attrs(attrs)
    ins: dict[str, Any] = {}
    for slot in opdef.input_slots.values():
        value = inputs.get(slot.name)
        if value is None:
            ins[slot.name] = None
        elif slot.duplicable:
            if not isinstance(value, (list, tuple)):
                raise OpError(f"{op_type}: input slot {slot.name!r} is duplicable and takes a list "
                              "of arrays, "
                              f"given {type(value).__name__}")
            ins[slot.name] = [to_place(v, place) for v in value]
        else:
            ins[slot.name] = to_place(value, place)
    ctx = KernelContext(place, xp, op_type, frozenset(opdef.output_slots))
    with timers.timer(op_type, kernel=True):
        outs = opdef.kernel(ins, full_attrs, ctx)
    return dict(outs)
