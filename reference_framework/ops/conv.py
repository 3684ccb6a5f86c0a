"""2-D convolution, conv2d and conv2d_grad, as im2col plus one GEMM per group.

Layout: the column matrix is ``[C * kh * kw, N * OH * OW]``, rows in (channel,
ky, kx) order so the filter reshaped ``[OC, C * kh * kw]`` multiplies it
directly, and the GEMM output ``[OC, N * OH * OW]`` becomes NCHW by one copy
that moves whole ``OH * OW`` planes. Filling the columns, the output transpose
and the input-gradient scatter all copy runs that are contiguous in the output
position. The other layout, ``[N * OH * OW, C * kh * kw]`` (NHWC columns, then
an element-wise NHWC -> NCHW transpose of the output), measured 1.07-1.35x
slower forward at three of four ResNet-50 3x3 shapes on 2 cores. The three
GEMMs see contiguous operands (a transposed operand is a C-contiguous matrix
read as ``.T``, which BLAS takes as a flag, never a copy):

    forward        Output  = Filter[OC, K] @ col[K, P]
    Filter@GRAD    dFilter = dOut[OC, P] @ col[K, P].T
    Input@GRAD     dcol    = Filter[OC, K].T @ dOut[OC, P], then col2im

On the CPU, im2col fills the columns by kh x kw strided-slice copies from a
padded, channel-major copy of the input, and col2im adds them back by as many
strided slice-adds; 1x1 convolutions without padding skip im2col (the columns
are the input with N and C swapped, after a strided slice for stride 2). On a
GPU the GEMMs run on cuBLAS (TF32 for float32 when the user enables it, e.g.
``CUPY_TF32=1``) and im2col/col2im are the raw kernels of ``cuda_kernels``.

The column matrix and the GEMM output are large (the ResNet-50 stem's columns
are ~225 MiB at batch 32) and live only while one op runs. On the CPU they are
kept in per-thread grow-only buffers and reused, because a fresh array that
size is page-faulted in, and zeroed by the kernel, on every call (reuse made
forward + grad 1.2-1.3x faster at the large ResNet-50 shapes); cupy's memory
pool already does the same for device memory. ``release_workspace()`` frees them.

On the CPU every big pass runs on all cores through ``_parallel``: the GEMMs
as blocks of their output's columns or rows (numpy's BLAS is then held to
one thread), the padding, im2col and col2im copies as channel ranges, and the
layout transposes along their first axis. The copies are bitwise the
single-threaded ones; the GEMMs, and so Output, Filter@GRAD and Input@GRAD,
agree with the single-threaded op within the rounding bound of their sums,
not bitwise, because BLAS may round a block differently from the whole
matrix (``_parallel.matmul``). On 2 cores conv2d + conv2d_grad over the ResNet-50 batch-8
shapes took 1.09-1.10 s per training step's worth, against 1.26-1.32 s with
OpenBLAS threading the GEMMs alone.

``Im2ColTimer``, ``Col2ImTimer`` and ``GemmTimer`` are timed inside the op's own
region (one ``GemmTimer`` per GEMM).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from math import prod
from typing import Any

import numpy as np

from pytest_opperf import timers

from ..registry import KernelContext, OpDef, OpError, make_grad, optional, register
from . import cuda_kernels
from ._parallel import assign, matmul, run_parts
from ._util import check_ints, numel

__all__ = ["conv2d", "conv2d_grad", "conv_output_size", "release_workspace"]

_ATTRS = {"strides": [1, 1], "paddings": [0, 0], "dilations": [1, 1], "groups": 1}


class _Workspace(threading.local):
    """Per-thread scratch buffers by role, grown when a call needs more."""

    def __init__(self) -> None:
        self.buffers: dict[str, np.ndarray] = {}

    def get(self, role: str, shape: Sequence[int], dtype: Any) -> np.ndarray:
        nbytes = prod(shape) * np.dtype(dtype).itemsize
        buf = self.buffers.get(role)
        if buf is None or buf.nbytes < nbytes:
            self.buffers.pop(role, None)  # free the old one before allocating the new
            buf = self.buffers[role] = np.empty(nbytes, dtype=np.uint8)
        return buf[:nbytes].view(dtype).reshape(shape)


_workspace = _Workspace()


def release_workspace() -> None:
    """Free this thread's convolution scratch buffers."""
    _workspace.buffers.clear()


