"""Program descriptions: Variable, Operator, Block, Program, and the guards.

A Program is a description, not a computation: blocks of variable
descriptions and operator descriptions (type, slot -> variable names,
attributes). The executor turns the descriptions into runnable ops. An
operator is checked against the registry when it is described, so a wrong
slot or attribute fails while the program is built.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import numpy as np

from .registry import OpError, get_op_def, grad_var_name

__all__ = [
    "Block",
    "Operator",
    "Parameter",
    "Program",
    "Variable",
    "default_main_program",
    "default_startup_program",
    "grad_var_name",
    "program_guard",
    "unique_name",
]

_name_counters: dict[str, itertools.count] = {}


def unique_name(prefix: str) -> str:
    """``prefix_0``, ``prefix_1``... unique within this process (see :func:`unique_name_guard`)."""
    counter = _name_counters.setdefault(prefix, itertools.count())
    return f"{prefix}_{next(counter)}"


@contextmanager
def unique_name_guard() -> Iterator[None]:
    """Fresh name counters inside the block, so equal models get equal names."""
    global _name_counters
    outer, _name_counters = _name_counters, {}
    try:
        yield
    finally:
        _name_counters = outer


def _dtype_name(dtype: Any) -> str:
    try:
        return np.dtype(dtype).name
    except TypeError:
        raise TypeError(f"dtype {dtype!r} is not a numpy dtype name such as 'float32'") from None


_V = TypeVar("_V", bound="Variable")


class Variable:
    """A variable description: name, shape (-1 for the batch dimension), dtype."""

    __slots__ = ("block", "name", "shape", "dtype", "persistable", "stop_gradient")

    def __init__(self, block: Block, name: str, shape: Sequence[int] | None = None,
                 dtype: Any = "float32", persistable: bool = False,
                 stop_gradient: bool = False) -> None:
        self.block = block
        self.name = name
        self.shape = tuple(int(d) for d in shape) if shape is not None else None
        self.dtype = _dtype_name(dtype)
        self.persistable = persistable
        self.stop_gradient = stop_gradient

    @property
    def known_shape(self) -> tuple[int, ...]:
        """The shape, or an error naming the variable when it is unknown."""
        if self.shape is None:
            raise ValueError(f"variable {self.name!r} has no known shape")
        return self.shape

    def _copy_to(self: _V, block: Block) -> _V:
        v = object.__new__(type(self))
        v.block = block
        v.name = self.name
        v.shape = self.shape  # a tuple: immutable, safe to share
        v.dtype = self.dtype
        v.persistable = self.persistable
        v.stop_gradient = self.stop_gradient
        return v

    def __repr__(self) -> str:
        kind = type(self).__name__
        flags = "".join([", persistable" if self.persistable else "",
                         ", stop_gradient" if self.stop_gradient else ""])
        shape = list(self.shape) if self.shape is not None else None
        return f"{kind}({self.name!r}, shape={shape}, dtype={self.dtype}{flags})"


class Parameter(Variable):
    """A persistable variable an optimizer updates (unless not ``trainable``)."""

    __slots__ = ("trainable",)
    shape: tuple[int, ...]  # always known

    def __init__(self, block: Block, name: str, shape: Sequence[int], dtype: Any = "float32",
                 trainable: bool = True) -> None:
        super().__init__(block, name, shape, dtype, persistable=True, stop_gradient=not trainable)
        self.trainable = trainable

    def _copy_to(self, block: Block) -> Parameter:
        v = super()._copy_to(block)
        v.trainable = self.trainable
        return v


def _names(block: Block, op_type: str, kind: str, slot: str, args: Any) -> list[str]:
    """A slot's arguments (a variable or name, or a list of them) as names."""
    if args is None:
        return []
    if isinstance(args, (Variable, str)):
        args = [args]
    names = []
    for a in args:
        name = a.name if isinstance(a, Variable) else a
        if not isinstance(name, str):
            raise OpError(f"{op_type}: {kind} slot {slot!r} takes variables or names, given {a!r}")
        if block.find_var(name) is None:
            raise OpError(f"{op_type}: {kind} slot {slot!r} names variable {name!r}, which is not "
                          f"in block {block.idx} or its parents")
        names.append(name)
    return names


