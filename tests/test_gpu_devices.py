"""The GPU path's device logic on a fake cupy (tests/fake_cupy.py): CUDAPlace(n)
runs every op, allocation, event and draw on device n; the GPU check compiles
and runs a kernel before saying yes; generators and kernels are cached."""

from __future__ import annotations

import numpy as np
import pytest

import reference_framework as rf
from reference_framework import backend
from reference_framework.ops import cuda_kernels
from tests import fake_cupy


@pytest.fixture
def cp(monkeypatch):
    fake = fake_cupy.install(monkeypatch, devices=2)
    yield fake
    fake._forget()


# --- the GPU check ---------------------------------------------------------------------


def test_a_gpu_is_usable_only_after_a_kernel_compiled_and_ran(cp):
    assert backend.gpu_available() and backend.gpu_unavailable_reason() == ""
    assert ("launch", 0, "opperf_probe") in cp.log


def test_nvrtc_missing_means_no_gpu_with_the_reason(cp):
    cp.nvrtc_error = "CUDA_ERROR_FILE_NOT_FOUND: libnvrtc.so.12: cannot open shared object file"
    assert not backend.gpu_available()
    reason = backend.gpu_unavailable_reason()
    assert (
        reason.startswith("cupy cannot compile and run a raw CUDA kernel (NVRTC)")
        and "libnvrtc.so.12" in reason
    )


def test_cupys_own_kernels_failing_means_no_gpu(cp):
    cp.elementwise_error = "catastrophic error: cannot open source file \"cuda_fp16.h\""
    assert not backend.gpu_available()
    assert "cupy cannot compile its own elementwise kernels" in backend.gpu_unavailable_reason()
    assert "cuda_fp16.h" in backend.gpu_unavailable_reason()


def test_no_device_and_no_driver(cp):
    cp.devices = 0
    assert backend.gpu_unavailable_reason() == "no CUDA device is visible"
    backend._gpu_problem.cache_clear()
    cp.driver_error = "cudaErrorNoDevice"
    assert backend.gpu_unavailable_reason() == "CUDA is not usable: cudaErrorNoDevice"


def test_a_place_beyond_the_visible_devices_is_an_error(cp):
    with pytest.raises(
        RuntimeError, match=r"cuda:2 was asked for, but the visible CUDA devices are cuda:0..cuda:1"
    ):
        backend.array_module(rf.CUDAPlace(2))


def test_the_suites_fall_back_to_the_cpu_with_the_reason(cp):
    from suites.conftest import pytest_opperf_select_device

    cp.nvrtc_error = "nvrtc: libnvrtc.so not found"
    device = pytest_opperf_select_device(config=None, requested="auto")
    assert not device.is_gpu
    assert (
        device.note.startswith("no GPU (cupy cannot compile and run a raw CUDA kernel")
        and "libnvrtc" in device.note
    )
    with pytest.raises(
        pytest.UsageError, match="--opperf-device=gpu: no usable GPU here: cupy cannot compile"
    ):
        pytest_opperf_select_device(config=None, requested="gpu")


# --- CUDAPlace(n): everything on device n ---------------------------------------------


def test_the_fake_fails_as_cupy_does_when_devices_meet(cp):
    with cp.cuda.Device(1):
        x = cp.asarray(np.ones(3, np.float32))
    with pytest.raises(fake_cupy.PeerAccessError):
        x + x  # current device 0


def test_run_op_runs_on_its_places_device(cp):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = rf.run_op("elementwise_add", {"X": x, "Y": x}, place=rf.CUDAPlace(1))["Out"]
    assert out.device.id == 1 and cp.current == 0
    np.testing.assert_array_equal(out.get(), 2 * x)
    # inputs already on device 1: the place is inferred from them, and the op runs there too
    again = rf.run_op("relu", {"X": out})["Out"]
    assert again.device.id == 1


def test_run_op_moves_inputs_of_another_device(cp):
    with cp.cuda.Device(0):
        x = cp.asarray(np.ones(4, np.float32))
    out = rf.run_op("relu", {"X": x}, place=rf.CUDAPlace(1))["Out"]
    assert out.device.id == 1


def _small_program():
    main, startup = rf.Program(), rf.Program()
    with rf.program_guard(main, startup):
        x = rf.layers.data(name="x", shape=[3], dtype="float32")
        y = rf.layers.fc(input=x, size=2)
        loss = rf.layers.mean(rf.layers.relu(y))
    return main, startup, loss


def test_the_executor_runs_a_program_on_device_one(cp):
    main, startup, loss = _small_program()
    scope = rf.Scope()
    exe = rf.Executor(rf.CUDAPlace(1))
    exe.run(startup, scope=scope)
    (value,) = exe.run(
        main, feed={"x": np.ones((4, 3), np.float32)}, fetch_list=[loss], scope=scope
    )
    assert np.isfinite(value).all() and cp.current == 0
    launched_on = {entry[1] for entry in cp.log if entry[0] in ("random_state",)}
    assert launched_on == {1}  # the initialisers drew on device 1
    params = [
        scope.find_var(v.name).value for v in startup.global_block().vars.values() if v.persistable
    ]
    assert params and all(isinstance(p, fake_cupy.FakeArray) and p.device.id == 1 for p in params)


