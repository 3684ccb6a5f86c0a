"""The raw CUDA sources, checked without a GPU.

* Every source compiles with ``nvcc`` (skipped when nvcc is absent), with every
  template instance the launchers use, so GPU code that does not compile cannot
  land; a deliberately broken source fails the same check.
* Every launcher passes arguments in the order and of the types the kernel
  declares (parsed from the source).
* The kernels, compiled as host C++ with a sequential grid (skipped without a C++
  compiler), give what the numpy code they replace gives.
"""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

import reference_framework as rf
from pytest_opperf import timers as rf_timers
from reference_framework.ops import conv, cuda_kernels
from reference_framework.ops.cuda_kernels import KernelSource

NVCC = shutil.which("nvcc")
CXX = shutil.which("g++") or shutil.which("c++")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
needs_cxx = pytest.mark.skipif(CXX is None, reason="no host C++ compiler")


class CompileError(Exception):
    """A source did not compile; the message is the compiler's."""


def _instantiating(code: str, name_expressions: Sequence[str]) -> str:
    # Taking each instance's address makes the compiler instantiate (and so
    # check) template code it would otherwise only parse.
    table = "".join(f"  (void*)&{e},\n" for e in name_expressions)
    return f"{code}\nvoid* const opperf_instances[] = {{\n{table}  nullptr}};\n"


def compile_cuda(
    code: str, name_expressions: Sequence[str], workdir: Path, arch: str = "sm_90"
) -> str:
    """The PTX of ``code`` with every name expression instantiated."""
    src, ptx = workdir / "kernels.cu", workdir / "kernels.ptx"
    src.write_text(_instantiating(code, name_expressions))
    result = subprocess.run(
        [
            NVCC,
            f"-arch={arch}",
            "--ptx",
            "-std=c++14",
            "-Werror",
            "all-warnings",
            "-diag-suppress",
            "177",
            str(src),
            "-o",
            str(ptx),
        ],  # 177: the unused table
        capture_output=True,
        text=True,
        timeout=300,
    )
    if result.returncode != 0:
        raise CompileError(result.stdout + result.stderr)
    return ptx.read_text()


@needs_nvcc
@pytest.mark.parametrize("source", cuda_kernels.sources(), ids=lambda s: s.name)
def test_every_source_compiles_with_nvcc(source: KernelSource, tmp_path):
    ptx = compile_cuda(source.code, source.name_expressions, tmp_path)
    entries = re.findall(r"^\.visible \.entry (\w+)\(", ptx, re.MULTILINE)
    assert (
        len(entries) == len(source.name_expressions) == 8
    )  # 2 kernels x float/double x int/long long


@needs_nvcc
@pytest.mark.parametrize("code, expressions, complaint", [
    ("__global__ void k(float* x) { x[0] = undefined_name; }", (), "undefined_name"),
    ("__global__ void k(float* x) { x[0] = 1.0f }", (), "expected"),
    # an error only an instantiation reveals
    ("template <typename T> __global__ void k(T* x) { x->missing = 1; }", ("k<float>",), "missing"),
])
def test_the_compile_check_fails_on_broken_code(code, expressions, complaint, tmp_path):
    with pytest.raises(CompileError, match=complaint):
        compile_cuda(code, expressions, tmp_path)


# --- the launchers against the kernels' declared parameters ---------------------

_SIGNATURE = re.compile(r"template <typename T, typename I>\s*__global__ void (\w+)\(([^)]*)\)")
_CTYPES = {"float": np.float32, "double": np.float64}
_CTYPES_NAMES = {np.dtype(v): k for k, v in _CTYPES.items()}


def kernel_parameters(source: KernelSource) -> dict[str, list[str]]:
    """Each kernel's parameter types as declared, e.g. ``["const T*", "T*", "I", "int"]``."""
    return {name: [" ".join(p.split()[:-1]) for p in params.split(",")]
            for name, params in _SIGNATURE.findall(source.code)}