class Operator:
    """An operator description: type, slot -> variable names, attributes."""

    __slots__ = ("block", "type", "inputs", "outputs", "attrs")

    def __init__(self, block: Block, type: str, inputs: Mapping[str, Any] | None = None,
                 outputs: Mapping[str, Any] | None = None,
                 attrs: Mapping[str, Any] | None = None) -> None:
        opdef = get_op_def(type)
        self.block = block
        self.type = type
        self.inputs = {k: _names(block, type, "input", k, v) for k, v in (inputs or {}).items()}
        self.outputs = {k: _names(block, type, "output", k, v) for k, v in (outputs or {}).items()}
        opdef.check_slots("input", opdef.input_slots, self.inputs)
        opdef.check_slots("output", opdef.output_slots, self.outputs)
        self.attrs = opdef.complete_attrs(attrs)
        if opdef.infer_shape is not None:
            self._infer_shapes(opdef)

    def _infer_shapes(self, opdef: Any) -> None:
        shapes = {}
        for slot, names in self.inputs.items():
            vs = [self.block.var(n) for n in names]
            if any(v.shape is None for v in vs):
                return  # not enough known to infer from
            shapes[slot] = [v.shape for v in vs]
        for slot, out_shapes in opdef.infer_shape(shapes, self.attrs).items():
            # an optional output slot may be left out, so no strict: shapes only for names given
            for name, shape in zip(self.outputs.get(slot, ()), out_shapes, strict=False):
                var = self.block.var(name)
                if var.shape is None:
                    var.shape = tuple(shape)

    def _copy_to(self, block: Block) -> Operator:
        op = object.__new__(Operator)
        op.block = block
        op.type = self.type
        op.inputs = {k: list(v) for k, v in self.inputs.items()}
        op.outputs = {k: list(v) for k, v in self.outputs.items()}
        op.attrs = {k: list(v) if isinstance(v, list) else v for k, v in self.attrs.items()}
        return op

    def input(self, slot: str) -> list[str]:
        return self.inputs.get(slot, [])

    def output(self, slot: str) -> list[str]:
        return self.outputs.get(slot, [])

    @property
    def input_arg_names(self) -> list[str]:
        return [n for names in self.inputs.values() for n in names]

    @property
    def output_arg_names(self) -> list[str]:
        return [n for names in self.outputs.values() for n in names]

    def attr(self, name: str) -> Any:
        return self.attrs[name]

    def __repr__(self) -> str:
        def side(d: Mapping[str, list[str]]) -> str:
            return ", ".join(f"{k}={v}" for k, v in d.items())
        return f"{{{side(self.outputs)}}} = {self.type}({side(self.inputs)}; {self.attrs})"


class Block:
    """A list of operators and the variables they use; may look up a parent block."""

    def __init__(self, program: Program, idx: int, parent_idx: int = -1) -> None:
        self.program = program
        self.idx = idx
        self.parent_idx = parent_idx
        self.vars: dict[str, Variable] = {}
        self.ops: list[Operator] = []

    @property
    def parent(self) -> Block | None:
        return self.program.blocks[self.parent_idx] if self.parent_idx >= 0 else None

    def create_var(self, name: str | None = None, shape: Sequence[int] | None = None,
                   dtype: Any = "float32", persistable: bool = False,
                   stop_gradient: bool = False) -> Variable:
        """Create variable ``name`` here (a unique ``tmp_N`` name when not given);
        asking again for an existing name returns that variable."""
        name = name or unique_name("tmp")
        var = self.vars.get(name)
        if var is None:
            var = self.vars[name] = Variable(self, name, shape, dtype, persistable, stop_gradient)
            self.program._changed()
        return var

    def create_parameter(self, name: str, shape: Sequence[int], dtype: Any = "float32",
                         trainable: bool = True) -> Parameter:
        if name in self.vars:
            raise ValueError(f"create_parameter: block {self.idx} already has a variable {name!r}")
        param = self.vars[name] = Parameter(self, name, shape, dtype, trainable)
        self.program._changed()
        return param

    def has_var(self, name: str) -> bool:
        return name in self.vars

    def find_var(self, name: str) -> Variable | None:
        """Variable ``name`` here or in the nearest parent block, or ``None``."""
        block: Block | None = self
        while block is not None:
            var = block.vars.get(name)
            if var is not None:
                return var
            block = block.parent
        return None

    def var(self, name: str) -> Variable:
        """Variable ``name`` here or in a parent block; an error if there is none."""
        var = self.find_var(name)
        if var is None:
            near = sorted(self.vars)[:10]
            raise KeyError(f"variable {name!r} is not in block {self.idx} or its parents (block "
                           f"{self.idx} has {len(self.vars)} variables, e.g. {near})")
        return var

    def all_parameters(self) -> list[Parameter]:
        return [v for v in self.vars.values() if isinstance(v, Parameter)]

    def append_op(self, type: str, inputs: Mapping[str, Any] | None = None,
                  outputs: Mapping[str, Any] | None = None,
                  attrs: Mapping[str, Any] | None = None) -> Operator:
        return self.insert_op(len(self.ops), type, inputs, outputs, attrs)

    def prepend_op(self, type: str, inputs: Mapping[str, Any] | None = None,
                   outputs: Mapping[str, Any] | None = None,
                   attrs: Mapping[str, Any] | None = None) -> Operator:
        return self.insert_op(0, type, inputs, outputs, attrs)

    def insert_op(self, index: int, type: str, inputs: Mapping[str, Any] | None = None,
                  outputs: Mapping[str, Any] | None = None,
                  attrs: Mapping[str, Any] | None = None) -> Operator:
        op = Operator(self, type, inputs, outputs, attrs)
        self.ops.insert(index, op)
        self.program._changed()
        return op

    def __repr__(self) -> str:
        return f"Block({self.idx}, {len(self.vars)} vars, {len(self.ops)} ops)"


