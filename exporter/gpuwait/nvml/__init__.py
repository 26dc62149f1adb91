"""Access to NVIDIA GPUs through NVML. ``gateway`` is the only module that imports pynvml and
owns the library's lifecycle; ``session`` is what a job sees of one GPU; ``errors`` sorts
NVML's error codes; ``executor`` holds the per-GPU worker threads that bound calls;
``values`` holds what the queries hand out."""

from gpuwait.nvml.values import NA, BackendStatus

__all__ = ["NA", "BackendStatus"]
