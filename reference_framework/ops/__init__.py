"""Operator kernels, one module per op family; importing this registers them all."""

from . import elementwise, io, math, tensor  # noqa: F401  (imported to register their ops)
from . import conv  # noqa: F401
from . import pool  # noqa: F401
