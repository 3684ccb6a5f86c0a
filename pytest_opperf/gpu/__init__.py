"""GPU: the NVML environment, one xdist worker per GPU, NVTX ranges."""