def _scratch(xp: Any, role: str, shape: Sequence[int], dtype: Any) -> Any:
    """An uninitialised array that lives only while one op runs."""
    return _workspace.get(role, shape, dtype) if xp is np else xp.empty(shape, dtype=dtype)


def conv_output_size(size: int, k: int, stride: int, padding: int, dilation: int) -> int:
    """Output length along one axis: floor((size + 2p - d(k-1) - 1) / s) + 1."""
    return (size + 2 * padding - dilation * (k - 1) - 1) // stride + 1


def _check_attrs(op: str):
    def check(attrs: dict[str, Any]) -> None:
        check_ints(op, "strides", attrs["strides"], n=2, minimum=1)
        check_ints(op, "paddings", attrs["paddings"], n=2, minimum=0)
        check_ints(op, "dilations", attrs["dilations"], n=2, minimum=1)
        if attrs["groups"] < 1:
            raise OpError(f"{op}: attribute 'groups' expects an int >= 1, "
                          f"given {attrs['groups']!r}")
    return check


def _output_hw(op: str, x_shape: Sequence[int], w_shape: Sequence[int],
               attrs: dict[str, Any]) -> tuple[int, int]:
    """(OH, OW) after checking that Input and Filter fit together; an unknown
    (-1) dimension is not checked and gives -1."""
    if len(x_shape) != 4:
        raise OpError(f"{op}: Input must be 4-D [N, C, H, W], given shape {list(x_shape)}")
    if len(w_shape) != 4:
        raise OpError(f"{op}: Filter must be 4-D [OC, C/groups, kh, kw], given shape "
                      f"{list(w_shape)}")
    c, (oc, wc, kh, kw), groups = x_shape[1], w_shape, attrs["groups"]
    if -1 not in (c, wc) and wc * groups != c:
        raise OpError(f"{op}: Filter.shape[1] * groups must equal Input's channels {c}, given {wc} "
                      f"* {groups} = {wc * groups} (Input {list(x_shape)}, Filter {list(w_shape)})")
    if oc != -1 and oc % groups:
        raise OpError(f"{op}: Filter's output channels must be divisible by attribute 'groups', "
                      f"given {oc} output channels and groups={groups}")
    hw = []
    for axis, size, k, s, p, d in zip(("height", "width"), x_shape[2:], (kh, kw), attrs["strides"],
                                      attrs["paddings"], attrs["dilations"], strict=True):
        if -1 in (size, k):
            hw.append(-1)
            continue
        span = d * (k - 1) + 1
        if span > size + 2 * p:
            raise OpError(f"{op}: the kernel {axis} (dilated: {span}) must not exceed the padded "
                          "input "
                          f"{axis} {size + 2 * p}, given Filter {list(w_shape)}, Input "
                          f"{list(x_shape)}, paddings {attrs['paddings']}, dilations "
                          f"{attrs['dilations']}")
        hw.append(conv_output_size(size, k, s, p, d))
    return hw[0], hw[1]


