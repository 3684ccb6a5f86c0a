"""Layers: functions that build a network by emitting ops into the default programs.

Each layer appends its ops to the current block of ``default_main_program()``
and the ops that initialise its parameters and state to the global block of
``default_startup_program()``; names come from ``unique_name`` (``conv2d_3.w_0``
for a weight, ``conv2d_3.tmp_0`` for an output). Output shapes are filled in by
the ops' shape inference, so layers chain. Parameters take the dtype of the
layer's input, so a network whose ``data`` is float64 is float64 throughout.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from .framework import (
    Parameter,
    Variable,
    default_main_program,
    default_startup_program,
    unique_name,
)
from .initializer import Constant, Initializer, Normal, Xavier

__all__ = [
    "accuracy",
    "batch_norm",
    "cast",
    "conv2d",
    "cross_entropy",
    "data",
    "elementwise_add",
    "elementwise_div",
    "fc",
    "fill_constant",
    "mean",
    "pool2d",
    "relu",
    "softmax",
    "sums",
    "top_k",
]

ACTIVATIONS = ("relu", "softmax")
# dtypes the ops give their integer outputs
INDEX_DTYPE = "int64"  # top_k's Indices
COUNT_DTYPE = "int64"  # accuracy's Correct and Total


def data(name: str, shape: Sequence[int], dtype: Any = "float32", append_batch_size: bool = True,
         stop_gradient: bool = True) -> Variable:
    """An input fed at run time; the batch dimension (-1) is prepended unless
    ``append_batch_size`` is False."""
    shape = [int(d) for d in shape]
    if append_batch_size:
        shape = [-1] + shape
    block = default_main_program().global_block()
    if block.has_var(name):
        raise ValueError(f"data: the main program already has a variable {name!r}")
    return block.create_var(name=name, shape=shape, dtype=dtype, stop_gradient=stop_gradient)


def conv2d(input: Variable, num_filters: int, filter_size: int | Sequence[int],
           stride: int | Sequence[int] = 1, padding: int | Sequence[int] = 0,
           dilation: int | Sequence[int] = 1, groups: int = 1, act: str | None = None,
           param_initializer: Initializer | None = None, name: str | None = None) -> Variable:
    """A 2-D convolution of an NCHW input, without bias. The filter defaults to
    Normal(0, sqrt(2 / (kh * kw * C_in)))."""
    _check_activation(act)
    name = name or unique_name("conv2d")
    channels = _dim(input, 1, "conv2d")
    if channels % groups:
        raise ValueError(f"conv2d {name}: groups ({groups}) must divide the input channels "
                         f"({channels})")
    kh, kw = _pair(filter_size, "filter_size")
    std = math.sqrt(2.0 / (kh * kw * channels))
    w = _parameter(f"{name}.w_0", [num_filters, channels // groups, kh, kw], input.dtype,
                   param_initializer or Normal(0.0, std))
    out = _tmp(name, input.dtype)
    _block().append_op("conv2d", inputs={"Input": [input], "Filter": [w]},
                       outputs={"Output": [out]}, attrs={"strides": _pair(stride, "stride"),
                                                         "paddings": _pair(padding, "padding"),
                                                         "dilations": _pair(dilation, "dilation"),
                                                         "groups": groups})
    return _activation(out, act)


def batch_norm(input: Variable, act: str | None = None, is_test: bool = False,
               momentum: float = 0.9, epsilon: float = 1e-5, name: str | None = None) -> Variable:
    """Batch normalisation over an NCHW input's channels. Scale (1) and Bias (0)
    are parameters; the running Mean (0) and Variance (1) are persistable state
    the op updates in place, outside the optimizer's reach."""
    _check_activation(act)
    name = name or unique_name("batch_norm")
    channels = _dim(input, 1, "batch_norm")
    dtype = input.dtype
    scale = _parameter(f"{name}.w_0", [channels], dtype, Constant(1.0))
    bias = _parameter(f"{name}.b_0", [channels], dtype, Constant(0.0))
    mean = _state(f"{name}.w_1", [channels], dtype, Constant(0.0))
    variance = _state(f"{name}.w_2", [channels], dtype, Constant(1.0))
    # Saved statistics only serve the gradient; nothing differentiates them.
    saved_mean = _tmp(name, dtype, stop_gradient=True)
    saved_variance = _tmp(name, dtype, stop_gradient=True)
    out = _tmp(name, dtype)
    _block().append_op("batch_norm", inputs={"X": [input], "Scale": [scale], "Bias": [bias],
                                             "Mean": [mean], "Variance": [variance]},
                       outputs={"Y": [out], "MeanOut": [mean], "VarianceOut": [variance],
                                "SavedMean": [saved_mean], "SavedVariance": [saved_variance]},
                       attrs={"momentum": float(momentum), "epsilon": float(epsilon),
                              "is_test": is_test})
    return _activation(out, act)


