"""Creation and conversion ops: fill_constant, fill_zeros_like, cast, and the
seeded random initialisers gaussian_random and uniform_random."""

from __future__ import annotations

from typing import Any

from ..backend import gpu_random
from ..registry import REQUIRED, KernelContext, OpDef, OpError, register
from ._util import check_ints


def _shape_attr(op: str):
    def check(attrs: dict[str, Any]) -> None:
        check_ints(op, "shape", attrs["shape"], minimum=1)
    return check


def _shape_from_attr(shapes: dict, attrs: dict[str, Any]) -> dict:
    return {"Out": [tuple(attrs["shape"])]}


def _same_shape(shapes: dict, attrs: dict[str, Any]) -> dict:
    return {"Out": [shapes["X"][0]]}


def fill_constant(ins: dict[str, Any], attrs: dict[str, Any], ctx: KernelContext) -> dict[str, Any]:
    return {"Out": ctx.xp.full(attrs["shape"], attrs["value"], dtype=attrs["dtype"])}


def fill_zeros_like(ins: dict[str, Any], attrs: dict[str, Any],
                    ctx: KernelContext) -> dict[str, Any]:
    return {"Out": ctx.xp.zeros_like(ins["X"])}


def cast(ins: dict[str, Any], attrs: dict[str, Any], ctx: KernelContext) -> dict[str, Any]:
    x = ins["X"]
    if attrs["in_dtype"] != x.dtype.name:
        raise OpError(f"cast: attribute 'in_dtype' is {attrs['in_dtype']}, but X has dtype "
                      f"{x.dtype.name}")
    return {"Out": x.astype(attrs["out_dtype"])}


def _generator(ctx: KernelContext, seed: int) -> Any:
    # seed 0 means "not seeded", as in the reference framework. On a GPU the
    # device's one cuRAND generator is reseeded: a new default_rng per op would
    # initialise a fresh set of device-side curand states on every call.
    if ctx.place.is_gpu:
        return _GpuDraws(gpu_random(ctx.place, seed if seed else None))
    return ctx.xp.random.default_rng(seed if seed else None)


class _GpuDraws:
    """numpy Generator's two draws on a cupy RandomState."""

    __slots__ = ("_rs",)

    def __init__(self, rs: Any) -> None:
        self._rs = rs

    def standard_normal(self, shape: tuple[int, ...], dtype: str) -> Any:
        return self._rs.standard_normal(shape, dtype=dtype)

    def random(self, shape: tuple[int, ...], dtype: str) -> Any:
        return self._rs.random_sample(shape, dtype=dtype)


def _draw_dtype(dtype: str) -> str:
    """Generators draw float32 or float64 directly; other dtypes are cast after."""
    return dtype if dtype in ("float32", "float64") else "float64"


def gaussian_random(ins: dict[str, Any], attrs: dict[str, Any],
                    ctx: KernelContext) -> dict[str, Any]:
    # Drawing in the target float type, not float64 then converting: ResNet-50's
    # startup draws 23M weights, and the conversion pass quadrupled its cost.
    out = _generator(ctx, attrs["seed"]).standard_normal(tuple(attrs["shape"]),
                                                         dtype=_draw_dtype(attrs["dtype"]))
    out *= attrs["std"]
    out += attrs["mean"]
    return {"Out": out.astype(attrs["dtype"], copy=False)}


def uniform_random(ins: dict[str, Any], attrs: dict[str, Any],
                   ctx: KernelContext) -> dict[str, Any]:
    low, high = attrs["min"], attrs["max"]
    if low >= high:
        raise OpError(f"uniform_random: attribute 'min' ({low}) must be below 'max' ({high})")
    out = _generator(ctx, attrs["seed"]).random(tuple(attrs["shape"]),
                                                dtype=_draw_dtype(attrs["dtype"]))
    out *= high - low
    out += low
    return {"Out": out.astype(attrs["dtype"], copy=False)}


register(OpDef("fill_constant", inputs=[], outputs=["Out"], attrs={"shape": REQUIRED, "value": 0.0,
                                                                   "dtype": "float32"},
               check_attrs=_shape_attr("fill_constant"), infer_shape=_shape_from_attr,
               kernel=fill_constant))
register(OpDef("fill_zeros_like", inputs=["X"], outputs=["Out"], infer_shape=_same_shape,
               kernel=fill_zeros_like))
register(OpDef("cast", inputs=["X"], outputs=["Out"],
               attrs={"in_dtype": REQUIRED, "out_dtype": REQUIRED}, infer_shape=_same_shape,
               kernel=cast))
register(OpDef("gaussian_random", inputs=[], outputs=["Out"], attrs={"shape": REQUIRED, "mean": 0.0,
                                                                     "std": 1.0, "seed": 0,
                                                                     "dtype": "float32"},
               check_attrs=_shape_attr("gaussian_random"), infer_shape=_shape_from_attr,
               kernel=gaussian_random))
register(OpDef("uniform_random", inputs=[], outputs=["Out"], attrs={"shape": REQUIRED, "min": -1.0,
                                                                    "max": 1.0, "seed": 0,
                                                                    "dtype": "float32"},
               check_attrs=_shape_attr("uniform_random"), infer_shape=_shape_from_attr,
               kernel=uniform_random))
