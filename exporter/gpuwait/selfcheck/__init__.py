"""``gpuwait selfcheck``: the real exporter against a real GPU, under workloads whose cause of
waiting is known by construction, one phase after another; the verdict of each phase is read
from the exporter's own /metrics and compared with that cause (docs/selfcheck.md).

The package talks to the exporter only through its process interface (``python -m gpuwait``
with flags, /metrics, ``gpuwait diagnose --trace --json``), and to the workloads through the
phase-driver protocol of ``gpuwait.selfcheck.workload``; PyTorch is imported only inside that
driver's process, never here.
"""