def pool2d(input: Variable, pool_size: int | Sequence[int] = -1, pool_type: str = "max",
           pool_stride: int | Sequence[int] = 1, pool_padding: int | Sequence[int] = 0,
           global_pooling: bool = False, name: str | None = None) -> Variable:
    """Max or average pooling of an NCHW input (``global_pooling``: over all of H x W)."""
    if pool_type not in ("max", "avg"):
        raise ValueError(f"pool2d: pool_type must be 'max' or 'avg', given {pool_type!r}")
    if not global_pooling and pool_size == -1:
        raise ValueError("pool2d: pool_size is required unless global_pooling is True")
    ksize = [1, 1] if global_pooling and pool_size == -1 else _pair(pool_size, "pool_size")
    out = _tmp(name or unique_name("pool2d"), input.dtype)
    _block().append_op("pool2d", inputs={"X": [input]}, outputs={"Out": [out]},
                       attrs={"pooling_type": pool_type, "ksize": ksize,
                              "strides": _pair(pool_stride, "pool_stride"),
                              "paddings": _pair(pool_padding, "pool_padding"),
                              "global_pooling": global_pooling})
    return out


def fc(input: Variable, size: int, num_flatten_dims: int = 1, act: str | None = None,
       param_initializer: Initializer | None = None, name: str | None = None) -> Variable:
    """A fully connected layer: the input flattened to a matrix at
    ``num_flatten_dims``, times a Xavier-uniform weight, plus a zero-initialised
    bias, then ``act``."""
    _check_activation(act)
    name = name or unique_name("fc")
    if input.shape is None or any(d < 1 for d in input.shape[num_flatten_dims:]):
        raise ValueError(f"fc {name}: the input's dims after num_flatten_dims={num_flatten_dims} "
                         "must be "
                         f"known, input {input.name!r} has shape {input.shape}")
    in_features = math.prod(input.shape[num_flatten_dims:])
    w = _parameter(f"{name}.w_0", [in_features, size], input.dtype, param_initializer or Xavier())
    b = _parameter(f"{name}.b_0", [size], input.dtype, Constant(0.0))
    product = _tmp(name, input.dtype)
    _block().append_op("mul", inputs={"X": [input], "Y": [w]}, outputs={"Out": [product]},
                       attrs={"x_num_col_dims": num_flatten_dims, "y_num_col_dims": 1})
    out = _tmp(name, input.dtype)
    _block().append_op("elementwise_add", inputs={"X": [product], "Y": [b]}, outputs={"Out": [out]},
                       attrs={"axis": num_flatten_dims})
    return _activation(out, act)


def cross_entropy(input: Variable, label: Variable, soft_label: bool = False) -> Variable:
    """-log of each row's probability of its label: [N, 1]."""
    out = _tmp(unique_name("cross_entropy"), input.dtype)
    _block().append_op("cross_entropy", inputs={"X": [input], "Label": [label]},
                       outputs={"Y": [out]}, attrs={"soft_label": soft_label})
    return out


def mean(x: Variable) -> Variable:
    """The mean of all elements, shape [1]."""
    out = _tmp(unique_name("mean"), x.dtype)
    _block().append_op("mean", inputs={"X": [x]}, outputs={"Out": [out]})
    return out


def top_k(input: Variable, k: int = 1) -> tuple[Variable, Variable]:
    """The k largest values of each row and their column indices."""
    name = unique_name("top_k")
    values = _tmp(name, input.dtype, stop_gradient=True)
    indices = _tmp(name, INDEX_DTYPE, stop_gradient=True)
    _block().append_op("top_k", inputs={"X": [input]},
                       outputs={"Out": [values], "Indices": [indices]}, attrs={"k": k})
    return values, indices


def accuracy(input: Variable, label: Variable, k: int = 1, correct: Variable | None = None,
             total: Variable | None = None) -> Variable:
    """The share of rows whose label is among their top ``k`` scores ([1],
    float32); the counts go to ``correct`` and ``total`` when given."""
    values, indices = top_k(input, k)
    name = unique_name("accuracy")
    acc = _tmp(name, "float32", stop_gradient=True)
    correct = correct if correct is not None else _tmp(name, COUNT_DTYPE, stop_gradient=True)
    total = total if total is not None else _tmp(name, COUNT_DTYPE, stop_gradient=True)
    _block().append_op("accuracy", inputs={"Out": [values], "Indices": [indices], "Label": [label]},
                       outputs={"Accuracy": [acc], "Correct": [correct], "Total": [total]})
    return acc


