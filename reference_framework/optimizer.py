"""Optimizers: ``minimize(loss)`` appends the backward pass and the update ops.

Optimizer state (the learning rate, one velocity per parameter) is persistable,
declared in the main program and initialised in the startup program.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .backward import append_backward
from .framework import (
    Operator,
    Parameter,
    Program,
    Variable,
    default_startup_program,
    unique_name,
)
from .initializer import Constant

__all__ = ["Momentum", "Optimizer"]


class Optimizer:
    """Appends a backward pass, then one update op per trainable parameter."""

    def __init__(self, learning_rate: float) -> None:
        if not isinstance(learning_rate, (int, float)) or learning_rate <= 0:
            raise ValueError(f"{type(self).__name__}: learning_rate must be a positive number, "
                             f"given {learning_rate!r}")
        self.learning_rate = float(learning_rate)
        self._lr_var: Variable | None = None

    def minimize(self, loss: Variable, startup_program: Program | None = None,
                 parameter_list: Sequence[str | Variable] | None = None,
                 no_grad_set: Iterable[str] | None = None
                 ) -> tuple[list[Operator], list[tuple[Parameter, Variable]]]:
        """Append the gradient and update ops for ``loss``; returns (update ops,
        (parameter, gradient) pairs)."""
        params_grads = append_backward(loss, parameter_list, no_grad_set)
        startup = startup_program if startup_program is not None else default_startup_program()
        main = loss.block.program
        ops = [self._update(main, startup, param, grad) for param, grad in params_grads]
        return ops, params_grads

    def _update(self, main: Program, startup: Program, param: Parameter,
                grad: Variable) -> Operator:
        raise NotImplementedError

    def _learning_rate(self, main: Program, startup: Program, dtype: str) -> Variable:
        """The one learning-rate variable this optimizer's update ops share."""
        if self._lr_var is None or self._lr_var.block.program is not main:
            name = unique_name("learning_rate")
            self._lr_var = _persistable(main, startup, name, [1], dtype,
                                        Constant(self.learning_rate))
        return self._lr_var


class Momentum(Optimizer):
    """SGD with momentum: ``v = mu * v + g``, then ``p -= lr * v`` (Nesterov:
    ``p -= lr * (g + mu * v)``), one ``momentum`` op per parameter."""

    def __init__(self, learning_rate: float, momentum: float, use_nesterov: bool = False) -> None:
        super().__init__(learning_rate)
        if not isinstance(momentum, (int, float)) or not 0 <= momentum < 1:
            raise ValueError(f"Momentum: momentum must be in [0, 1), given {momentum!r}")
        self.momentum = float(momentum)
        self.use_nesterov = use_nesterov

    def _update(self, main: Program, startup: Program, param: Parameter,
                grad: Variable) -> Operator:
        lr = self._learning_rate(main, startup, param.dtype)
        velocity = _persistable(main, startup, unique_name(f"{param.name}_velocity"),
                                list(param.shape), param.dtype, Constant(0.0))
        return main.global_block().append_op(
            "momentum",
            inputs={"Param": [param], "Grad": [grad], "Velocity": [velocity], "LearningRate": [lr]},
            outputs={"ParamOut": [param], "VelocityOut": [velocity]},
            attrs={"mu": self.momentum, "use_nesterov": self.use_nesterov})


def _persistable(main: Program, startup: Program, name: str, shape: list[int], dtype: str,
                 init: Constant) -> Variable:
    """Optimizer state: persistable in ``main``, initialised by ``startup``."""
    var = main.global_block().create_var(name=name, shape=shape, dtype=dtype, persistable=True,
                                         stop_gradient=True)
    init(startup.global_block().create_var(name=name, shape=shape, dtype=dtype, persistable=True),
         startup.global_block())
    return var
