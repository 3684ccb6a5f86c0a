"""A small Fluid-style deep-learning framework: the system under test and the reference.

Programs of operator descriptions, scopes, an executor that reproduces the
reference report's per-run overheads, and every ResNet-50 operator with numpy
(CPU) and CuPy (GPU) kernels.
"""

from . import (
    evaluator,
    host_memory,  # noqa: F401  (keeps freed host memory in the process: applied on import)
    initializer,
    layers,
    models,
    ops,  # noqa: F401  (registers every op type)
    optimizer,
)
from .backend import CPUPlace, CUDAPlace, GPUPlace, gpu_available
from .backward import append_backward
from .data import batch, dataset, reader
from .executor import Executor, FeedError, FetchError
from .framework import (
    Block,
    Operator,
    Parameter,
    Program,
    Variable,
    default_main_program,
    default_startup_program,
    grad_var_name,
    program_guard,
    unique_name,
    unique_name_guard,
)
from .registry import OpError, registered_ops, run_op
from .scope import Scope, global_scope, scope_guard

__all__ = [
    "Block",
    "CPUPlace",
    "CUDAPlace",
    "Executor",
    "FeedError",
    "FetchError",
    "GPUPlace",
    "OpError",
    "Operator",
    "Parameter",
    "Program",
    "Scope",
    "Variable",
    "append_backward",
    "batch",
    "dataset",
    "default_main_program",
    "default_startup_program",
    "evaluator",
    "global_scope",
    "gpu_available",
    "grad_var_name",
    "initializer",
    "layers",
    "models",
    "optimizer",
    "program_guard",
    "reader",
    "registered_ops",
    "run_op",
    "scope_guard",
    "unique_name",
    "unique_name_guard",
]