def cast(x: Variable, dtype: Any) -> Variable:
    out = _tmp(unique_name("cast"), dtype, stop_gradient=x.stop_gradient)
    _block().append_op("cast", inputs={"X": [x]}, outputs={"Out": [out]},
                       attrs={"in_dtype": x.dtype, "out_dtype": out.dtype})
    return out


def sums(input: Sequence[Variable], out: Variable | None = None) -> Variable:
    """The elementwise sum of equally shaped variables (into ``out`` when given)."""
    input = list(input)
    if not input:
        raise ValueError("sums: needs at least one input variable, given none")
    out = out if out is not None else _tmp(unique_name("sum"), input[0].dtype)
    _block().append_op("sum", inputs={"X": input}, outputs={"Out": [out]})
    return out


def fill_constant(shape: Sequence[int], dtype: Any, value: float,
                  out: Variable | None = None) -> Variable:
    """A tensor of ``shape`` filled with ``value`` (into ``out`` when given)."""
    out = out if out is not None else _tmp(unique_name("fill_constant"), dtype, stop_gradient=True)
    _block().append_op("fill_constant", outputs={"Out": [out]},
                       attrs={"shape": [int(d) for d in shape], "value": float(value),
                              "dtype": dtype})
    return out


def elementwise_add(x: Variable, y: Variable, axis: int = -1, act: str | None = None) -> Variable:
    return _binary("elementwise_add", x, y, axis, act)


def elementwise_div(x: Variable, y: Variable, axis: int = -1, act: str | None = None) -> Variable:
    return _binary("elementwise_div", x, y, axis, act)


def relu(x: Variable) -> Variable:
    return _activation(x, "relu")


def softmax(x: Variable) -> Variable:
    return _activation(x, "softmax")


def _binary(op_type: str, x: Variable, y: Variable, axis: int, act: str | None) -> Variable:
    _check_activation(act)
    out = _tmp(unique_name(op_type), x.dtype)
    _block().append_op(op_type, inputs={"X": [x], "Y": [y]}, outputs={"Out": [out]},
                       attrs={"axis": axis})
    return _activation(out, act)


def _activation(x: Variable, act: str | None) -> Variable:
    """``x`` through activation ``act``, appended as an op of its own (or ``x``)."""
    if act is None:
        return x
    _check_activation(act)
    out = _tmp(unique_name(act), x.dtype)
    _block().append_op(act, inputs={"X": [x]}, outputs={"Out": [out]})
    return out


def _check_activation(act: str | None) -> None:
    """Before a layer emits anything, so a bad ``act`` leaves no half-built layer."""
    if act is not None and act not in ACTIVATIONS:
        raise ValueError(f"unknown activation {act!r}; expected one of {list(ACTIVATIONS)} or None")


def _block():
    return default_main_program().current_block()


def _tmp(prefix: str, dtype: Any, stop_gradient: bool = False) -> Variable:
    """A new temporary; its shape is left to the shape inference of the op writing it."""
    return _block().create_var(name=unique_name(f"{prefix}.tmp"), dtype=dtype,
                               stop_gradient=stop_gradient)


def _parameter(name: str, shape: list[int], dtype: Any, init: Initializer) -> Parameter:
    """A trainable parameter of the main program, initialised in the startup program."""
    param = default_main_program().global_block().create_parameter(name, shape, dtype)
    _initialise(name, shape, param.dtype, init)
    return param


def _state(name: str, shape: list[int], dtype: Any, init: Initializer) -> Variable:
    """Persistable state that no gradient reaches (running statistics)."""
    var = default_main_program().global_block().create_var(name=name, shape=shape, dtype=dtype,
                                                           persistable=True, stop_gradient=True)
    _initialise(name, shape, var.dtype, init)
    return var


def _initialise(name: str, shape: list[int], dtype: str, init: Initializer) -> None:
    startup = default_startup_program().global_block()
    if startup.has_var(name):
        raise ValueError(f"the startup program already initialises a variable {name!r}")
    init(startup.create_var(name=name, shape=shape, dtype=dtype, persistable=True), startup)


def _dim(x: Variable, axis: int, layer: str) -> int:
    if x.shape is None or len(x.shape) <= axis or x.shape[axis] < 1:
        raise ValueError(f"{layer}: the input's dim {axis} must be known, input {x.name!r} has "
                         f"shape {x.shape}")
    return x.shape[axis]


def _pair(value: int | Sequence[int], what: str) -> list[int]:
    if isinstance(value, int):
        return [value, value]
    pair = [int(v) for v in value]
    if len(pair) != 2:
        raise ValueError(f"{what} takes an int or 2 ints, given {value!r}")
    return pair
