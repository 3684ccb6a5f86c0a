"""pytest_opperf.torch in a pytest session: the device hook a conftest re-exports, the
report of a torch suite with no glue, per-op benchmarks with torch's FLOP counts, the
peer table, and the import rule (``import pytest_opperf`` never imports torch)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pytest_opperf.device import CPU_HOST
from pytest_opperf.measure import op_run
from tests.opperf_suites import inner_run_env  # noqa: F401

torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0)")

from pytest_opperf.torch import op_flops, pytest_opperf_select_device  # noqa: E402 (needs torch: after the importorskip)
from pytest_opperf.torch.device import device_class  # noqa: E402 (needs torch: after the importorskip)

pytest_plugins = ["pytester"]


def _import_what_torch_imports_lazily() -> None:
    """pytester drops the modules an inner run imported; torch imports some on first
    use (the optimizer's step, the flop counter) and cannot register them twice."""
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.ones(1, 2)).sum().backward()
    opt.step()
    op_flops(torch.mm, torch.ones(2, 2), torch.ones(2, 2))


_import_what_torch_imports_lazily()

CONFTEST = "from pytest_opperf.torch import pytest_opperf_select_device  # noqa: F401\n"

SUITE = """
import torch
from torch import nn

from pytest_opperf.torch import benchmark_op, profile


def test_train(opperf):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 4 * 4, 5))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(2, 3, 8, 8), torch.tensor([1, 3])
    with opperf.measure() as run, profile():
        for _ in range(3):
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            run.step(examples=2)


def test_conv(opperf_benchmark):
    benchmark_op(opperf_benchmark, torch.nn.functional.conv2d, torch.randn(2, 3, 8, 8),
                 torch.randn(4, 3, 3, 3), stat="conv2d")


def test_relu(opperf_benchmark):
    benchmark_op(opperf_benchmark, torch.relu, torch.randn(64), stat="relu")
"""


def test_a_torch_suite_gets_its_stat_table_with_no_glue(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest_inprocess(
        "--opperf",
        "--opperf-json=out.json",
        "--benchmark-max-time=0.01",
        "--benchmark-min-rounds=3",
        "-p",
        "no:cacheprovider",
    )
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines([
        "session: device=cpu timing=host workload=small",
        "note: no GPU (torch * is a CPU build): fell back to CPU",
        "test_suite.py::test_train  device=cpu timing=host",
        "aten::convolution_backward *",
        "untimed *% | framework overhead 0.00% | kernels *% of wall time",
        "note: torch: executor time is the time inside top-level aten operators*",
    ])
    runs = {r["id"]: r for r in json.loads(pytester.path.joinpath("out.json").read_text())["runs"]}
    train = runs["test_suite.py::test_train"]
    assert (
        train["counts"]["aten::convolution"] == 1
        and train["counts"]["aten::convolution_backward"] == 1
    )
    assert train["executor_stat"] is None
    conv = runs["test_suite.py::test_conv"]["stats"][0]
    calls = conv["count"]
    assert conv["name"] == "conv2d" and conv["flops"] == pytest.approx(
        calls * 2 * 2 * 4 * 6 * 6 * 3 * 3 * 3
    )  # no padding: 6x6 out
    assert (
        runs["test_suite.py::test_relu"]["stats"][0].get("flops") is None
    )  # torch counts no FLOPs for relu


def test_without_opperf_profile_and_benchmark_op_only_run_the_code(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str()
    result.assert_outcomes(passed=3)
    assert "opperf" not in result.stdout.str().split("passed")[-1]


def test_opperf_device_gpu_without_cuda_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest_inprocess(
        "--opperf", "--opperf-device=gpu", "-p", "no:cacheprovider"
    )
    assert result.ret == 4
    assert "opperf: --opperf-device=gpu: no usable GPU: torch" in result.stderr.str()
    assert "Traceback" not in result.stderr.str()


def test_the_device_hook_honours_opperf_device() -> None:
    if torch.cuda.is_available():
        pytest.skip("a CUDA machine: the CPU answers are checked on CPU machines")
    cpu = pytest_opperf_select_device(None, "cpu")
    assert (cpu.name, cpu.is_gpu, cpu.device_class, cpu.note) == ("cpu", False, "cpu", "")
    auto = pytest_opperf_select_device(None, "auto")
    assert (
        not auto.is_gpu
        and auto.note.startswith("no GPU (torch ")
        and auto.note.endswith("fell back to CPU")
    )
    with pytest.raises(pytest.UsageError, match="--opperf-device=gpu: no usable GPU"):
        pytest_opperf_select_device(None, "gpu")
    assert device_class("NVIDIA H200") == "nvidia-h200"
    assert device_class("NVIDIA GeForce RTX 4090") == "nvidia-geforce-rtx-4090"


def test_op_flops_come_from_torchs_counter() -> None:
    x, w = torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3)
    assert op_flops(torch.nn.functional.conv2d, x, w, padding=1) == 2 * 2 * 4 * 8 * 8 * 3 * 3 * 3
    assert op_flops(torch.mm, torch.randn(5, 6), torch.randn(6, 7)) == 2 * 5 * 6 * 7
    assert op_flops(torch.relu, x) is None


def test_import_pytest_opperf_does_not_import_torch() -> None:
    code = (
        "import sys, pytest_opperf, pytest_opperf.plugin, pytest_opperf.measure, "
        "pytest_opperf.torch\n"
        "from pytest_opperf.torch import pytest_opperf_select_device\n"
        "assert 'torch' not in sys.modules, "
        "sorted(m for m in sys.modules if m.startswith('torch'))\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# --- the peer table -----------------------------------------------------------------------

def _op(run_id: str, stat: str, ms: float) -> object:
    return op_run(run_id, stat, [ms / 1e3] * 5, 1, CPU_HOST, "host")


def test_the_peer_table_sums_median_times_per_op_type_over_shapes_both_ran() -> None:
    from suites.torch.peer import peer_lines

    ref, tor = "suites/test_ops.py::test_op", "suites/torch/test_torch.py::test_op"
    runs = [_op(f"{ref}[conv2d-a]", "conv2d", 4.0), _op(f"{tor}[conv2d-a]", "conv2d", 1.0),
            _op(f"{ref}[conv2d-b]", "conv2d", 2.0), _op(f"{tor}[conv2d-b]", "conv2d", 1.0),
            _op(f"{ref}[relu-a]", "relu", 0.3), _op(f"{tor}[relu-a]", "relu", 0.1),
            _op(f"{ref}[top_k-a]", "top_k", 0.5)]  # no torch peer: left out
    lines = peer_lines(runs)
    rows = {
        line.split()[0]: line.split()
        for line in lines[2:]
        if line.split() and line.split()[0] in ("conv2d", "relu", "all", "top_k")
    }
    assert rows["conv2d"][1:] == ["2", "6.000", "2.000", "3.000"]
    assert rows["relu"][1:] == ["1", "0.300", "0.100", "3.000"]
    assert rows["all"][1:] == ["3", "6.300", "2.100", "3.000"]
    assert "top_k" not in rows
    assert (
        peer_lines([r for r in runs if r.id.startswith(ref)]) == []
    )  # one framework alone: no table