def test_the_event_clock_records_and_syncs_on_its_device(cp):
    clock = backend.CudaEventClock(rf.CUDAPlace(1))
    start = clock.mark()  # device 0 is current
    end = clock.mark()
    clock.synchronize()
    assert (start.made_on, start.recorded_on, end.recorded_on) == (1, 1, 1)
    assert ("sync", 1) in cp.log and cp.current == 0


def test_a_fresh_clock_has_its_own_pool(cp):
    clock = backend.CudaEventClock(rf.CUDAPlace(0))
    window_event = clock.mark()
    other = clock.fresh()
    other.mark()
    other.recycle()  # the benchmark's reads must not free the window's unread event
    assert other.mark() is not window_event and clock._used == [window_event]


def test_the_raw_kernels_launch_where_their_arrays_are(cp, monkeypatch):
    launches = []

    class Module:
        def get_function(self, expression):
            return lambda grid, block, args: launches.append((expression, cp.current))

    monkeypatch.setattr(cuda_kernels, "_module", lambda name: Module())
    with cp.cuda.Device(1):
        x = cp.asarray(np.ones((1, 1, 4, 4), np.float32))
        cuda_kernels.im2col(x, (3, 3), (1, 1), (1, 1), (1, 1), (4, 4))
    assert launches == [("im2col<float, int>", 1)]
    # device 0 current: the output is allocated there, and the kernel refuses the mix of devices
    with pytest.raises(
        rf.OpError,
        match=r"im2col: the CUDA kernel takes arrays of one device, given devices \[0, 1\]",
    ):
        cuda_kernels.im2col(x, (3, 3), (1, 1), (1, 1), (1, 1), (4, 4))
    # arrays all of device 1, device 0 current: launched on device 1
    with cp.cuda.Device(1):
        col = cp.asarray(np.ones((9, 16), np.float32))
        out = cp.asarray(np.ones((1, 1, 4, 4), np.float32))
    cuda_kernels._launch(
        "conv", "col2im", np.float32, 16, (1, 1, 4, 4, 4, 4), (3, 3, 1, 1, 1, 1, 1, 1), (col, out)
    )
    assert launches[-1] == ("col2im<float, int>", 1) and cp.current == 0


# --- cached generators ------------------------------------------------------------------


def test_random_ops_reuse_one_generator_per_device_and_seeds_repeat(cp):
    place = rf.CUDAPlace(1)
    draws = [
        rf.run_op("gaussian_random", {}, {"shape": [3, 4], "seed": 7}, place=place)["Out"]
        for _ in range(3)
    ]
    uniform = rf.run_op(
        "uniform_random", {}, {"shape": [5], "seed": 7, "min": -2.0, "max": 2.0}, place=place
    )["Out"]
    assert [e for e in cp.log if e[0] == "random_state"] == [
        ("random_state", 1)
    ]  # one generator, on device 1
    assert all(d.device.id == 1 and d.dtype == np.float32 for d in draws)
    np.testing.assert_array_equal(
        draws[0].get(), draws[2].get()
    )  # a seed gives the same values every call
    assert uniform.dtype == np.float32 and (-2 <= uniform.get()).all() and (uniform.get() < 2).all()
    other = rf.run_op("gaussian_random", {}, {"shape": [3, 4], "seed": 8}, place=place)["Out"]
    assert not np.array_equal(other.get(), draws[0].get())


def test_the_l2_flusher_writes_twice_the_cache_on_its_device(cp):
    flush = backend.l2_flusher(rf.CUDAPlace(1))
    flush()
    assert flush.nbytes == 64 * 2**20  # the fake's L2 is 1 MiB: the 64 MiB floor
    assert cp.log[-1] == ("memset", 1, 64 * 2**20)


def test_the_suites_describe_a_gpu_fully(cp):
    from suites.conftest import pytest_opperf_select_device

    device = pytest_opperf_select_device(config=None, requested="gpu")
    assert (
        device.is_gpu and device.name == "cuda:0 (Fake GPU)" and device.device_class == "fake-gpu"
    )
    assert device.pci_bus_id == "0000:01:00.0"
    other = device.new_clock()
    assert isinstance(other, backend.CudaEventClock) and other is not device.clock
    assert not any(
        e[0] == "memset" for e in cp.log
    )  # the flush buffer is made at the first flush only
    device.flush_cache()
    device.flush_cache()
    assert [e for e in cp.log if e[0] == "memset"] == [("memset", 0, 64 * 2**20)] * 2