def _check_arguments(expression: str, args: Sequence[object]) -> None:
    name, ctype, index = re.fullmatch(r"(\w+)<(\w+), ([\w ]+)>", expression).groups()
    source = next(s for s in cuda_kernels.sources() if expression in s.name_expressions)
    declared = kernel_parameters(source)[name]
    assert len(args) == len(declared), (
        f"{expression}: {len(args)} arguments for {len(declared)} parameters"
    )
    index_type = np.int64 if index == "long long" else np.int32
    for i, (arg, decl) in enumerate(zip(args, declared, strict=True)):
        if decl.endswith("*"):
            ok = (
                isinstance(arg, np.ndarray)
                and arg.dtype == _CTYPES[ctype]
                and arg.flags.c_contiguous
            )
        else:
            ok = type(arg) is {"I": index_type, "int": np.int32}[decl]
        assert ok, (
            f"{expression}: argument {i} is {type(arg).__name__} {getattr(arg, 'dtype', '')}, "
            f"declared {decl}"
        )


class _RecordingModule:
    """Stands in for a cupy RawModule: checks arguments, runs nothing."""

    def __init__(self, calls: list) -> None:
        self.calls = calls

    def get_function(self, expression: str):
        def launch(grid, block, args):
            _check_arguments(expression, args)
            self.calls.append(expression)
        return launch


