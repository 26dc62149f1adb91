"""Access to NVIDIA GPUs through NVML. ``gateway`` is the only module that imports pynvml;
``values`` holds what it hands out, ``executor`` the per-GPU worker threads that bound calls."""

from gpuwait.nvml.values import NA, BackendStatus, available, or_none

__all__ = ["NA", "BackendStatus", "available", "or_none"]
