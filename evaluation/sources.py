"""What the scenarios' truths rest on: each key names a documented behaviour and where it is
documented. A truth cites keys; truth.json carries the full citation text."""

from __future__ import annotations

CITATIONS: dict[str, str] = {
    "nvml-util": "NVML API Reference, nvmlUtilization_t / nvmlDeviceGetSamples: gpu = percent of time over the past "
                 "sample period during which one or more kernels was executing; each sample period is between 1 s "
                 "and 1/6 s depending on the product. https://docs.nvidia.com/deploy/nvml-api/structnvmlUtilization__t.html",
    "nvml-memutil": "NVML API Reference, nvmlUtilization_t: memory = percent of time over the past sample period "
                    "during which global (device) memory was being read or written. "
                    "https://docs.nvidia.com/deploy/nvml-api/structnvmlUtilization__t.html",
    "nvml-power": "NVML API Reference, nvmlDeviceGetPowerUsage: the power usage for the GPU and its associated "
                  "circuitry in milliwatts; CMOS dynamic power grows with switching activity and clock, so a kernel "
                  "spinning on a few SMs draws far less than dense compute. "
                  "https://docs.nvidia.com/deploy/nvml-api/group__nvmlDeviceQueries.html",
    "nvml-gpm": "NVML API Reference, GPM Enums and Functions: NVML_GPM_METRIC_SM_UTIL = percentage of SMs that were "
                "busy, DRAM_BW_UTIL = percentage of peak DRAM bandwidth, computed from two samples; Hopper or newer. "
                "https://docs.nvidia.com/deploy/nvml-api/group__nvmlGpmEnums.html",
    "dcgm-gpm-period": "NVIDIA/DCGM#310: profiling (GPM) metrics are valid only over periods of 100 ms or more on Hopper.",
    "nvml-clocks": "NVML API Reference, nvmlClocksEventReasons: SwPowerCap = the clocks have been optimized to ensure "
                   "not to exceed currently set power limits; SwThermalSlowdown; HwSlowdown and HwPowerBrakeSlowdown = "
                   "reducing the core clocks by a factor of 2 or more, e.g. External Power Brake Assertion triggered by "
                   "the system power supply; GpuIdle = nothing is running and the clocks are dropping to idle. "
                   "https://docs.nvidia.com/deploy/nvml-api/group__nvmlClocksEventReasons.html",
    "nvml-pcie": "NVML API Reference: nvmlDeviceGetCurrPcieLinkGeneration/Width against nvmlDeviceGetMaxPcieLink"
                 "Generation/Width (a link that trained below its maximum), NVML_FI_DEV_PCIE_COUNT_TX/RX_BYTES and "
                 "nvmlDeviceGetPcieReplayCounter. PCIe lane rate after encoding: Gen3 8 GT/s 128b/130b = 0.985 GB/s, "
                 "Gen4 1.97 GB/s, Gen5 3.94 GB/s per lane (PCI-SIG).",
    "cuda-sched": "CUDA Runtime API, cudaSetDeviceFlags: cudaDeviceScheduleAuto (the default) uses a heuristic on the "
                  "number of active CUDA contexts C and logical processors P: if C > P it yields, otherwise it actively "
                  "spins on the processor while waiting for results; cudaDeviceScheduleSpin/Yield/BlockingSync force a "
                  "policy. https://developer.download.nvidia.com/compute/DevZone/docs/html/C/doc/html/"
                  "group__CUDART__DEVICE_g18074e885b4d89f5a0fe1beab589e0c8.html",
    "cuda-memcpy": "CUDA Runtime API, API synchronization behavior: a copy from pageable host memory is staged through "
                   "a pinned buffer; from pinned memory cudaMemcpy is synchronous with respect to the host. "
                   "https://docs.nvidia.com/cuda/cuda-runtime-api/api-sync-behavior.html",
    "pytorch-dataloader": "PyTorch torch.utils.data.DataLoader: num_workers subprocesses load data (0 = in the main "
                          "process); prefetch_factor = batches loaded in advance by each worker (default 2); "
                          "pin_memory copies into pinned memory. https://pytorch.org/docs/stable/data.html",
    "nccl-spin": "cupy/cupy#3557 (NCCL: 100% busy blocking): ranks waiting in allGather for a rank that never joins "
                 "show 100 % utilization in nvidia-smi; NVIDIA/nccl#1025: the ncclSend kernel runs the whole time it "
                 "waits for the matching receive. https://github.com/cupy/cupy/issues/3557",
    "nccl-sm": "NVIDIA/nccl#689: NCCL uses the minimal number of SMs for the platform (16 SMs on a DGX with 8 NICs) and "
               "its CTAs do not share an SM with compute kernels; NVIDIA/nccl#1656: one channel per SM. "
               "https://github.com/NVIDIA/nccl/issues/689",
    "nccl-proxy": "NVIDIA/nccl#374: NCCL creates one network thread per communicator per rank; it is expected that "
                  "they busy wait, 100 % CPU per NCCL thread during communication. https://github.com/NVIDIA/nccl/issues/374",
    "nccl-inspector": "NVIDIA/nccl ext-profiler/inspector/README.md: NCCL Inspector writes one JSON record per "
                      "collective with coll_sn, coll_msg_size_bytes, coll_exec_time_us (kernel_gpu timing), "
                      "coll_busbw_gbs, per communicator and rank.",
    "nccl-hang": "facebookresearch/ClassyVision#546: training runs hanging with 100 % GPU utilization, no NCCL "
                 "timeout by default; pytorch/pytorch#118369: ProcessGroupNCCL watchdog catching a collective that ran "
                 "past its timeout. https://github.com/facebookresearch/ClassyVision/pull/546",
    "mpi-busypoll": "openucx/ucx#8914: ucp_worker_progress busy-loops checking for completions and can take almost "
                    "all CPU time; pmodels/mpich#1103: ranks waiting in MPI busy-wait at 100 % CPU. "
                    "https://github.com/openucx/ucx/issues/8914",
    "sched-bwc": "Linux Documentation/scheduler/sched-bwc.rst: within each period a group may consume up to quota of "
                 "CPU time; once it is spent its threads are throttled and cannot run until the next period; cpu.stat "
                 "exports nr_periods, nr_throttled and throttled_time. https://docs.kernel.org/scheduler/sched-bwc.html",
    "k8s-cpu-limit": "Kubernetes: a container's CPU limit is enforced with the CFS quota (kubelet cpuCfsQuota, on by "
                     "default), so a pod limited to N CPUs gets N x 100 ms of CPU time per 100 ms period whatever the "
                     "number of its threads; kubernetes/kubernetes#67577. "
                     "https://kubernetes.io/docs/concepts/configuration/manage-resources-containers/",
    "cgroup-v2": "Linux Documentation/admin-guide/cgroup-v2.rst: cpu.stat usage_usec, user_usec, system_usec, "
                 "nr_periods, nr_throttled, throttled_usec; cpu.max \"$MAX $PERIOD\"; io.stat rbytes wbytes rios wios "
                 "per device; cpu/io/memory.pressure per cgroup. https://docs.kernel.org/admin-guide/cgroup-v2.html",
    "psi": "Linux Documentation/accounting/psi.rst: some = share of time in which at least some tasks are stalled on "
           "the resource, full = all non-idle tasks stalled; system wide in /proc/pressure and per cgroup in "
           "<resource>.pressure. https://docs.kernel.org/accounting/psi.html",
    "psi-cpumax": "Linux commit b05e75d61138 (psi: Fix cpu.pressure for cpu.max and competing cgroups, 5.7): CPU "
                  "pressure in a cgroup is NR_RUNNING > ON_CPU, so time a task is throttled by cpu.max is pressure; "
                  "\"a cgroup running stress -c 1 with a cpu.max setting of 5000 10000 shows ~50% continuous CPU pressure\".",
    "sunrpc-wait": "Linux net/sunrpc/sched.c: rpc_wait_bit_killable() waits with schedule(), not io_schedule(): a task "
                   "waiting for an NFS RPC reply is in D state (killable) without IO wait or IO pressure, while a read "
                   "waiting for page-cache pages sleeps in io_schedule().",
    "iostats": "Linux Documentation/admin-guide/iostats.rst: reads/writes completed, time spent reading/writing, I/Os "
               "currently in progress, time spent doing I/Os, weighted time (the integral of the number in flight); "
               "Little's law relates them. https://docs.kernel.org/admin-guide/iostats.html",
    "page-cache": "Linux page cache (Documentation/filesystems/vfs.rst, struct address_space): buffered reads of pages "
                  "already cached complete without block IO; evicted pages must be read from the device again.",
    "dirty-throttle": "Linux mm/page-writeback.c balance_dirty_pages(): a task writing faster than the device drains "
                      "dirty pages is paused with io_schedule_timeout(), which counts as IO wait.",
    "mountstats": "/proc/self/mountstats per-operation statistics: operations, transmissions, timeouts, bytes sent and "
                  "received, cumulative queue, RTT and execute milliseconds. "
                  "https://utcc.utoronto.ca/~cks/space/blog/linux/NFSMountstatsNFSOps",
    "ib-xmit-wait": "NVIDIA ibdiagnet manual, Congestion Assessment on InfiniBand Links: PortXmitWait counts ticks in "
                    "which the port had data to transmit but sent none (no credits). "
                    "https://docs.nvidia.com/networking/display/ibdiagnetusermanualv213/congestion+assessment+on+infiniband+links",
    "roce-ecn": "Linux commit \"IB/mlx5: Support congestion related counters\": np_ecn_marked_roce_packets (CE-marked "
                "RoCE packets received), np_cnp_sent, rp_cnp_handled (CNPs handled by the reaction point, which slows "
                "down); NVIDIA MLNX_OFED documentation, Explicit Congestion Notification.",
    "mlx5-counters": "Linux Documentation/networking/device_drivers/ethernet/mellanox/mlx5/counters.rst: RDMA traffic "
                     "of the port is counted in the vport RDMA counters, not in the netdev's software counters.",
    "little": "Little's law: the mean number in a system equals its throughput times the mean time spent in it.",
}


def cite(*keys: str) -> list[str]:
    for k in keys:
        if k not in CITATIONS:
            raise KeyError(f"unknown citation {k!r}")
    return list(keys)