@dataclass(frozen=True)
class _Conv:
    """The sizes of one convolution, checked."""

    n: int
    c: int
    h: int
    w: int
    oc: int
    kh: int
    kw: int
    oh: int
    ow: int
    strides: tuple[int, int]
    paddings: tuple[int, int]
    dilations: tuple[int, int]
    groups: int

    @property
    def k(self) -> int:  # rows of the column matrix
        return self.c * self.kh * self.kw

    @property
    def p(self) -> int:  # columns of the column matrix: output positions
        return self.n * self.oh * self.ow

    @property
    def pointwise(self) -> bool:  # a 1x1 kernel reading no padding needs no im2col
        return self.kh == self.kw == 1 and self.paddings == (0, 0)

    def group_rows(self, g: int) -> tuple[slice, slice]:
        """Group ``g``'s rows of the filter matrix and of the column matrix."""
        oc, k = self.oc // self.groups, self.k // self.groups
        return slice(g * oc, (g + 1) * oc), slice(g * k, (g + 1) * k)


def _geometry(op: str, x: Any, w: Any, attrs: dict[str, Any]) -> _Conv:
    if x.dtype != w.dtype:
        raise OpError(f"{op}: Filter must have Input's dtype {x.dtype.name}, given {w.dtype.name}")
    oh, ow = _output_hw(op, x.shape, w.shape, attrs)
    n, c, h, wd = x.shape
    oc, _, kh, kw = w.shape
    return _Conv(n, c, h, wd, oc, kh, kw, oh, ow, tuple(attrs["strides"]), tuple(attrs["paddings"]),
                 tuple(attrs["dilations"]), attrs["groups"])


def _window(k: int, dilation: int, stride: int, out: int) -> slice:
    """The input rows (or columns) that kernel offset ``k`` reads, one per output."""
    start = k * dilation
    return slice(start, start + stride * (out - 1) + 1, stride)


def _padded_channel_major(x: np.ndarray, g: _Conv) -> np.ndarray:
    """``x`` as ``[C, N, H + 2ph, W + 2pw]`` with a zero border, in scratch memory.

    Channel-major so that every im2col slice copy moves runs in the order the
    column matrix stores them."""
    ph, pw = g.paddings
    xt = _workspace.get("image", (g.c, g.n, g.h + 2 * ph, g.w + 2 * pw), x.dtype)
    xc = x.transpose(1, 0, 2, 3)

    def fill(p: slice) -> None:
        part = xt[p]
        if ph:
            part[:, :, :ph] = 0
            part[:, :, ph + g.h:] = 0
        if pw:
            part[:, :, ph:ph + g.h, :pw] = 0
            part[:, :, ph:ph + g.h, pw + g.w:] = 0
        part[:, :, ph:ph + g.h, pw:pw + g.w] = xc[p]

    run_parts(fill, g.c, x.nbytes + xt.nbytes, x)  # channel ranges over threads
    return xt


def _im2col(x: np.ndarray, g: _Conv) -> np.ndarray:
    xt = _padded_channel_major(x, g)
    col = _workspace.get("cols", (g.c, g.kh, g.kw, g.n, g.oh, g.ow), x.dtype)
    (sh, sw), (dh, dw) = g.strides, g.dilations

    def fill(p: slice) -> None:
        for ky in range(g.kh):
            for kx in range(g.kw):
                col[p, ky, kx] = xt[p, :, _window(ky, dh, sh, g.oh), _window(kx, dw, sw, g.ow)]

    run_parts(fill, g.c, 2 * col.nbytes, x)  # channel ranges over threads
    return col.reshape(g.k, g.p)


def _col2im(dcol: np.ndarray, g: _Conv) -> np.ndarray:
    (ph, pw), (sh, sw), (dh, dw) = g.paddings, g.strides, g.dilations
    dxt = _workspace.get("image", (g.c, g.n, g.h + 2 * ph, g.w + 2 * pw), dcol.dtype)
    dcol = dcol.reshape(g.c, g.kh, g.kw, g.n, g.oh, g.ow)

    def add(p: slice) -> None:
        part = dxt[p]
        part.fill(0)
        for ky in range(g.kh):
            for kx in range(g.kw):
                part[:, :, _window(ky, dh, sh, g.oh), _window(kx, dw, sw, g.ow)] += dcol[p, ky, kx]

    run_parts(add, g.c, 2 * dcol.nbytes, dcol)  # channel ranges over threads
    dx = np.empty((g.n, g.c, g.h, g.w), dtype=dcol.dtype)
    assign(dx.transpose(1, 0, 2, 3), dxt[:, :, ph:ph + g.h, pw:pw + g.w])
    return dx


