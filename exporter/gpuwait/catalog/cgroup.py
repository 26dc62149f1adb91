from gpuwait.collectors.cgroup.metrics import METRICS

__all__ = ["METRICS"]