@pytest.fixture
def recorded(monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(cuda_kernels, "_module", lambda name: _RecordingModule(calls))
    cuda_kernels._function.cache_clear()  # kernel instances are cached: look them up in this module
    yield calls
    cuda_kernels._function.cache_clear()


def _run_every_launcher(dtype) -> None:
    x = np.ones((2, 3, 6, 5), dtype)
    col = cuda_kernels.im2col(x, (3, 3), (1, 1), (1, 1), (1, 1), (6, 5))
    cuda_kernels.col2im(col, x.shape, (3, 3), (1, 1), (1, 1), (1, 1), (6, 5))
    out = cuda_kernels.pool2d_forward(x, True, (2, 2), (2, 2), (0, 0), (3, 2))
    cuda_kernels.pool2d_backward(x, out, out, False, (2, 2), (2, 2), (0, 0))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("wide", [False, True])
def test_launchers_pass_the_declared_argument_types(recorded, monkeypatch, dtype, wide):
    if wide:  # pretend the tensors are huge: 64-bit indices
        monkeypatch.setattr(cuda_kernels, "_INT32_INDEX_LIMIT", 0)
    _run_every_launcher(dtype)
    ctype, index = _CTYPES_NAMES[np.dtype(dtype)], "long long" if wide else "int"
    assert recorded == [
        f"{k}<{ctype}, {index}>" for k in ("im2col", "col2im", "pool_forward", "pool_backward")
    ]


def test_the_signature_check_catches_a_swapped_argument():
    with pytest.raises(AssertionError, match="argument 2"):
        _check_arguments(
            "im2col<float, int>",
            [np.ones(1, np.float32), np.ones(1, np.float32), np.int64(1), *[np.int32(1)] * 13],
        )


class _CountingModule:
    """A RawModule whose look-ups are counted (each builds a new kernel object, as cupy's does)."""

    def __init__(self) -> None:
        self.lookups: list[str] = []

    def get_function(self, expression: str):
        self.lookups.append(expression)
        return lambda grid, block, args: None


def test_each_kernel_instance_is_looked_up_once_and_timed_as_compile_time(monkeypatch):
    module = _CountingModule()
    monkeypatch.setattr(cuda_kernels, "_module", lambda name: module)
    cuda_kernels._function.cache_clear()
    try:
        with rf_timers.recording() as table:
            for _ in range(3):
                _run_every_launcher(np.float32)
    finally:
        cuda_kernels._function.cache_clear()
    assert module.lookups == [
        f"{k}<float, int>" for k in ("im2col", "col2im", "pool_forward", "pool_backward")
    ]
    compile_stat = table["CompileTimer"]
    assert (compile_stat.count, compile_stat.parent, compile_stat.kernel) == (4, None, False)


def test_launchers_refuse_other_dtypes(recorded):
    with pytest.raises(
        rf.OpError, match="im2col: the CUDA kernel takes float32 or float64 arrays, given float16"
    ):
        cuda_kernels.im2col(
            np.ones((1, 1, 3, 3), np.float16), (1, 1), (1, 1), (0, 0), (1, 1), (3, 3)
        )


# --- the kernels, emulated on the host -----------------------------------------

_HARNESS = r"""
// CUDA's built-in variables and qualifiers for a sequential host emulation
struct EmuDim { unsigned int x, y, z; };
static EmuDim blockIdx, threadIdx, blockDim, gridDim;
#define __global__
#define __device__
#define __forceinline__ inline
"""


def _emulation_source() -> tuple[str, dict[str, str]]:
    """C++ with one ``extern "C"`` entry per kernel instance running its whole grid."""
    parts, entries = [_HARNESS], {}
    for source in cuda_kernels.sources():
        parts.append(
            f"namespace {source.name} {{\n{source.code}\n}}"
        )  # the sources share helper names
        params = kernel_parameters(source)
        for expression in source.name_expressions:
            name, ctype, index = re.fullmatch(r"(\w+)<(\w+), ([\w ]+)>", expression).groups()
            types = [re.sub(r"\bI\b", index, re.sub(r"\bT\b", ctype, p)) for p in params[name]]
            args = ", ".join(f"*({t}*)args[{i}]" for i, t in enumerate(types))
            entry = entries[expression] = f"emulate_{len(entries)}"
            parts.append(f"""
extern "C" void {entry}(void** args, unsigned grid, unsigned block) {{
  gridDim.x = grid; blockDim.x = block;
  for (unsigned b = 0; b < grid; ++b)
    for (unsigned t = 0; t < block; ++t) {{
      blockIdx.x = b; threadIdx.x = t;
      {source.name}::{expression}({args});
    }}
}}""")
    return "\n".join(parts), entries


class _EmulatedModule:
    def __init__(self, lib: ctypes.CDLL, entries: dict[str, str]) -> None:
        self.lib, self.entries = lib, entries

    def get_function(self, expression: str):
        entry = getattr(self.lib, self.entries[expression])

        def launch(grid, block, args):
            _check_arguments(expression, args)
            values = [
                ctypes.c_void_p(a.ctypes.data)
                if isinstance(a, np.ndarray)
                else (ctypes.c_int64 if isinstance(a, np.int64) else ctypes.c_int32)(int(a))
                for a in args
            ]
            pointers = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
            entry(pointers, ctypes.c_uint(grid[0]), ctypes.c_uint(block[0]))
        return launch


@pytest.fixture(scope="module")
def emulation(tmp_path_factory):
    if CXX is None:
        pytest.skip("no host C++ compiler")
    code, entries = _emulation_source()
    workdir = tmp_path_factory.mktemp("cuda_emulation")
    (workdir / "kernels.cpp").write_text(code)
    result = subprocess.run(
        [
            CXX,
            "-std=c++14",
            "-O1",
            "-shared",
            "-fPIC",
            "-o",
            str(workdir / "kernels.so"),
            str(workdir / "kernels.cpp"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return _EmulatedModule(ctypes.CDLL(str(workdir / "kernels.so")), entries)


@pytest.fixture(params=[False, True], ids=["int32-index", "int64-index"])
def emulated(request, emulation, monkeypatch):
    monkeypatch.setattr(cuda_kernels, "_module", lambda name: emulation)
    cuda_kernels._function.cache_clear()
    if request.param:
        monkeypatch.setattr(cuda_kernels, "_INT32_INDEX_LIMIT", 0)
    yield
    cuda_kernels._function.cache_clear()


CONV_CASES = [  # (Input shape, Filter shape, attrs)
    ((2, 3, 7, 9), (4, 3, 3, 3), {"paddings": [1, 1]}),
    ((2, 3, 9, 7), (5, 3, 3, 3), {"strides": [2, 2], "paddings": [1, 1]}),
    ((1, 2, 9, 8), (3, 2, 3, 3), {"dilations": [2, 2], "paddings": [2, 1]}),
    ((2, 3, 8, 11), (4, 3, 2, 3), {"strides": [2, 1], "paddings": [0, 1], "dilations": [1, 2]}),
    ((1, 3, 15, 13), (4, 3, 7, 7), {"strides": [2, 2], "paddings": [3, 3]}),
]


def _geometry(x_shape, w_shape, attrs, dtype):
    full = rf.registry.get_op_def("conv2d").complete_attrs(attrs)
    return conv._geometry("conv2d", np.empty(x_shape, dtype), np.empty(w_shape, dtype), full)


@pytest.mark.usefixtures("emulated")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("x_shape, w_shape, attrs", CONV_CASES)
def test_im2col_and_col2im_kernels_match_the_numpy_code(x_shape, w_shape, attrs, dtype):
    g = _geometry(x_shape, w_shape, attrs, dtype)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(x_shape).astype(dtype)
    args = ((g.kh, g.kw), g.strides, g.paddings, g.dilations, (g.oh, g.ow))
    np.testing.assert_array_equal(cuda_kernels.im2col(x, *args), conv._im2col(x, g))
    dcol = rng.standard_normal((g.k, g.p)).astype(dtype)
    want = conv._col2im(dcol, g)
    np.testing.assert_allclose(
        cuda_kernels.col2im(dcol, x_shape, *args),
        want,
        rtol=1e-6 if dtype == np.float32 else 1e-13,
        atol=1e-6 if dtype == np.float32 else 1e-13,
    )


POOL_CASES = [  # (X shape, ksize, strides, paddings)
    ((2, 3, 9, 11), (3, 3), (2, 2), (1, 1)),
    ((1, 2, 5, 6), (3, 3), (1, 1), (1, 1)),
    ((2, 2, 9, 7), (3, 2), (2, 1), (1, 0)),
    ((1, 3, 8, 8), (3, 3), (3, 2), (0, 0)),
    ((2, 2, 5, 7), (5, 7), (1, 1), (0, 0)),  # global
]


@pytest.mark.usefixtures("emulated")
@pytest.mark.parametrize("pooling_type", ["max", "avg"])
@pytest.mark.parametrize("x_shape, ksize, strides, paddings", POOL_CASES)
@pytest.mark.parametrize("ties", [False, True], ids=["random", "ties"])
def test_pool_kernels_match_the_numpy_code(x_shape, ksize, strides, paddings, pooling_type, ties):
    rng = np.random.default_rng(1)
    # ties: few distinct values, so windows hold repeated maxima
    x = (
        rng.integers(-2, 2, x_shape).astype(np.float32)
        if ties
        else rng.standard_normal(x_shape).astype(np.float32)
    )
    attrs = {
        "pooling_type": pooling_type,
        "ksize": list(ksize),
        "strides": list(strides),
        "paddings": list(paddings),
    }
    out = rf.run_op("pool2d", {"X": x}, attrs)["Out"]
    is_max = pooling_type == "max"
    got = cuda_kernels.pool2d_forward(x, is_max, ksize, strides, paddings, out.shape[2:])
    np.testing.assert_allclose(got, out, rtol=1e-6, atol=1e-7)
    dout = rng.standard_normal(out.shape).astype(np.float32)
    want = rf.run_op("pool2d_grad", {"X": x, "Out": out, "Out@GRAD": dout}, attrs)["X@GRAD"]
    got = cuda_kernels.pool2d_backward(x, out, dout, is_max, ksize, strides, paddings)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