def _columns(x: Any, g: _Conv, xp: Any) -> Any:
    """The column matrix ``[C * kh * kw, N * OH * OW]`` of ``x`` (scratch memory)."""
    with timers.timer("Im2ColTimer", kernel=True):
        if g.pointwise:
            sh, sw = g.strides
            col = _scratch(xp, "cols", (g.c, g.n, g.oh, g.ow), x.dtype)
            return assign(col, x[:, :, ::sh, ::sw].transpose(1, 0, 2, 3)).reshape(g.k, g.p)
        if xp is np:
            return _im2col(x, g)
        return cuda_kernels.im2col(x, (g.kh, g.kw), g.strides, g.paddings, g.dilations,
                                   (g.oh, g.ow))


def _image_grad(dcol: Any, g: _Conv, xp: Any) -> Any:
    """Input@GRAD ``[N, C, H, W]`` from the column gradient ``[C * kh * kw, N * OH * OW]``."""
    with timers.timer("Col2ImTimer", kernel=True):
        if g.pointwise:
            dcol = dcol.reshape(g.c, g.n, g.oh, g.ow).transpose(1, 0, 2, 3)
            if g.strides == (1, 1):
                return assign(xp.empty(dcol.shape, dtype=dcol.dtype), dcol)
            dx = xp.zeros((g.n, g.c, g.h, g.w), dtype=dcol.dtype)
            assign(dx[:, :, ::g.strides[0], ::g.strides[1]], dcol)
            return dx
        if xp is np:
            return _col2im(dcol, g)
        return cuda_kernels.col2im(dcol, (g.n, g.c, g.h, g.w), (g.kh, g.kw), g.strides, g.paddings,
                                   g.dilations, (g.oh, g.ow))


def conv2d(ins: dict[str, Any], attrs: dict[str, Any], ctx: KernelContext) -> dict[str, Any]:
    x, w, xp = ins["Input"], ins["Filter"], ctx.xp
    g = _geometry("conv2d", x, w, attrs)
    col = _columns(x, g, xp)
    w2 = xp.ascontiguousarray(w).reshape(g.oc, -1)
    out = _scratch(xp, "gemm", (g.oc, g.p), x.dtype)
    for group in range(g.groups):
        rows, krows = g.group_rows(group)
        with timers.timer("GemmTimer", kernel=True):
            matmul(w2[rows], col[krows], out[rows], xp)
    # [OC, N, OH, OW] -> [N, OC, OH, OW]: whole planes move, and the result is a
    # fresh array (out is scratch memory)
    y = xp.empty((g.n, g.oc, g.oh, g.ow), dtype=x.dtype)
    return {"Output": assign(y, out.reshape(g.oc, g.n, g.oh, g.ow).transpose(1, 0, 2, 3))}


