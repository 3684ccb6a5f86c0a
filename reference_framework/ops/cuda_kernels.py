"""Raw CUDA kernels of the project (im2col, col2im, pooling) and their launchers.

The numpy code of ``conv.py`` and ``pool.py`` works by strided slices over a
padded copy of the input; on a GPU that means a padded copy plus kh x kw small
kernel launches per op. These kernels do the same work in one launch each,
reading the unpadded input and treating padded cells as zero (convolution) or
as absent (pooling), and they gather instead of scatter, so every result is
written by exactly one thread: no atomics, and results do not depend on the
order threads run in.

Each kernel is a template over the element type ``T`` (float or double) and
the index type ``I`` (int, or long long once a tensor has 2**31 elements or
more). Sources are compiled lazily, once per process, through cupy's
``RawModule`` (cupy comes from :func:`backend.cupy_or_none`), and each kernel
instance is looked up once per device (``RawModule.get_function`` builds a new
``RawKernel`` on every call); that first look-up, which compiles and loads the
module, is timed as ``CompileTimer``. No header is
included, so NVRTC compiles them without a toolkit. :func:`sources` lists every
source with the instantiations the launchers use, so tests can compile them
with ``nvcc`` on machines without a GPU.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from time import perf_counter_ns
from typing import Any

import numpy as np

from pytest_opperf import timers

from ..backend import cupy_or_none, get_array_module
from ..registry import OpError

__all__ = [
    "KernelSource",
    "col2im",
    "im2col",
    "pool2d_backward",
    "pool2d_forward",
    "sources",
]

_THREADS = 256
_MAX_BLOCKS = 65535 * 16  # grid-stride loops cover the rest
# Above this many elements indices are 64-bit; the margin keeps the last
# grid-stride step (index + threads in the grid) from overflowing an int.
_INT32_INDEX_LIMIT = 2**31 - 1 - _THREADS * _MAX_BLOCKS

_TYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}

# Helpers shared by the sources; device-side min/max of one type avoid relying on
# CUDA's overload set (and keep the sources plain C++).
_PRELUDE = r"""
template <typename I> __device__ __forceinline__ I imin(I a, I b) { return a < b ? a : b; }
template <typename I> __device__ __forceinline__ I imax(I a, I b) { return a > b ? a : b; }
"""

_CONV_SOURCE = _PRELUDE + r"""
// x [n, c, h, w] -> col [c * kh * kw, n * oh * ow]: rows in (channel, ky, kx)
// order to match the filter reshaped [oc, c * kh * kw]; one thread per element
// of col, so consecutive threads write consecutive output positions.
template <typename T, typename I>
__global__ void im2col(const T* x, T* col, I n, I c, I h, I w, I oh, I ow,
                       int kh, int kw, int sh, int sw, int ph, int pw, int dh, int dw) {
  const I cols = n * oh * ow;
  const I total = c * kh * kw * cols;
  const I stride = (I)blockDim.x * gridDim.x;
  for (I idx = (I)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
    const I p = idx % cols;
    const I row = idx / cols;
    const I ox = p % ow;
    const I oy = (p / ow) % oh;
    const I b = p / (ow * oh);
    const int kx = (int)(row % kw);
    const int ky = (int)((row / kw) % kh);
    const I ch = row / ((I)kw * kh);
    const I iy = oy * sh - ph + (I)ky * dh;
    const I ix = ox * sw - pw + (I)kx * dw;
    col[idx] = (iy >= 0 && iy < h && ix >= 0 && ix < w) ? x[((b * c + ch) * h + iy) * w + ix]
                                                        : T(0);
  }
}

// col [c * kh * kw, n * oh * ow] -> x [n, c, h, w]: each input element sums the
// column entries that read it, in (ky, kx) order.
template <typename T, typename I>
__global__ void col2im(const T* col, T* x, I n, I c, I h, I w, I oh, I ow,
                       int kh, int kw, int sh, int sw, int ph, int pw, int dh, int dw) {
  const I cols = n * oh * ow;
  const I total = n * c * h * w;
  const I stride = (I)blockDim.x * gridDim.x;
  for (I idx = (I)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
    const I ix = idx % w;
    const I iy = (idx / w) % h;
    const I ch = (idx / (w * h)) % c;
    const I b = idx / (w * h * c);
    T sum = T(0);
    for (int ky = 0; ky < kh; ++ky) {
      const I ty = iy + ph - (I)ky * dh;  // = oy * sh when this row reads iy
      if (ty < 0 || ty % sh != 0 || ty / sh >= oh) continue;
      const I oy = ty / sh;
      for (int kx = 0; kx < kw; ++kx) {
        const I tx = ix + pw - (I)kx * dw;
        if (tx < 0 || tx % sw != 0 || tx / sw >= ow) continue;
        const I ox = tx / sw;
        sum += col[((ch * kh + ky) * kw + kx) * cols + (b * oh + oy) * ow + ox];
      }
    }
    x[idx] = sum;
  }
}
"""

_POOL_SOURCE = _PRELUDE + r"""
// x [planes, h, w] -> out [planes, oh, ow]. Padded cells are absent: the max
// never picks one and the average divides by the real cells only. Every window
// holds at least one real cell (the op requires paddings < ksize).
template <typename T, typename I>
__global__ void pool_forward(const T* x, T* out, I planes, I h, I w, I oh, I ow,
                             int kh, int kw, int sh, int sw, int ph, int pw, int is_max) {
  const I total = planes * oh * ow;
  const I stride = (I)blockDim.x * gridDim.x;
  for (I idx = (I)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
    const I ox = idx % ow;
    const I oy = (idx / ow) % oh;
    const T* plane = x + (idx / (ow * oh)) * h * w;
    const I y0 = imax<I>(oy * sh - ph, 0), y1 = imin<I>(oy * sh - ph + kh, h);
    const I x0 = imax<I>(ox * sw - pw, 0), x1 = imin<I>(ox * sw - pw + kw, w);
    T acc = is_max ? plane[y0 * w + x0] : T(0);
    for (I y = y0; y < y1; ++y) {
      for (I xx = x0; xx < x1; ++xx) {
        const T v = plane[y * w + xx];
        if (!is_max) acc += v;
        else if (v > acc || v != v) acc = v;  // v != v: a NaN wins, as numpy's maximum
      }
    }
    out[idx] = is_max ? acc : acc / T((y1 - y0) * (x1 - x0));
  }
}

