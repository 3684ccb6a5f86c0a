"""Evaluators: metrics accumulated over a pass in persistable state variables.

The main program updates the states batch by batch; ``reset(exe)`` zeroes
them at the start of a pass and ``eval(exe)`` computes the pass metric from
them, each by running a small program of its own, as the reference report's
training loop did.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import layers
from .framework import (
    Program,
    Variable,
    default_main_program,
    default_startup_program,
    program_guard,
    unique_name,
)
from .initializer import Constant

__all__ = ["Accuracy", "Evaluator"]


class Evaluator:
    """Holds persistable ``states`` and the batch ``metrics`` variables."""

    def __init__(self, name: str) -> None:
        self.name = unique_name(name)
        self.states: list[Variable] = []
        self.metrics: list[Variable] = []

    def _create_state(self, suffix: str, dtype: str, shape: list[int]) -> Variable:
        """A persistable state of the main program, zeroed by the startup program."""
        name = f"{self.name}.{suffix}"
        var = default_main_program().global_block().create_var(
            name=name, shape=shape, dtype=dtype, persistable=True, stop_gradient=True)
        startup = default_startup_program().global_block()
        Constant(0.0)(startup.create_var(name=name, shape=shape, dtype=dtype, persistable=True),
                      startup)
        self.states.append(var)
        return var

    def reset(self, executor: Any, reset_program: Program | None = None, scope: Any = None) -> None:
        """Zero every state (run a program of ``fill_constant`` ops)."""
        program = reset_program if reset_program is not None else Program()
        with program_guard(program, Program()):
            for state in self.states:
                layers.fill_constant(state.known_shape, state.dtype, 0.0,
                                     out=_clone_var(program, state))
        executor.run(program, scope=scope)

    def eval(self, executor: Any, eval_program: Program | None = None,
             scope: Any = None) -> np.ndarray:
        raise NotImplementedError


class Accuracy(Evaluator):
    """Top-``k`` accuracy over a pass: the batch's ``accuracy`` op adds its
    correct and total counts to two int64 states."""

    def __init__(self, input: Variable, label: Variable, k: int = 1) -> None:
        super().__init__("accuracy")
        self.total = self._create_state("total", "int64", [1])
        self.correct = self._create_state("correct", "int64", [1])
        block = default_main_program().current_block()
        total = block.create_var(name=unique_name(f"{self.name}.tmp"), dtype=layers.COUNT_DTYPE,
                                 stop_gradient=True)
        correct = block.create_var(name=unique_name(f"{self.name}.tmp"), dtype=layers.COUNT_DTYPE,
                                   stop_gradient=True)
        acc = layers.accuracy(input, label, k=k, correct=correct, total=total)
        layers.sums([self.total, layers.cast(total, "int64")], out=self.total)
        layers.sums([self.correct, layers.cast(correct, "int64")], out=self.correct)
        self.metrics.append(acc)

    def eval(self, executor: Any, eval_program: Program | None = None,
             scope: Any = None) -> np.ndarray:
        """The pass accuracy so far, correct / total, as a float32 array of shape [1]."""
        program = eval_program if eval_program is not None else Program()
        with program_guard(program, Program()):
            total = layers.cast(_clone_var(program, self.total), "float32")
            correct = layers.cast(_clone_var(program, self.correct), "float32")
            out = layers.elementwise_div(correct, total)
        return np.asarray(executor.run(program, fetch_list=[out], scope=scope)[0])


def _clone_var(program: Program, var: Variable) -> Variable:
    """``var``'s description in ``program``: the same persistable variable."""
    return program.global_block().create_var(name=var.name, shape=var.shape, dtype=var.dtype,
                                             persistable=True, stop_gradient=True)