def conv2d_grad(ins: dict[str, Any], attrs: dict[str, Any], ctx: KernelContext) -> dict[str, Any]:
    x, w, dy, xp = ins["Input"], ins["Filter"], ins["Output@GRAD"], ctx.xp
    g = _geometry("conv2d_grad", x, w, attrs)
    if tuple(dy.shape) != (g.n, g.oc, g.oh, g.ow) or dy.dtype != x.dtype:
        raise OpError(f"conv2d_grad: Output@GRAD must be {x.dtype.name} of the output's shape "
                      f"{[g.n, g.oc, g.oh, g.ow]}, given {dy.dtype.name} of shape {list(dy.shape)}")
    dy2 = _scratch(xp, "gemm", (g.oc, g.n, g.oh * g.ow), dy.dtype)
    assign(dy2, dy.reshape(g.n, g.oc, -1).transpose(1, 0, 2))
    dy2 = dy2.reshape(g.oc, g.p)
    outs = {}
    if ctx.wants("Filter@GRAD"):
        col = _columns(x, g, xp)
        dw = xp.empty((g.oc, g.k // g.groups), dtype=w.dtype)
        for group in range(g.groups):
            rows, krows = g.group_rows(group)
            with timers.timer("GemmTimer", kernel=True):
                matmul(dy2[rows], col[krows].T, dw[rows], xp)
        outs["Filter@GRAD"] = dw.reshape(w.shape)
    if ctx.wants("Input@GRAD"):
        w2 = xp.ascontiguousarray(w).reshape(g.oc, -1)
        dcol = _scratch(xp, "cols", (g.k, g.p), x.dtype)  # the columns are no longer needed
        for group in range(g.groups):
            rows, krows = g.group_rows(group)
            with timers.timer("GemmTimer", kernel=True):
                matmul(w2[rows].T, dy2[rows], dcol[krows], xp)
        outs["Input@GRAD"] = _image_grad(dcol, g, xp)
    return outs


def _infer_shape(shapes: dict, attrs: dict[str, Any]) -> dict:
    x, w = shapes["Input"][0], shapes["Filter"][0]
    oh, ow = _output_hw("conv2d", x, w, attrs)
    return {"Output": [(x[0], w[0], oh, ow)]}


def _infer_grad_shape(shapes: dict, attrs: dict[str, Any]) -> dict:
    x, w = shapes["Input"][0], shapes["Filter"][0]
    _output_hw("conv2d_grad", x, w, attrs)
    return {"Input@GRAD": [x], "Filter@GRAD": [w]}


def _forward_flops(x: Sequence[int], w: Sequence[int], attrs: dict[str, Any]) -> tuple[float, int]:
    """(FLOPs of the forward GEMMs, output elements); a -1 dimension counts as 1."""
    oh, ow = (abs(d) for d in _output_hw("conv2d", x, w, attrs))
    out = abs(x[0]) * abs(w[0]) * oh * ow
    return 2.0 * out * numel(w[1:]), out


def _cost(shapes: dict, attrs: dict[str, Any], itemsize: int) -> tuple[float, float]:
    x, w = shapes["Input"][0], shapes["Filter"][0]
    flops, out = _forward_flops(x, w, attrs)
    return flops, float((numel(x) + numel(w) + out) * itemsize)


def _grad_cost(shapes: dict, attrs: dict[str, Any], itemsize: int) -> tuple[float, float]:
    # both gradient GEMMs; reads Input, Filter, Output@GRAD, writes both gradients
    x, w = shapes["Input"][0], shapes["Filter"][0]
    flops, out = _forward_flops(x, w, attrs)
    return 2 * flops, float((2 * numel(x) + 2 * numel(w) + out) * itemsize)


# conv2d_grad recomputes the columns instead of keeping them from the forward
# pass: Filter@GRAD needs Input, Input@GRAD needs Filter, neither needs Output.
register(OpDef("conv2d", inputs=["Input", "Filter"], outputs=["Output"], attrs=_ATTRS,
               check_attrs=_check_attrs("conv2d"), infer_shape=_infer_shape, cost=_cost,
               kernel=conv2d, grad=make_grad("conv2d_grad", inputs=["Input", "Filter"],
                                             grads_of=["Output"], grads_for=["Input", "Filter"])))
register(OpDef("conv2d_grad", inputs=["Input", "Filter", "Output@GRAD"],
               outputs=[optional("Input@GRAD"), optional("Filter@GRAD")], attrs=_ATTRS,
               check_attrs=_check_attrs("conv2d_grad"), infer_shape=_infer_grad_shape,
               cost=_grad_cost, kernel=conv2d_grad))