// Gradient of pool_forward: each input element gathers from the windows that
// hold it. Max: a window's gradient goes to its first cell (row-major) equal to
// the window's output, i.e. its first maximum. Avg: out@grad / real cells.
template <typename T, typename I>
__global__ void pool_backward(const T* x, const T* out, const T* dout, T* dx, I planes, I h, I w,
                              I oh, I ow, int kh, int kw, int sh, int sw, int ph, int pw,
                              int is_max) {
  const I total = planes * h * w;
  const I stride = (I)blockDim.x * gridDim.x;
  for (I idx = (I)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
    const I ix = idx % w;
    const I iy = (idx / w) % h;
    const I p = idx / (w * h);
    const T* plane = x + p * h * w;
    // windows oy with oy * sh - ph <= iy < oy * sh - ph + kh
    const I ty = iy + ph - kh + 1, tx = ix + pw - kw + 1;
    const I oy0 = ty > 0 ? (ty + sh - 1) / sh : 0, oy1 = imin<I>((iy + ph) / sh + 1, oh);
    const I ox0 = tx > 0 ? (tx + sw - 1) / sw : 0, ox1 = imin<I>((ix + pw) / sw + 1, ow);
    T sum = T(0);
    for (I oy = oy0; oy < oy1; ++oy) {
      const I y0 = imax<I>(oy * sh - ph, 0), y1 = imin<I>(oy * sh - ph + kh, h);
      for (I ox = ox0; ox < ox1; ++ox) {
        const I o = (p * oh + oy) * ow + ox;
        const I x0 = imax<I>(ox * sw - pw, 0), x1 = imin<I>(ox * sw - pw + kw, w);
        if (!is_max) {
          sum += dout[o] / T((y1 - y0) * (x1 - x0));
          continue;
        }
        const T m = out[o];
        I first = -1;
        for (I y = y0; y < y1 && first < 0; ++y) {
          for (I xx = x0; xx < x1; ++xx) {
            if (plane[y * w + xx] == m) { first = y * w + xx; break; }
          }
        }
        if (first == iy * w + ix) sum += dout[o];
      }
    }
    dx[idx] = sum;
  }
}
"""


@dataclass(frozen=True)
class KernelSource:
    """One compilation unit: its code and the template instances launched from it."""

    name: str
    code: str
    name_expressions: tuple[str, ...]


def _instances(*kernels: str) -> tuple[str, ...]:
    return tuple(f"{k}<{t}, {i}>" for k in kernels for t in ("float", "double")
                 for i in ("int", "long long"))


_SOURCES = {
    "conv": KernelSource("conv", _CONV_SOURCE, _instances("im2col", "col2im")),
    "pool": KernelSource("pool", _POOL_SOURCE, _instances("pool_forward", "pool_backward")),
}


def sources() -> list[KernelSource]:
    """Every raw CUDA source of the project, with the instances the launchers use."""
    return list(_SOURCES.values())


@functools.cache
def _module(name: str) -> Any:
    cp = cupy_or_none()
    if cp is None:
        raise RuntimeError("the raw CUDA kernels need cupy, which is not installed")
    src = _SOURCES[name]
    return cp.RawModule(code=src.code, options=("--std=c++14",),
                        name_expressions=src.name_expressions)


@functools.cache
def _function(source: str, kernel: str, ctype: str, wide: bool, device: int) -> Any:
    """The compiled kernel instance for ``ctype`` and index width on ``device``
    (the current device), built once and cached."""
    start = perf_counter_ns()
    function = _module(source).get_function(f"{kernel}<{ctype}, {'long long' if wide else 'int'}>")
    table = timers.current()
    # a stat of its own, outside the op's tree: one-time work, not kernel time
    if table is not None:
        table.add("CompileTimer", perf_counter_ns() - start)
    return function


def _ctype(kernel: str, dtype: Any) -> str:
    ctype = _TYPES.get(np.dtype(dtype))
    if ctype is None:
        raise OpError(f"{kernel}: the CUDA kernel takes float32 or float64 arrays, given "
                      f"{np.dtype(dtype).name}")
    return ctype


def _launch(source: str, kernel: str, dtype: Any, threads_needed: int, sizes: Sequence[int],
            ints: Sequence[int], arrays: Sequence[Any]) -> None:
    """Launch one grid-stride kernel: ``arrays`` first, then ``sizes`` as the index
    type (64-bit when any tensor reaches 2**31 elements), then ``ints`` as int."""
    if threads_needed == 0:
        return
    dtypes = {np.dtype(a.dtype).name for a in arrays}
    if len(dtypes) > 1:
        raise OpError(f"{kernel}: the CUDA kernel takes arrays of one dtype, "
                      f"given {sorted(dtypes)}")
    ctype = _ctype(kernel, dtype)
    cp = cupy_or_none()
    # else a host emulation (the tests')
    on_gpu = cp is not None and isinstance(arrays[0], cp.ndarray)
    device = arrays[0].device.id if on_gpu else -1
    # Raw kernels take bare pointers and cupy checks no device: a foreign array is an error here.
    if on_gpu and any(a.device.id != device for a in arrays):
        raise OpError(f"{kernel}: the CUDA kernel takes arrays of one device, given devices "
                      f"{sorted({a.device.id for a in arrays})}")
    wide = max(max(a.size for a in arrays), threads_needed) > _INT32_INDEX_LIMIT
    index = np.int64 if wide else np.int32
    blocks = min((threads_needed + _THREADS - 1) // _THREADS, _MAX_BLOCKS)
    args = (*arrays, *(index(s) for s in sizes), *(np.int32(v) for v in ints))
    if cp is None or not on_gpu or cp.cuda.runtime.getDevice() == device:
        _function(source, kernel, ctype, wide, device)((blocks,), (_THREADS,), args)
    else:  # launched where its arrays are
        with cp.cuda.Device(device):
            _function(source, kernel, ctype, wide, device)((blocks,), (_THREADS,), args)


def im2col(x: Any, ksize: Sequence[int], strides: Sequence[int], paddings: Sequence[int],
           dilations: Sequence[int], out_hw: Sequence[int]) -> Any:
    """Columns ``[C * kh * kw, N * OH * OW]`` of ``x`` ``[N, C, H, W]`` (zero padding)."""
    xp = get_array_module(x)
    x = xp.ascontiguousarray(x)
    n, c, h, w = x.shape
    (kh, kw), (oh, ow) = ksize, out_hw
    col = xp.empty((c * kh * kw, n * oh * ow), dtype=x.dtype)
    _launch("conv", "im2col", x.dtype, col.size, (n, c, h, w, oh, ow),
            (kh, kw, *strides, *paddings, *dilations), (x, col))
    return col


def col2im(col: Any, x_shape: Sequence[int], ksize: Sequence[int], strides: Sequence[int],
           paddings: Sequence[int], dilations: Sequence[int], out_hw: Sequence[int]) -> Any:
    """The image gradient ``[N, C, H, W]`` summed from column gradients ``col``."""
    xp = get_array_module(col)
    col = xp.ascontiguousarray(col)
    n, c, h, w = x_shape
    (kh, kw), (oh, ow) = ksize, out_hw
    x = xp.empty((n, c, h, w), dtype=col.dtype)
    _launch("conv", "col2im", col.dtype, x.size, (n, c, h, w, oh, ow),
            (kh, kw, *strides, *paddings, *dilations), (col, x))
    return x


def pool2d_forward(x: Any, is_max: bool, ksize: Sequence[int], strides: Sequence[int],
                   paddings: Sequence[int], out_hw: Sequence[int]) -> Any:
    """Max or average pooling of ``x`` ``[N, C, H, W]``; padded cells are left out."""
    xp = get_array_module(x)
    x = xp.ascontiguousarray(x)
    n, c, h, w = x.shape
    oh, ow = out_hw
    out = xp.empty((n, c, oh, ow), dtype=x.dtype)
    _launch("pool", "pool_forward", x.dtype, out.size, (n * c, h, w, oh, ow),
            (*ksize, *strides, *paddings, int(is_max)), (x, out))
    return out


def pool2d_backward(x: Any, out: Any, dout: Any, is_max: bool, ksize: Sequence[int],
                    strides: Sequence[int], paddings: Sequence[int]) -> Any:
    """The gradient of :func:`pool2d_forward` with respect to ``x``."""
    xp = get_array_module(x)
    x, out, dout = (xp.ascontiguousarray(a) for a in (x, out, dout))
    n, c, h, w = x.shape
    oh, ow = out.shape[2:]
    dx = xp.empty_like(x)
    _launch("pool", "pool_backward", x.dtype, dx.size, (n * c, h, w, oh, ow),
            (*ksize, *strides, *paddings, int(is_max)), (x, out, dout, dx))
    return dx
