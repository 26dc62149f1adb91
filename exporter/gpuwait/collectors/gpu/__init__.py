"""The gpu collector: NVIDIA GPUs through NVML (``gpuwait.nvml``), sampled on two tiers."""

from gpuwait.collectors.gpu import metrics, source, window
from gpuwait.collectors.gpu.payload import GpuDeviceData, GpuFastData
from gpuwait.core.plugin import CollectorSpec, SourceSpec
from gpuwait.owners import kubelet

OPTIONS = (source.CALL_TIMEOUT, source.RETRY_MAX_INTERVAL, window.IDLE_THRESHOLD, source.GPM, source.PROCESSES,
           *kubelet.OPTIONS)

COLLECTOR = CollectorSpec(
    name="gpu",
    help="NVIDIA GPUs through NVML: sub-second utilization, GPM activity, memory, PCIe, NVLink, clocks, power, XIDs, processes and topology.",
    sources=(
        SourceSpec("gpu", source.make_fast, summarize=window.summarize, rows=source.fast_rows, payload=GpuFastData),
        SourceSpec("gpu_device", source.make_slow, columns=window.device_columns, payload=GpuDeviceData),
    ),
    expose=metrics.expose,
    metrics=metrics.METRICS,
    options=OPTIONS,
)
