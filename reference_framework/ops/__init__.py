"""Operator kernels, one module per op family; importing this registers them all."""

from . import (  # noqa: F401  (imported to register their ops)
    activation,
    batch_norm,
    elementwise,
    io,
    loss,
    math,
    matmul,
    metric,
    optimizer,
    tensor,
)
