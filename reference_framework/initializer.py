"""Parameter initialisers: each appends the op that fills a variable to a startup block.

Random initialisers are always seeded, so that a model built twice from the same
``Program.random_seed`` gets the same weights: an initialiser given no seed of
its own derives one from the startup program's ``random_seed`` and how many
random ops that block already holds.
"""

from __future__ import annotations

import math
from typing import Any

from .framework import Block, Operator, Variable

__all__ = ["Constant", "Initializer", "Normal", "Uniform", "Xavier", "derived_seed"]

_RANDOM_OPS = ("gaussian_random", "uniform_random")
_SEED_MODULUS = 2**31 - 1  # seeds stay positive 32-bit ints; 0 would mean "unseeded"


def derived_seed(block: Block) -> int:
    """A nonzero seed for the next random op of ``block``, fixed by the program's
    ``random_seed`` and the number of random ops already there."""
    n = sum(1 for op in block.ops if op.type in _RANDOM_OPS)
    return (block.program.random_seed * 1_000_003 + n + 1) % _SEED_MODULUS or 1


class Initializer:
    """Fills a variable: ``init(var, block)`` appends the filling op to ``block``."""

    def __call__(self, var: Variable, block: Block) -> Operator:
        raise NotImplementedError


class Constant(Initializer):
    def __init__(self, value: float = 0.0) -> None:
        self.value = float(value)

    def __call__(self, var: Variable, block: Block) -> Operator:
        return block.append_op("fill_constant", outputs={"Out": [var]},
                               attrs={"shape": _shape(var), "value": self.value,
                                      "dtype": var.dtype})


class Normal(Initializer):
    def __init__(self, loc: float = 0.0, scale: float = 1.0, seed: int = 0) -> None:
        if scale <= 0:
            raise ValueError(f"Normal: scale must be positive, given {scale}")
        self.loc, self.scale, self.seed = float(loc), float(scale), seed

    def __call__(self, var: Variable, block: Block) -> Operator:
        return block.append_op("gaussian_random", outputs={"Out": [var]},
                               attrs={"shape": _shape(var), "mean": self.loc, "std": self.scale,
                                      "seed": self.seed or derived_seed(block), "dtype": var.dtype})


class Uniform(Initializer):
    def __init__(self, low: float = -1.0, high: float = 1.0, seed: int = 0) -> None:
        if not low < high:
            raise ValueError(f"Uniform: low must be below high, given low={low}, high={high}")
        self.low, self.high, self.seed = float(low), float(high), seed

    def __call__(self, var: Variable, block: Block) -> Operator:
        return block.append_op("uniform_random", outputs={"Out": [var]},
                               attrs={"shape": _shape(var), "min": self.low, "max": self.high,
                                      "seed": self.seed or derived_seed(block), "dtype": var.dtype})


class Xavier(Initializer):
    """Glorot initialisation: uniform in +-sqrt(6 / (fan_in + fan_out)), or
    normal with std sqrt(2 / (fan_in + fan_out)); fans from the shape unless given."""

    def __init__(self, uniform: bool = True, fan_in: int | None = None, fan_out: int | None = None,
                 seed: int = 0) -> None:
        self.uniform, self.fan_in, self.fan_out, self.seed = uniform, fan_in, fan_out, seed

    def __call__(self, var: Variable, block: Block) -> Operator:
        fan_in, fan_out = fans(_shape(var))
        fan_in = self.fan_in if self.fan_in is not None else fan_in
        fan_out = self.fan_out if self.fan_out is not None else fan_out
        if self.uniform:
            limit = math.sqrt(6.0 / (fan_in + fan_out))
            return Uniform(-limit, limit, self.seed)(var, block)
        return Normal(0.0, math.sqrt(2.0 / (fan_in + fan_out)), self.seed)(var, block)


def fans(shape: list[int]) -> tuple[int, int]:
    """(fan_in, fan_out): rows and columns of an fc weight [in, out]; for a conv
    filter [out, in, kh, kw] both scaled by the receptive field kh * kw."""
    if len(shape) == 1:
        return shape[0], shape[0]
    if len(shape) == 2:
        return shape[0], shape[1]
    field = math.prod(shape[2:])
    return shape[1] * field, shape[0] * field


def _shape(var: Variable) -> list[int]:
    shape: Any = var.shape
    if shape is None or any(d < 1 for d in shape):
        raise ValueError(f"cannot initialise {var.name!r}: it needs a fully known shape, has "
                         f"{shape}")
    return list(shape)
