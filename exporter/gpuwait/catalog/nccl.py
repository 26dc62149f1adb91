"""The nccl collector declares its metrics next to its code."""

from gpuwait.collectors.nccl.metrics import METRICS

__all__ = ["METRICS"]