class Program:
    """Blocks of variables and operators; block 0 is the global block."""

    def __init__(self) -> None:
        self.blocks: list[Block] = [Block(self, 0)]
        self.current_block_idx = 0
        self.random_seed = 0
        # Bumped by every change, so caches keyed by a program can tell when
        # what they prepared has gone stale.
        self.version = 0

    def _changed(self) -> None:
        self.version += 1

    def global_block(self) -> Block:
        return self.blocks[0]

    def block(self, idx: int) -> Block:
        return self.blocks[idx]

    def current_block(self) -> Block:
        return self.blocks[self.current_block_idx]

    def create_block(self) -> Block:
        block = Block(self, len(self.blocks), self.current_block_idx)
        self.blocks.append(block)
        self.current_block_idx = block.idx
        self._changed()
        return block

    def rollback(self) -> None:
        self.current_block_idx = self.current_block().parent_idx

    def clone(self, for_test: bool = False) -> Program:
        """A deep copy: new blocks, variables and operators, nothing shared.

        Its cost grows with the program's size, as the reference report's
        ``program.clone()`` on every ``Executor.run`` did. ``for_test`` sets
        every ``is_test`` attribute to True.
        """
        p = object.__new__(Program)
        p.current_block_idx = self.current_block_idx
        p.random_seed = self.random_seed
        p.version = 0
        p.blocks = []
        for b in self.blocks:
            nb = Block(p, b.idx, b.parent_idx)
            nb.vars = {name: v._copy_to(nb) for name, v in b.vars.items()}
            nb.ops = [op._copy_to(nb) for op in b.ops]
            if for_test:
                for op in nb.ops:
                    if "is_test" in op.attrs:
                        op.attrs["is_test"] = True
            p.blocks.append(nb)
        return p

    def num_ops(self) -> int:
        return sum(len(b.ops) for b in self.blocks)

    def to_string(self) -> str:
        lines = []
        for b in self.blocks:
            lines.append(f"block {b.idx} (parent {b.parent_idx}):")
            lines.extend(f"  {v!r}" for v in b.vars.values())
            lines.extend(f"  {op!r}" for op in b.ops)
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"Program({len(self.blocks)} blocks, {self.num_ops()} ops)"


_main_program = Program()
_startup_program = Program()


def default_main_program() -> Program:
    return _main_program


def default_startup_program() -> Program:
    return _startup_program


@contextmanager
def program_guard(main_program: Program, startup_program: Program | None = None) -> Iterator[None]:
    """Make ``main_program`` (and ``startup_program``) the defaults inside the block."""
    global _main_program, _startup_program
    if not isinstance(main_program, Program):
        raise TypeError("program_guard: main_program must be a Program, given "
                        f"{type(main_program).__name__}")
    if startup_program is not None and not isinstance(startup_program, Program):
        raise TypeError("program_guard: startup_program must be a Program, given "
                        f"{type(startup_program).__name__}")
    outer = _main_program, _startup_program
    _main_program = main_program
    if startup_program is not None:
        _startup_program = startup_program
    try:
        yield
    finally:
        _main_program, _startup_program = outer
