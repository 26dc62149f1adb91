"""Steady-state scenarios: one mechanism (or none) holds for the whole trace; the verdict at
its end is scored. Every cause has a scenario, and every failure class a look-alike that
shows some of the same evidence with nothing to fix."""

from __future__ import annotations

from evaluation.model.gpu import A100_SXM, H100_SXM, L40S
from evaluation.model.jobs import (Checkpoint, DiskReader, Fabric, Feed, InferenceServer, NfsReader, Profile,
                                   TrainingJob, backup_agent, compile_job, idle_holder, log_shipper, nfs_tenant)
from evaluation.scenarios import Built, Check, Scenario, register
from evaluation.scenarios.hosts import disk, host, nic
from evaluation.truth import GpuTruth

ALL8 = tuple(range(8))
ALL4 = tuple(range(4))
NFS_SERVICE = {"READ": 0.0008, "GETATTR": 0.0009, "LOOKUP": 0.0012, "ACCESS": 0.0008, "OPEN": 0.0015,
               "CLOSE": 0.0006, "WRITE": 0.001, "COMMIT": 0.002}


def same(indices, truth: GpuTruth) -> dict[int, GpuTruth]:
    return {i: truth for i in indices}


NO_PROCESS = GpuTruth(
    "none", "No process holds this GPU: nothing asks it for work, so whatever the host is doing cannot be a reason "
    "for it to wait (A1). NVML lists no compute process on it and its samples read 0 %.",
    ["nvml-util"])


def tenant_group(node, name: str):
    """A cgroup of another tenant of the host (no GPU)."""
    return node.cgroup(f"/system.slice/{name}")


# == CPU quota =================================================================================

def _quota_sweep(seed: int) -> Built:
    node = host(seed, "a100-node-03", 96, A100_SXM, 8, frontend_gbps=100.0)
    pod = node.pod(quota_cores=10.0, name="hparam-sweep-7f9c")
    for g in node.gpus:
        TrainingJob(node, pod, [g], name=f"trial{g.index}", compute=0.26, samples_per_step=256,
                    feed=Feed(mode="loader", workers=5, prefetch=2, decode=0.55, decode_cv=0.2), h2d_bytes=150e6)
    t = GpuTruth(
        "data_pipeline",
        "The pod's CPU limit of 10 is enforced as a CFS quota of 1 CPU-second per 100 ms period. Its 8 trials run 40 "
        "decode workers that want about 17 CPUs, so the pod is throttled in every period and each worker gets about a "
        "fifth of a core: batches arrive at about 60 % of the rate the GPUs consume them. No core is saturated and the "
        "host is mostly idle, yet each GPU waits for its loader; throttling shows in the owner cgroup's cpu.stat and "
        "cpu.pressure (where the trace has the owner cgroups) and as runnable threads that do not run (host CPU "
        "pressure).",
        ["sched-bwc", "k8s-cpu-limit", "psi-cpumax", "pytorch-dataloader", "cgroup-v2"])
    return Built(node, same(ALL8, t))


register(Scenario(
    "quota_pod_sweep_a100", "Pod limited to 10 CPUs, 8 single-GPU trials decoding on 40 workers (8x A100, 96 cores)",
    _quota_sweep, claims=("A2", "A3"), family="CPU quota",
    story="8 independent trials in one Kubernetes pod with a 10-CPU limit; 40 DataLoader workers want ~17 CPUs.",
    checks=(Check(ALL8, "time_budget.data", 0.3, 0.8), Check(ALL8, "kernel_residency", 0.2, 0.7))))


def _quota_busy(seed: int) -> Built:
    node = host(seed, "h100-node-11", 112, H100_SXM, 8, frontend_gbps=200.0)
    pod = node.pod(quota_cores=13.0, name="llm-finetune-2b1d")
    TrainingJob(node, pod, node.gpus, name="finetune", compute=0.42, samples_per_step=64,
                feed=Feed(mode="loader", workers=3, prefetch=4, decode=0.33, decode_cv=0.35),
                grad_bytes=1.2e9, h2d_bytes=60e6)
    t = GpuTruth(
        "none",
        "The pod's 13-CPU quota is exhausted in part of its periods: 8 rank threads spin in CUDA synchronize "
        "(cudaDeviceScheduleAuto spins with fewer contexts than CPUs) and 24 workers decode in bursts right after each "
        "step, so the group is throttled (nr_throttled rises, cpu.pressure is non-zero). But the average demand fits "
        "the quota and each rank keeps 12 batches outstanding, so a batch is always ready: the GPUs compute about 95 % "
        "of the time. Throttling that costs the GPUs nothing needs no fix (A1).",
        ["sched-bwc", "cuda-sched", "pytorch-dataloader", "psi-cpumax"])
    return Built(node, same(ALL8, t))


register(Scenario(
    "quota_pod_busy_h100", "Throttled pod whose GPUs stay busy: bursts over a 13-CPU quota, deep prefetch (8x H100)",
    _quota_busy, claims=("A1", "A3"), family="CPU quota",
    story="Look-alike of the CPU quota: the pod is throttled in part of its periods but its loaders keep up.",
    checks=(Check(ALL8, "kernel_residency", 0.85, 1.0), Check(ALL8, "time_budget.data", 0.0, 0.05))))


def _quota_ddp(seed: int) -> Built:
    node = host(seed, "h100-node-12", 112, H100_SXM, 8, frontend_gbps=200.0)
    pod = node.pod(quota_cores=12.0, name="vit-ddp-91e0")
    TrainingJob(node, pod, node.gpus, name="vit", compute=0.3, samples_per_step=512,
                feed=Feed(mode="loader", workers=6, prefetch=2, decode=0.8, decode_cv=0.25),
                grad_bytes=350e6, h2d_bytes=300e6)
    t = GpuTruth(
        "data_pipeline|sync",
        "A 12-CPU quota for 48 decode workers that want ~21 CPUs: every rank's DataLoader falls behind. In DDP each "
        "step ends in an all-reduce, so at any moment one rank waits for its batch (GPU idle) while the others have "
        "entered the collective and wait for it inside the NCCL kernel (resident, ~15 % of SMs, 100 % utilization). "
        "Every GPU loses its time to the starved CPU side, directly or through the barrier, and which rank starves "
        "drifts: data_pipeline is the cause; sync is what a GPU waiting on a starved peer sees, and is accepted.",
        ["sched-bwc", "k8s-cpu-limit", "pytorch-dataloader", "nccl-spin", "nccl-sm", "nvml-gpm"])
    return Built(node, same(ALL8, t))


register(Scenario(
    "quota_pod_ddp_h100", "DDP in a pod limited to 12 CPUs: per-rank loaders starve, peers wait in NCCL (8x H100)",
    _quota_ddp, claims=("A2", "A3", "A12"), family="CPU quota",
    story="The quota starves every rank's loader; the barrier turns one rank's data wait into the others' NCCL wait.",
    checks=(Check(ALL8, "time_budget.compute", 0.3, 0.75),)))


# == host-wide evidence from another tenant =====================================================

def _backup_no_process(seed: int) -> Built:
    node = host(seed, "l40s-node-02", 64, L40S, 4, frontend_gbps=25.0, data_disks=2)
    backup_agent(node, tenant_group(node, "backup-agent.service"), disk(node, "nvme2n1"), threads=4, depth=6)
    compile_job(node, node.cgroup("/user.slice/user-1012.slice/session-4.scope"), jobs=40)
    return Built(node, same(ALL4, NO_PROCESS))


register(Scenario(
    "tenant_backup_no_process", "No GPU process; a backup agent saturates a disk and a build saturates 40 cores (4x L40S)",
    _backup_no_process, claims=("A1",), family="other tenants",
    story="Host-wide IO and CPU pressure from tenants that own no GPU; the GPUs have no process.",
    checks=(Check(ALL4, "kernel_residency", 0.0, 0.0),)))


def _nfs_idle_owner(seed: int) -> Built:
    node = host(seed, "h100-node-21", 112, H100_SXM, 8, frontend_gbps=100.0)
    job = node.slurm_job(480211)
    idle_holder(node, job, node.gpus, memory_share=0.2)
    etl = node.container()
    mount = node.add_mount("/mnt/shared", "filer02:/export/shared", nic(node, "eth0"), NFS_SERVICE)
    nfs_tenant(node, etl.cgroup, mount, workers=24, file_bytes=512 * 2**20, depth=8, cpu_per_file=0.05)
    compile_job(node, node.cgroup("/user.slice/user-1020.slice/session-9.scope"), jobs=24)
    t = GpuTruth(
        "none",
        "An interactive Slurm allocation holds all 8 GPUs with a Python process that does nothing (memory allocated, "
        "no kernels, its threads asleep). Another tenant's ETL container streams files from NFS at the NIC's line "
        "rate, its readers blocked in IO (host IO pressure), and a build keeps 24 cores busy. None of it is the GPU "
        "owner's: its cgroup shows no IO and no CPU. Nothing asks these GPUs for work (A1).",
        ["psi", "cgroup-v2", "nvml-util", "mountstats"])
    return Built(node, same(ALL8, t))


register(Scenario(
    "tenant_nfs_idle_owner", "Idle Slurm allocation next to another tenant's NFS streaming and a build (8x H100)",
    _nfs_idle_owner, claims=("A1",), family="other tenants",
    story="Host-wide storage and CPU evidence next to an owner that holds its GPUs and does nothing.",
    checks=(Check(ALL8, "kernel_residency", 0.0, 0.0),)))


def _backup_starved_owner(seed: int) -> Built:
    node = host(seed, "l40s-node-05", 64, L40S, 4, frontend_gbps=25.0, data_disks=1)
    data = disk(node, "nvme1n1")
    backup_agent(node, tenant_group(node, "backup-agent.service"), data, threads=8, depth=8)
    job = node.container()
    for g in node.gpus:
        TrainingJob(node, job, [g], name=f"seg{g.index}", compute=0.18, samples_per_step=32,
                    feed=Feed(mode="loader", workers=6, prefetch=2, decode=0.05,
                              reader=DiskReader(data, requests=192, size=256 * 1024, depth=1)),
                    h2d_bytes=200e6)
    t = GpuTruth(
        "storage",
        "The backup agent keeps up to 1 GiB of large sequential reads in flight on nvme1n1, the same NVMe the "
        "training container reads its 256 KiB samples from, one at a time per worker. The drive shares its time among "
        "the requests in flight, so the trainer's 24 outstanding reads get a few percent of it and each waits behind "
        "hundreds of the backup's: its loaders spend most of their time blocked in IO "
        "(D state, IO pressure in the owner's own io.pressure and reads in its io.stat) while decode takes a few "
        "percent of a core, and the GPUs wait for data most of the time. The storage contention is real for this "
        "owner.",
        ["iostats", "little", "psi", "cgroup-v2", "pytorch-dataloader"])
    return Built(node, same(ALL4, t))


register(Scenario(
    "tenant_backup_starved_owner", "Backup agent's reads starve a trainer on the same NVMe (4x L40S, container)",
    _backup_starved_owner, claims=("A6", "A7"), family="other tenants",
    story="The same host-wide IO evidence as the backup look-alike, next to an owner that really is starved by it.",
    checks=(Check(ALL4, "time_budget.data", 0.4, 0.95),)))


def _tenants_healthy(seed: int) -> Built:
    node = host(seed, "h100-node-30", 112, H100_SXM, 8, frontend_gbps=200.0)
    log_shipper(node, tenant_group(node, "fluent-bit.service"), disk(node, "nvme0n1"), burst_bytes=900 * 2**20, period=2.0)
    compile_job(node, node.cgroup("/user.slice/user-1033.slice/session-2.scope"), jobs=48)
    pod = node.pod(name="diffusion-train-55aa")
    TrainingJob(node, pod, node.gpus, name="diffusion", compute=0.55, samples_per_step=128,
                feed=Feed(mode="loader", workers=6, prefetch=2, decode=0.6, decode_cv=0.2),
                grad_bytes=1.8e9, h2d_bytes=120e6)
    t = GpuTruth(
        "none",
        "A build saturates 48 cores and a log shipper flushes bursts of buffered writes to the boot NVMe, sleeping "
        "in dirty-page throttling (host IO pressure, a deep write queue). The training pod reads from the page cache, "
        "its 48 workers get the cores they need among the remaining 64, and its GPUs compute about 95 % of the time, "
        "the NCCL all-reduce over NVLink taking a few percent. The host's pressure belongs to other tenants.",
        ["psi", "dirty-throttle", "iostats", "pytorch-dataloader"])
    return Built(node, same(ALL8, t))


register(Scenario(
    "tenant_logs_compile_healthy", "Busy pod next to a saturating build and a log shipper's write bursts (8x H100)",
    _tenants_healthy, claims=("A1", "A3", "A6"), family="other tenants",
    story="Look-alike for data_pipeline and storage: saturated cores and IO pressure that are another tenant's.",
    checks=(Check(ALL8, "kernel_residency", 0.85, 1.0),)))


# == spin-waiting host threads ==================================================================

def _h2d_pageable(seed: int) -> Built:
    node = host(seed, "h100-node-40", 112, H100_SXM, 8, frontend_gbps=100.0)
    session = node.systemd_unit("session-12.scope", slice_path="/user.slice/user-1201.slice")
    for g in node.gpus[:4]:
        TrainingJob(node, session, [g], name=f"volume{g.index}", compute=0.32, samples_per_step=4,
                    feed=Feed(mode="loader", workers=4, prefetch=2, decode=0.25),
                    h2d_bytes=6.4e9, h2d_pinned=False)
    t = GpuTruth(
        "host_transfer",
        "Each step copies 6.4 GB of preprocessed volumes from pageable memory with a synchronous cudaMemcpy. The "
        "driver stages pageable copies through a pinned buffer, so the copy runs at well under the Gen5 link's rate "
        "and takes ~40 % of the step; the GPU runs no kernel meanwhile (utilization counts kernels, not copies) and "
        "the host thread spins at 100 % of its core staging the copy. The loaders keep up, no storage is read: the "
        "GPU waits for host-to-device transfers (PCIe rx bytes high while it idles).",
        ["cuda-memcpy", "cuda-sched", "nvml-util", "nvml-pcie"])
    return Built(node, {**same(range(4), t), **same(range(4, 8), NO_PROCESS)})


register(Scenario(
    "h2d_pageable_spin", "Synchronous pageable H2D copies with the host thread spinning, 4 of 8 H100 used (bare processes)",
    _h2d_pageable, claims=("A9",), family="spin-waiting host threads",
    story="A user's 4 processes in one login session; GPUs 4-7 have no process.",
    checks=(Check(ALL4, "time_budget.copy", 0.3, 0.6),)))


def _downtrained(seed: int) -> Built:
    node = host(seed, "a100-node-08", 128, A100_SXM, 8, frontend_gbps=100.0)
    node.gpus[5].link_generation, node.gpus[5].link_width = 3, 4
    node.gpus[5].replay_rate = 3.0
    job = node.slurm_job(771300)
    for g in node.gpus:
        TrainingJob(node, job, [g], name=f"sweep{g.index}", compute=0.4, samples_per_step=8,
                    feed=Feed(mode="loader", workers=4, prefetch=2, decode=0.3), h2d_bytes=1.1e9, h2d_pinned=True)
    slow = GpuTruth(
        "host_transfer",
        "This GPU's PCIe link trained at Gen3 x4 (the slot allows Gen4 x16; the replay counter rises), about 3.1 GB/s "
        "for a DMA copy: the 1.1 GB pinned copy of each step takes ~0.35 s against 0.4 s of compute, so the GPU idles "
        "almost half the time waiting for the host-to-device transfer. Its peers in the same job copy the same bytes "
        "in ~45 ms.",
        ["nvml-pcie", "cuda-memcpy", "nvml-util"])
    ok = GpuTruth(
        "none",
        "A healthy Gen4 x16 link: the step's 1.1 GB pinned copy takes ~45 ms of a ~0.47 s step and the GPU computes "
        "the rest; its loader keeps up.",
        ["nvml-pcie", "nvml-util"])
    return Built(node, {i: (slow if i == 5 else ok) for i in ALL8})


register(Scenario(
    "pcie_downtrained_gpu5", "One GPU's link trained at Gen3 x4 in a Slurm sweep of single-GPU trials (8x A100)",
    _downtrained, claims=("A9",), family="host transfer",
    checks=(Check((5,), "time_budget.copy", 0.3, 0.6), Check((0, 1, 2, 3, 4, 6, 7), "kernel_residency", 0.8, 1.0))))


def _sync_volumes(seed: int) -> Built:
    node = host(seed, "a100-node-31", 128, A100_SXM, 8, frontend_gbps=100.0)
    job = node.slurm_job(775802)
    for g in node.gpus:
        TrainingJob(node, job, [g], name=f"vnet{g.index}", compute=0.15, samples_per_step=2,
                    feed=Feed(mode="loader", workers=4, prefetch=2, decode=0.25), h2d_bytes=1.25e9, h2d_pinned=True)
    t = GpuTruth(
        "host_transfer",
        "Single-GPU trials of a 3D segmentation model, each step's two 625 MB float32 volumes copied to the GPU "
        "from pinned memory with a blocking copy before the forward pass: ~50 ms at the Gen4 x16 link's ~25 GB/s "
        "against 0.15 s of compute, so the GPU runs no kernel for ~25 % of every step while the copy runs. The four "
        "loader workers per GPU decode the next volumes meanwhile (each busy ~60 % of the time, its core saturated "
        "while it decodes) and keep their prefetch queue full: the batch is always ready, the wait is its transfer "
        "(overlap it: non_blocking copies on a side stream).",
        ["cuda-memcpy", "nvml-pcie", "nvml-util"])
    return Built(node, same(ALL8, t))


register(Scenario(
    "sync_h2d_busy_loaders", "Blocking 1.25 GB input copies on healthy Gen4 links while saturated loaders keep up (8x A100, Slurm)",
    _sync_volumes, claims=("A9",), family="host transfer",
    checks=(Check(ALL8, "time_budget.copy", 0.15, 0.35), Check(ALL8, "time_budget.data", 0.0, 0.02))))


def _mpi_host_staged(seed: int) -> Built:
    node = host(seed, "a100-node-15", 96, A100_SXM, 8, frontend_gbps=25.0, ports=("Ethernet", 200.0, 4))
    job = node.slurm_job(903112)
    TrainingJob(node, job, node.gpus, name="horovod-bert", compute=0.2, samples_per_step=64,
                feed=Feed(mode="loader", workers=3, prefetch=2, decode=0.12),
                grad_bytes=420e6, nodes=4, host_staged=True,
                fabric=Fabric(node.ports, goodput=0.62, goodput_cv=0.2, congestion=0.05))
    t = GpuTruth(
        "network",
        "Horovod over MPI without GPUDirect: each step copies 420 MB of gradients to host memory, all-reduces them "
        "across 4 nodes over RoCE (two GPUs per 200 GbE port, ~60 % of line rate) and copies them back. The GPU runs "
        "no kernel for ~45 % of each step, most of it in the exchange, whose bytes burst on the RoCE ports exactly "
        "while the GPUs idle. Each rank's MPI progress engine and its waiting main thread busy-poll at 100 % of a "
        "core: saturated cores that are the network wait's symptom, not a CPU bottleneck.",
        ["mpi-busypoll", "roce-ecn", "nvml-util", "cuda-memcpy"])
    return Built(node, same(ALL8, t))


register(Scenario(
    "mpi_host_staged_roce", "Host-staged MPI all-reduce over RoCE with busy-polling progress threads (8x A100, Slurm)",
    _mpi_host_staged, claims=("A9", "A10", "A11"), family="spin-waiting host threads",
    checks=(Check(ALL8, "time_budget.comm", 0.2, 0.6),)))


def _single_thread_decode(seed: int) -> Built:
    node = host(seed, "l40s-node-09", 64, L40S, 4, frontend_gbps=25.0)
    for g in node.gpus:
        c = node.container()
        TrainingJob(node, c, [g], name=f"ocr{g.index}", compute=0.22, samples_per_step=48,
                    feed=Feed(mode="inline", decode=0.34, decode_cv=0.15), h2d_bytes=80e6)
    t = GpuTruth(
        "data_pipeline",
        "The container's loader runs with num_workers=0: the training process's main thread decodes every batch "
        "itself, at 100 % of one core for ~0.34 s, then launches 0.22 s of GPU work. The GPU idles ~60 % of the time "
        "waiting for that one thread. The busy core is real decoding, not a spin (the thread spins only while the "
        "kernels run); the other 60 cores are idle.",
        ["pytorch-dataloader", "cuda-sched", "nvml-util"])
    return Built(node, same(ALL4, t))


register(Scenario(
    "single_thread_decode", "num_workers=0: the main thread decodes at 100 % of one core (4 containers, 4x L40S)",
    _single_thread_decode, claims=("A2", "A3"), family="spin-waiting host threads",
    story="Look-alike of a spinning host thread: one core at 100 % that really is the bottleneck.",
    checks=(Check(ALL4, "time_budget.data", 0.45, 0.8),)))


# == collectives hidden in busy utilization ===================================================

def _nccl_ib(seed: int) -> Built:
    node = host(seed, "h100-node-51", 112, H100_SXM, 8, frontend_gbps=100.0, ports=("InfiniBand", 400.0, 8))
    pod = node.pod(name="llama-pretrain-8c2e")
    TrainingJob(node, pod, node.gpus, name="pretrain", compute=0.6, samples_per_step=32,
                feed=Feed(mode="loader", workers=4, prefetch=2, decode=0.2), grad_bytes=8e9, nodes=4,
                fabric=Fabric(node.ports, goodput=0.78, goodput_cv=0.06, congestion=0.08), channels=20)
    t = GpuTruth(
        "network",
        "Each step ends in an 8 GB NCCL all-reduce across 4 nodes over 8x NDR InfiniBand at ~78 % of line rate: "
        "~0.4 s of a ~1 s step. NCCL's kernel stays resident while the data moves, so utilization stays near 100 %, "
        "but GPM SM activity falls to NCCL's footprint (20 channels on 132 SMs, ~0.15) during the collective and is "
        "~0.85 while computing; the IB ports burst exactly then and PortXmitWait rises. The proxy threads spin. "
        "The GPUs spend ~40 % of their time on the network.",
        ["nccl-spin", "nccl-sm", "nvml-gpm", "nccl-proxy", "ib-xmit-wait"])
    return Built(node, same(ALL8, t))


register(Scenario(
    "nccl_ib_network_h100", "8 GB all-reduce over 8x NDR InfiniBand, 40 % of each step, utilization ~100 % (GPM)",
    _nccl_ib, claims=("A9", "A10", "A11"), family="collectives",
    checks=(Check(ALL8, "time_budget.comm", 0.3, 0.5), Check(ALL8, "kernel_residency", 0.95, 1.0))))


def _nccl_roce(seed: int) -> Built:
    node = host(seed, "h100-node-61", 112, H100_SXM, 8, frontend_gbps=100.0, ports=("Ethernet", 400.0, 8))
    job = node.slurm_job(552901)
    TrainingJob(node, job, node.gpus, name="moe", compute=0.45, samples_per_step=32,
                feed=Feed(mode="loader", workers=4, prefetch=2, decode=0.15), grad_bytes=3e9, nodes=2,
                fabric=Fabric(node.ports, goodput=0.42, goodput_cv=0.25, congestion=0.35), channels=16)
    t = GpuTruth(
        "network",
        "A 3 GB all-reduce across 2 nodes over 400 GbE RoCE that reaches only ~42 % of line rate: a congested fabric "
        "marks packets (np_ecn_marked_roce_packets) and the NICs answer with CNPs that slow the senders. The collective "
        "takes ~0.28 s of a ~0.75 s step; utilization stays ~100 % because NCCL's kernel is resident, GPM SM activity "
        "drops to ~0.12 meanwhile. RoCE traffic is offloaded, so the netdev counters do not show it; the RDMA port "
        "counters do.",
        ["roce-ecn", "nccl-spin", "nccl-sm", "nvml-gpm", "mlx5-counters"])
    return Built(node, same(ALL8, t))


register(Scenario(
    "nccl_roce_congested_h100", "All-reduce over a congested 400 GbE RoCE fabric: ECN/CNP, ~42 % goodput (8x H100, Slurm)",
    _nccl_roce, claims=("A9", "A10", "A11"), family="collectives",
    checks=(Check(ALL8, "time_budget.comm", 0.25, 0.5),)))


def _straggler_factor(rng):
    u = rng.random()
    if u < 0.5:
        return rng.uniform(1.3, 1.7)
    if u < 0.8:
        return rng.uniform(1.8, 2.6)
    return rng.uniform(1.0, 1.1)


def _straggler(seed: int, spec, name: str, slow: int, owner_kind: str) -> tuple:
    node = host(seed, name, 112 if spec is H100_SXM else 96, spec, 8, frontend_gbps=100.0)
    owner = node.pod(name="moe-expert-3c1f") if owner_kind == "pod" else node.slurm_job(660012)
    TrainingJob(node, owner, node.gpus, name="moe-experts", compute=0.35, samples_per_step=32,
                feed=Feed(mode="loader", workers=4, prefetch=2, decode=0.15), grad_bytes=1.5e9,
                straggler={"rank": slow, "factor": _straggler_factor}, channels=16)
    return node


def _straggler_gpm(seed: int) -> Built:
    node = _straggler(seed, H100_SXM, "h100-node-70", 2, "pod")
    peer = GpuTruth(
        "sync",
        "The rank on GPU 2 hosts the hottest experts: its forward/backward takes 30-160 % longer on most steps. The "
        "other seven finish, enter the all-reduce and wait for it inside NCCL's resident kernel: utilization ~100 %, "
        "GPM SM activity at NCCL's ~0.12 footprint for ~40 % of the window, no network involved (one node, NVLink). "
        "They wait on a peer.",
        ["nccl-spin", "nccl-sm", "nvml-gpm"])
    slow = GpuTruth(
        "none",
        "The straggler itself computes ~95 % of the time (SM activity ~0.85): it is the one being waited for, not "
        "waiting. Its fix (rebalancing the experts) is the peers' sync verdict's business.",
        ["nvml-gpm", "nvml-util"])
    return Built(node, {i: (slow if i == 2 else peer) for i in ALL8})


register(Scenario(
    "straggler_h100_gpm", "One slow rank on GPU 2, seven peers wait in NCCL at 100 % utilization (8x H100, GPM)",
    _straggler_gpm, claims=("A12",), family="collectives",
    checks=(Check((0, 1, 3, 4, 5, 6, 7), "time_budget.peer", 0.25, 0.6), Check((2,), "kernel_residency", 0.9, 1.0))))


def _straggler_nogpm(seed: int) -> Built:
    node = _straggler(seed, A100_SXM, "a100-node-72", 6, "slurm")
    peer = GpuTruth(
        "sync",
        "GPU 6's rank is slow on most steps; the other seven wait for it in NCCL's resident kernel, ~40 % of the "
        "window. A100s have no GPM: to NVML a spinning NCCL kernel is a running kernel, so utilization reads ~100 % "
        "on every GPU (one node, no network traffic). What does separate the wait from computing is what the kernel "
        "does: spinning on a few SMs it barely touches device memory, so the driver's memory-utilization samples "
        "fall to near 0 while it waits, and the board draws little more than idle power. The GPU waits on a peer.",
        ["nccl-spin", "nccl-sm", "nvml-util", "nvml-memutil", "nvml-power"])
    slow = GpuTruth("none", "The straggler computes ~95 % of the time: it is waited for, not waiting.",
                    ["nvml-util"])
    return Built(node, {i: (slow if i == 6 else peer) for i in ALL8})


register(Scenario(
    "straggler_a100_nogpm", "The same straggler on A100s: no GPM, waiting indistinguishable from computing (Slurm)",
    _straggler_nogpm, claims=("A12",), family="collectives",
    checks=(Check((0, 1, 2, 3, 4, 5, 7), "time_budget.peer", 0.25, 0.6),)))


def _nccl_ib_nogpm(seed: int) -> Built:
    node = host(seed, "a100-node-80", 96, A100_SXM, 8, frontend_gbps=100.0, ports=("InfiniBand", 200.0, 8))
    job = node.slurm_job(700451)
    TrainingJob(node, job, node.gpus, name="gpt-pretrain", compute=0.5, samples_per_step=16,
                feed=Feed(mode="loader", workers=4, prefetch=2, decode=0.2), grad_bytes=3.2e9, nodes=8,
                fabric=Fabric(node.ports, goodput=0.8, goodput_cv=0.06, congestion=0.05))
    t = GpuTruth(
        "network",
        "A 3.2 GB all-reduce across 8 nodes over HDR InfiniBand (200 Gb/s per GPU) takes ~0.33 s of a ~0.85 s step. "
        "NCCL's kernel is resident throughout, so NVML utilization is ~100 % and the A100 has no GPM to show SM "
        "activity falling to NCCL's footprint. The IB ports burst every step, and while they do the driver's "
        "memory-utilization samples and the power draw fall (a kernel moving data through a few SMs is not a GEMM). "
        "The GPUs wait on the network ~40 % of the time.",
        ["nccl-spin", "nvml-util", "nvml-memutil", "nvml-power", "nccl-sm"])
    return Built(node, same(ALL8, t))


register(Scenario(
    "nccl_ib_network_a100_nogpm", "Network-bound all-reduce on A100s (no GPM): utilization ~100 % (Slurm, 8 nodes)",
    _nccl_ib_nogpm, claims=("A9", "A10"), family="collectives",
    checks=(Check(ALL8, "time_budget.comm", 0.3, 0.5),)))


def _memory_bound(seed: int) -> Built:
    node = host(seed, "h100-node-90", 112, H100_SXM, 8, frontend_gbps=100.0)
    c = node.container()
    TrainingJob(node, c, node.gpus, name="dlrm", compute=0.25, samples_per_step=65536,
                profile=Profile(sm=0.33, occ=0.2, tensor=0.02, dram=0.88, power=0.7, sens=0.3),
                feed=Feed(mode="loader", workers=4, prefetch=2, decode=0.2), grad_bytes=250e6, channels=16)
    t = GpuTruth(
        "none",
        "A recommendation model's embedding gathers: kernels launched with grids covering about a third of the SMs "
        "that keep the HBM at ~88 % of its bandwidth. GPM SM activity is ~0.33 although the GPU is never idle: the "
        "kernels are memory-bound, not waiting on anything outside the GPU (DRAM activity high, utilization ~100 %, "
        "the loaders keep up, the NVLink all-reduce is short).",
        ["nvml-gpm", "nvml-util"])
    return Built(node, same(ALL8, t))


register(Scenario(
    "memory_bound_h100", "Memory-bound embedding kernels: SM activity ~0.33, DRAM ~0.88, never idle (8x H100)",
    _memory_bound, claims=("A5",), family="collectives",
    story="Look-alike of a collective wait on GPM: low SM activity with high DRAM activity.",
    checks=(Check(ALL8, "kernel_residency", 0.9, 1.0), Check(ALL8, "sm_active", 0.2, 0.45))))


# == sub-sample gaps ===========================================================================

def _subsample(seed: int) -> Built:
    node = host(seed, "h100-node-33", 112, H100_SXM, 8, frontend_gbps=100.0)
    pod = node.pod(name="jax-vit-small-0d4a")
    TrainingJob(node, pod, node.gpus, name="vit-small", compute=0.07, compute_cv=0.05, samples_per_step=1024,
                feed=Feed(mode="shared", workers=40, prefetch=2, decode=5.2, decode_cv=0.15, threads=True),
                single_process=True, host_wait="sleep", optimizer=0.1)
    t = GpuTruth(
        "data_pipeline",
        "A single controller process feeds 8 GPUs from 40 decode threads that are busy all the time: a global batch "
        "takes 5.2 CPU-seconds, so one is ready every ~0.13 s, while the step computes in ~0.08 s. Each GPU idles "
        "0.04-0.1 s between steps, shorter than the driver's 1/6 s utilization sample, so few samples read near 0 "
        "and utilization averages ~60 %. The GPUs wait for the CPU side ~40 % of the time (40 saturated cores).",
        ["nvml-util", "pytorch-dataloader"])
    return Built(node, same(ALL8, t))


register(Scenario(
    "decode_subsample_gaps_h100", "Decode-bound single controller: 0.04-0.1 s gaps, shorter than a 1/6 s sample (8x H100)",
    _subsample, claims=("A2", "A3"), family="sub-sample gaps",
    checks=(Check(ALL8, "time_budget.data", 0.25, 0.6), Check(ALL8, "idle_sample_share", 0.0, 0.15))))


def _inference_same_util(seed: int) -> Built:
    node = host(seed, "l40s-node-14", 64, L40S, 8, frontend_gbps=25.0)
    for g in node.gpus:
        unit = node.systemd_unit(f"reranker@{g.index}.service")
        InferenceServer(node, unit, g, name=f"reranker{g.index}", rate=10.0, cpu_per_request=0.004,
                        gpu_per_request=0.055)
    t = GpuTruth(
        "none",
        "A reranker replica per GPU serves Poisson traffic at ~10 requests/s of ~55 ms GPU work each: utilization "
        "~55 %, idle gaps of random length between requests, many shorter than a sample. The GPU idles only while "
        "no request is queued: the server thread then waits on an empty queue (asleep, no IO, no CPU pressure), and "
        "a request that arrives is launched at once. The idle time is the request load's, not a wait (A1, A13).",
        ["nvml-util", "cuda-sched"])
    return Built(node, same(ALL8, t))


register(Scenario(
    "inference_poisson_same_util", "Inference replicas at ~55 % utilization from Poisson load (8x L40S, systemd units)",
    _inference_same_util, claims=("A1", "A13"), family="sub-sample gaps",
    story="Look-alike of sub-sample decode gaps: the same mean utilization with nothing upstream.",
    checks=(Check(ALL8, "kernel_residency", 0.4, 0.7),)))


# == storage =====================================================================================

def _nvme_random(seed: int) -> Built:
    node = host(seed, "a100-node-22", 128, A100_SXM, 8, frontend_gbps=100.0)
    pod = node.pod(name="jax-arrayrecord-6b2f")
    data = disk(node, "nvme1n1")
    TrainingJob(node, pod, node.gpus, name="arrayrecord", compute=0.1, samples_per_step=2560,
                feed=Feed(mode="shared", workers=4, prefetch=2, decode=0.05, threads=True,
                          reader=DiskReader(data, requests=7680, size=16 * 1024, depth=1)),
                single_process=True, host_wait="sleep")
    t = GpuTruth(
        "storage",
        "Four reader threads fetch 16 KiB records at random offsets from one NVMe, one read at a time each (three "
        "reads per sample: index, record, label). A synchronous read waits the drive's ~90 us latency, so the readers "
        "complete ~44k reads/s with 4 in flight (Little's law), far below what the drive could do with a deeper "
        "queue: a global batch of 7680 reads takes ~0.7 s per reader, the four together deliver ~6 batches/s against "
        "~10 the GPUs consume. The readers sit in io_schedule (D state, IO pressure), the disk is busy all the time "
        "at a shallow queue, and the GPUs wait for random-access latency ~40 % of the time (A7).",
        ["iostats", "little", "psi"])
    return Built(node, same(ALL8, t))


register(Scenario(
    "storage_nvme_random_small", "Random 16 KiB reads from NVMe by 4 synchronous readers: latency-bound (8x A100, pod)",
    _nvme_random, claims=("A6", "A7"), family="storage",
    checks=(Check(ALL8, "time_budget.data", 0.25, 0.7),)))


def _nfs_bandwidth(seed: int) -> Built:
    node = host(seed, "h100-node-44", 112, H100_SXM, 8, frontend_gbps=25.0)
    job = node.slurm_job(812004)
    mount = node.add_mount("/datasets", "vast01:/datasets", nic(node, "eth0"), NFS_SERVICE)
    for g in node.gpus:
        TrainingJob(node, job, [g], name=f"shard{g.index}", compute=0.25, samples_per_step=512,
                    feed=Feed(mode="loader", workers=4, prefetch=2, decode=0.2,
                              reader=NfsReader(mount, [("READ", 2**20)], units=256, depth=4)), h2d_bytes=200e6)
    t = GpuTruth(
        "storage",
        "8 single-GPU tasks of one Slurm job stream 256 MiB shards per batch over NFS as 1 MiB READs, 4 in flight per "
        "worker, through a 25 GbE NIC. The link carries ~3 GB/s, under the 8 GPUs' ~8 GB/s appetite: replies queue "
        "at the NIC, each READ's RTT grows, the readers wait for pages (IO pressure) and the GPUs idle most of the "
        "time. The traffic on eth0 is the storage path, not a collective (the job has none).",
        ["mountstats", "psi", "little"])
    return Built(node, same(ALL8, t))


register(Scenario(
    "storage_nfs_bandwidth", "Sequential NFS reads bound by a 25 GbE link (8x H100, Slurm tasks)",
    _nfs_bandwidth, claims=("A6", "A7"), family="storage",
    checks=(Check(ALL8, "time_budget.data", 0.4, 0.95),)))


def _nfs_metadata(seed: int) -> Built:
    node = host(seed, "h100-node-46", 112, H100_SXM, 8, frontend_gbps=100.0)
    pod = node.pod(name="clip-smallfiles-9e33")
    mount = node.add_mount("/mnt/images", "netapp3:/vol/images", nic(node, "eth0"),
                           {**NFS_SERVICE, "LOOKUP": 0.0026, "OPEN": 0.003, "GETATTR": 0.0021})
    TrainingJob(node, pod, node.gpus, name="clip", compute=0.4, samples_per_step=256,
                feed=Feed(mode="loader", workers=3, prefetch=2, decode=0.3,
                          reader=NfsReader(mount, [("LOOKUP", 0), ("OPEN", 0), ("GETATTR", 0), ("READ", 110 * 1024),
                                                   ("CLOSE", 0)], units=256, depth=1)),
                grad_bytes=600e6)
    t = GpuTruth(
        "storage|sync",
        "Each sample is its own 110 KB JPEG on NFS: per file a LOOKUP, OPEN and GETATTR of 2-3 ms each before a "
        "short READ, one file after another per worker. A worker needs ~2.3 s per batch of 256 files, 3 workers per "
        "rank deliver a batch every ~0.8 s against a 0.45 s step, and the ranks spend ~40 % of the window waiting "
        "for data. The workers block in the RPC layer (D state, rpc_wait_bit_killable, so little IO "
        "pressure); 80 % of the RPCs are metadata. The DDP barrier passes one rank's wait to its peers inside NCCL "
        "(GPM shows them at NCCL's footprint): storage is the cause, sync what a peer sees, both accepted.",
        ["mountstats", "sunrpc-wait", "pytorch-dataloader", "nccl-spin", "nvml-gpm"])
    return Built(node, same(ALL8, t))


register(Scenario(
    "storage_nfs_metadata_ddp", "Small files over NFS, metadata-bound (LOOKUP/OPEN/GETATTR), DDP on 8x H100",
    _nfs_metadata, claims=("A6", "A7", "A12"), family="storage",
    checks=(Check(ALL8, "time_budget.compute", 0.3, 0.8),)))


def _checkpoint(seed: int) -> Built:
    node = host(seed, "h100-node-52", 112, H100_SXM, 8, frontend_gbps=100.0, data_disks=2)
    job = node.slurm_job(915530)
    TrainingJob(node, job, node.gpus, name="ckpt-train", compute=0.5, samples_per_step=64,
                feed=Feed(mode="loader", workers=4, prefetch=2, decode=0.25), grad_bytes=1.2e9,
                checkpoint=Checkpoint(interval=30.0, bytes_per_rank=3.5e9, disk=disk(node, "nvme1n1"), first=12.0))
    t = GpuTruth(
        "none",
        "Every 30 s the job saves a checkpoint: each rank copies its 3.5 GB shard to host memory and writes it with "
        "torch.save to the local NVMe at the drive's write limit, its writers sleeping in dirty-page throttling "
        "(IO wait, IO pressure, a deep write queue). The GPUs are idle ~25 % of the window, but the job pauses on "
        "purpose and only writes: nothing the GPUs need is slow to arrive. Outside checkpoints they compute ~95 %.",
        ["dirty-throttle", "iostats", "psi", "nvml-util"])
    return Built(node, same(ALL8, t))


register(Scenario(
    "checkpoint_writes_h100", "Periodic checkpoints: 28 GB written to local NVMe every 30 s (8x H100, Slurm)",
    _checkpoint, claims=("A1", "A6"), family="storage",
    story="Look-alike of storage: IO pressure and idle GPUs, but only writes, paused on purpose.",
    checks=(Check(ALL8, "time_budget.checkpoint", 0.1, 0.45),)))


# == throttled ===================================================================================

def _power_cap(seed: int) -> Built:
    node = host(seed, "h100-node-63", 112, H100_SXM, 8, frontend_gbps=100.0, power_limit=400.0)
    c = node.container()
    TrainingJob(node, c, node.gpus, name="capped", compute=0.5, samples_per_step=64,
                feed=Feed(mode="loader", workers=4, prefetch=2, decode=0.2), grad_bytes=900e6)
    t = GpuTruth(
        "throttled",
        "An administrator capped every GPU at 400 W (default 700 W). The GEMM-heavy step would draw ~680 W at full "
        "clock, so the driver holds the SM clock near 77 % of its maximum whenever the GPU computes: SwPowerCap is "
        "set on every busy sample, power sits at the limit, and the GPUs are busy ~97 % of the time doing their work "
        "more slowly. Nothing else holds them back.",
        ["nvml-clocks", "nvml-util"])
    return Built(node, same(ALL8, t))


register(Scenario(
    "throttled_power_cap_h100", "Busy GPUs under a 400 W power cap, clocks ~77 % (8x H100, container)",
    _power_cap, family="throttled",
    checks=(Check(ALL8, "clock_reduced_share", 0.8, 1.0),)))


def _thermal(seed: int) -> Built:
    node = host(seed, "a100-node-66", 96, A100_SXM, 8, frontend_gbps=100.0)
    for g in node.gpus[4:]:
        g.r_thermal *= 2.6
    job = node.slurm_job(588144)
    TrainingJob(node, job, node.gpus, name="thermal", compute=0.45, samples_per_step=64,
                feed=Feed(mode="loader", workers=4, prefetch=2, decode=0.2), grad_bytes=800e6)
    hot = GpuTruth(
        "throttled",
        "GPUs 4-7 sit behind a failed fan bank: their thermal resistance is 2.6x the others', they reach the "
        "slowdown temperature and the driver lowers their clocks (SwThermalSlowdown set while busy). They compute "
        "all the time, slower.",
        ["nvml-clocks"])
    cool = GpuTruth(
        "sync",
        "GPUs 0-3 run cool at full clock, finish each step early and wait in the all-reduce for the thermally slowed "
        "ranks, inside NCCL's resident kernel (100 % utilization on an A100 without GPM, but memory-utilization "
        "samples and power fall while it spins). Their wait is on a peer, and they are not throttled themselves.",
        ["nccl-spin", "nvml-util", "nvml-memutil", "nvml-power", "nvml-clocks"])
    return Built(node, {i: (hot if i >= 4 else cool) for i in ALL8})


register(Scenario(
    "throttled_thermal_a100", "Thermal slowdown on 4 of 8 A100s in one job; the cool ones wait for them (Slurm)",
    _thermal, family="throttled",
    checks=(Check((4, 5, 6, 7), "clock_reduced_share", 0.6, 1.0), Check((0, 1, 2, 3), "time_budget.peer", 0.05, 0.5))))


# == inference ==================================================================================

def _bs1(seed: int) -> Built:
    node = host(seed, "h100-node-75", 112, H100_SXM, 8, frontend_gbps=100.0)
    for g in node.gpus:
        pod = node.pod(name=f"embed-bs1-{g.index}", namespace="serving")
        InferenceServer(node, pod, g, name=f"embed{g.index}", rate=150.0, cpu_per_request=0.0033,
                        gpu_per_request=0.0012, profile=Profile(sm=0.08, occ=0.04, tensor=0.03, dram=0.1, power=0.3, sens=0.6),
                        instrumented=(g.index % 2 == 0))
    t = GpuTruth(
        "insufficient_work",
        "Each replica serves ~150 requests/s at batch size 1: a request is ~1.2 ms of tiny kernels on a few SMs, "
        "launched by one server thread in ~3.3 ms. Utilization ~18 %, SM activity ~1.5 %, no IO, no queueing, the "
        "server thread ~65 % of a core. The GPU has demand and nothing upstream delays it: the work units are too "
        "small for it (batch requests, CUDA graphs).",
        ["nvml-util", "nvml-gpm", "cuda-sched"])
    return Built(node, same(ALL8, t))


register(Scenario(
    "inference_bs1_high_rate", "Batch-1 embedding replicas at 150 requests/s: tiny kernels, ~18 % utilization (8 pods, H100)",
    _bs1, claims=("A4", "A13"), family="inference",
    checks=(Check(ALL8, "kernel_residency", 0.08, 0.3),)))


def _low_load(seed: int) -> Built:
    node = host(seed, "l40s-node-20", 64, L40S, 4, frontend_gbps=25.0)
    for g in node.gpus:
        unit = node.systemd_unit(f"embedder@{g.index}.service")
        InferenceServer(node, unit, g, name=f"embedder{g.index}", rate=0.4, cpu_per_request=0.003,
                        gpu_per_request=0.045, instrumented=(g.index < 2))
    t = GpuTruth(
        "none",
        "Each replica gets ~0.4 requests/s of ~45 ms GPU work: ~2 % utilization, the server thread asleep between "
        "requests. Latency is met and the load is simply low: low utilization without demand needs no fix (A1, A13).",
        ["nvml-util"])
    return Built(node, same(ALL4, t))


register(Scenario(
    "inference_low_load", "Embedding replicas at 0.4 requests/s (4x L40S, systemd units)",
    _low_load, claims=("A1", "A13"), family="inference",
    checks=(Check(ALL4, "kernel_residency", 0.0, 0.06),)))


def _no_process(seed: int) -> Built:
    node = host(seed, "a100-node-99", 96, A100_SXM, 8, frontend_gbps=100.0)
    return Built(node, same(ALL8, NO_PROCESS))


register(Scenario("no_process_quiet_a100", "No GPU process on a quiet host (8x A100)", _no_process,
                  claims=("A1",), family="inference",
                  checks=(Check(ALL8, "kernel_residency", 0.0, 0.0),)))


# == several owners on one node ==================================================================

def _two_owners(seed: int) -> Built:
    node = host(seed, "a100-node-31", 128, A100_SXM, 8, frontend_gbps=100.0)
    job = node.slurm_job(640077)
    mount = node.add_mount("/scratch/coco", "isilon1:/ifs/coco", nic(node, "eth0"),
                           {**NFS_SERVICE, "LOOKUP": 0.0022, "OPEN": 0.0028, "GETATTR": 0.0019})
    TrainingJob(node, job, node.gpus[:4], name="detector", compute=0.3, samples_per_step=128,
                feed=Feed(mode="shared", workers=8, prefetch=2, decode=0.3, threads=True,
                          reader=NfsReader(mount, [("LOOKUP", 0), ("OPEN", 0), ("GETATTR", 0), ("READ", 160 * 1024),
                                                   ("CLOSE", 0)], units=512, depth=1)),
                single_process=True, host_wait="sleep")
    c = node.container()
    TrainingJob(node, c, node.gpus[4:], name="finetune-b", compute=0.4, samples_per_step=64,
                feed=Feed(mode="loader", workers=4, prefetch=2, decode=0.25), grad_bytes=500e6)
    a = GpuTruth(
        "storage",
        "Slurm job A (GPUs 0-3) reads 160 KB images from NFS one file at a time per reader thread, each file costing a "
        "LOOKUP, OPEN and GETATTR of ~2 ms before its READ: 8 readers deliver a 512-image batch every ~0.5 s "
        "against a 0.31 s step. The GPUs wait for metadata-bound storage ~45 % of the time.",
        ["mountstats", "sunrpc-wait"])
    b = GpuTruth(
        "none",
        "Container B (GPUs 4-7) fine-tunes from the page cache and computes ~95 % of the time; job A's storage wait "
        "is not its business (per-owner scope).",
        ["nvml-util"])
    return Built(node, {i: (a if i < 4 else b) for i in ALL8})


register(Scenario(
    "two_owners_nfs_and_healthy", "Slurm job starved by NFS metadata on GPUs 0-3, healthy container on 4-7 (8x A100)",
    _two_owners, claims=("A6", "A7", "A14"), family="several owners",
    checks=(Check(ALL4, "time_budget.data", 0.25, 0.8), Check((4, 5, 6, 7), "kernel_residency", 0.85, 1.0))))


def _three_owners(seed: int) -> Built:
    node = host(seed, "h100-node-88", 112, H100_SXM, 8, frontend_gbps=100.0)
    pod = node.pod(quota_cores=6.0, name="sweep-small-41aa")
    for g in node.gpus[:4]:
        TrainingJob(node, pod, [g], name=f"trial{g.index}", compute=0.2, samples_per_step=128,
                    feed=Feed(mode="loader", workers=4, prefetch=2, decode=0.45, decode_cv=0.2))
    for g in node.gpus[4:6]:
        unit = node.systemd_unit(f"ranker@{g.index}.service")
        InferenceServer(node, unit, g, name=f"ranker{g.index}", rate=0.6, cpu_per_request=0.004, gpu_per_request=0.03)
    session = node.systemd_unit("session-31.scope", slice_path="/user.slice/user-1307.slice")
    idle_holder(node, session, node.gpus[6:], memory_share=0.4)
    quota = GpuTruth(
        "data_pipeline",
        "A pod with a 6-CPU limit runs 4 trials whose 16 workers want ~9 CPUs: throttled every period (cpu.stat), "
        "each GPU waits for its loader ~40 % of the time while no core is saturated.",
        ["sched-bwc", "k8s-cpu-limit", "psi-cpumax", "pytorch-dataloader"])
    low = GpuTruth("none", "An inference unit at 0.6 requests/s: idle without demand (A1, A13).", ["nvml-util"])
    idle = GpuTruth("none", "A notebook kernel in a login session holds these GPUs' memory and runs nothing (A1).",
                    ["nvml-util"])
    return Built(node, {i: (quota if i < 4 else low if i < 6 else idle) for i in ALL8})


register(Scenario(
    "three_owners_quota_inference_idle", "Quota-starved pod, low-load inference unit and an idle session on one node (8x H100)",
    _three_owners, claims=("A1", "A2", "A14"), family="several owners",
    checks=(Check(ALL4, "time_budget.data", 0.2, 0.8),)))


# == NCCL Inspector =============================================================================

def _inspector_network(seed: int) -> Built:
    node = host(seed, "a100-node-84", 96, A100_SXM, 8, frontend_gbps=100.0, ports=("InfiniBand", 200.0, 8))
    job = node.slurm_job(700988)
    TrainingJob(node, job, node.gpus, name="gpt-inspect", compute=0.5, samples_per_step=16,
                feed=Feed(mode="loader", workers=4, prefetch=2, decode=0.2), grad_bytes=3.4e9, nodes=4,
                fabric=Fabric(node.ports, goodput=0.7, goodput_cv=0.08, congestion=0.06), inspector=True)
    t = GpuTruth(
        "network",
        "A100s without GPM, network-bound all-reduce (3.4 GB over HDR IB at ~70 % of line rate, ~0.4 s of a ~0.95 s "
        "step) with NCCL Inspector on: every rank's collectives take about the same long time and reach a bus "
        "bandwidth well below the ports' rate, which tells a slow network (all ranks slow together) from a straggler "
        "(the waiting ranks' times long, the straggler's short). Where the trace has no nccl source, the ports' "
        "bursts and the fall of memory utilization and power during them remain.",
        ["nccl-inspector", "nccl-spin", "nvml-util", "nvml-memutil"])
    return Built(node, same(ALL8, t))


register(Scenario(
    "inspector_network_a100", "Network-bound all-reduce on A100s with NCCL Inspector records (4 nodes, Slurm)",
    _inspector_network, claims=("A9", "A10"), family="NCCL Inspector",
    checks=(Check(ALL8, "time_budget.comm", 0.3, 0.55),)))


def _inspector_straggler(seed: int) -> Built:
    node = host(seed, "a100-node-86", 96, A100_SXM, 8, frontend_gbps=100.0)
    pod = node.pod(name="moe-inspect-77b2")
    TrainingJob(node, pod, node.gpus, name="moe-inspect", compute=0.35, samples_per_step=32,
                feed=Feed(mode="loader", workers=4, prefetch=2, decode=0.15), grad_bytes=1.5e9,
                straggler={"rank": 3, "factor": _straggler_factor}, inspector=True)
    peer = GpuTruth(
        "sync",
        "GPU 3's rank is slow on most steps. Inspector's records show the seven others' all-reduces taking ~0.2 s "
        "each (the kernel_gpu time includes the wait for GPU 3) at a low bus bandwidth, while GPU 3's take a few "
        "milliseconds at full NVLink speed: a straggler, not a network. Where the trace has no nccl source, the "
        "peers' memory utilization and power fall while GPU 3 keeps computing.",
        ["nccl-inspector", "nccl-spin", "nvml-util", "nvml-memutil"])
    slow = GpuTruth("none", "The straggler computes ~95 % of the time; its own collectives are short.",
                    ["nccl-inspector", "nvml-util"])
    return Built(node, {i: (slow if i == 3 else peer) for i in ALL8})


register(Scenario(
    "inspector_straggler_a100", "Straggler on GPU 3 with NCCL Inspector records (8x A100, one node, pod)",
    _inspector_straggler, claims=("A12",), family="NCCL Inspector",
    checks=(Check((0, 1, 2, 4, 5, 6, 7), "time_budget.peer", 0.25, 0.6),)))


def _stalled(seed: int) -> Built:
    node = host(seed, "h100-node-95", 112, H100_SXM, 8, frontend_gbps=100.0, ports=("InfiniBand", 400.0, 8))
    job = node.slurm_job(733310)
    tj = TrainingJob(node, job, node.gpus, name="hung", compute=0.5, samples_per_step=32,
                     feed=Feed(mode="loader", workers=4, prefetch=2, decode=0.2), grad_bytes=2e9, nodes=2,
                     fabric=Fabric(node.ports, goodput=0.85), inspector=True, channels=20)
    tj.hung_after = 14.0
    t = GpuTruth(
        "sync",
        "A rank on the other node stopped (a failed process that never entered the collective). Since then every "
        "local rank sits in the all-reduce: NCCL's kernel resident (100 % utilization, GPM SM at its ~0.15 footprint), "
        "the proxy threads spinning, no bytes on the IB ports and no collective completing (Inspector's last "
        "sequence number frozen). The GPUs wait for a peer node that never arrives (A12): sync, not network, since "
        "the links are idle and healthy. The vocabulary has no word for a hang; the truth's collective_stalled flag "
        "is what a hang detector should raise.",
        ["nccl-hang", "nccl-spin", "nccl-sm", "nccl-inspector", "nccl-proxy"], collective_stalled=True)
    return Built(node, same(ALL8, t))


register(Scenario(
    "stalled_collective_h100", "Hung all-reduce: 100 % utilization, NCCL footprint, no link bytes (8x H100, 2 nodes)",
    _stalled, claims=("A10", "A12"), family="NCCL Inspector",
    checks=(Check(ALL8, "kernel_residency", 0.99, 1.0), Check(ALL8, "time_budget.peer", 0.95, 1.0))))


# == too little work, and busy feeders that keep up ===============================================

def _small_grid(seed: int) -> Built:
    node = host(seed, "h100-node-77", 112, H100_SXM, 8, frontend_gbps=100.0)
    for g in node.gpus:
        c = node.container()
        TrainingJob(node, c, [g], name=f"lstm{g.index}", compute=0.12, compute_cv=0.05, samples_per_step=8,
                    profile=Profile(sm=0.05, occ=0.02, tensor=0.01, dram=0.04, power=0.12, sens=0.9),
                    feed=Feed(mode="loader", workers=2, prefetch=2, decode=0.02), optimizer=0.02)
    t = GpuTruth(
        "insufficient_work",
        "Eight containers each train a small recurrent model at batch size 8: every step is a long chain of small "
        "kernels whose grids cover a handful of the 132 SMs, issued back to back from the host. A kernel is always "
        "running, so NVML utilization reads ~100 %, but GPM shows ~5 % of the SMs busy, DRAM bandwidth ~4 % and "
        "power near idle: the GPU's capacity goes unused because each unit of work is too small for it (A4). "
        "Nothing waits: the loaders keep up, there is no IO and no collective. More GPUs would not help; a larger "
        "batch would.",
        ["nvml-gpm", "nvml-util", "nvml-power"])
    return Built(node, same(ALL8, t))


register(Scenario(
    "small_grid_kernels_h100", "Batch-8 recurrent model: always a kernel running on a few SMs (8 containers, H100)",
    _small_grid, claims=("A4", "A5"), family="too little work",
    story="Look-alike of memory-bound kernels and of a collective wait on GPM: low SM activity, but nothing is "
          "waited for and DRAM is idle too.",
    checks=(Check(ALL8, "kernel_residency", 0.95, 1.0), Check(ALL8, "sm_active", 0.0, 0.1))))


def _feeders_keep_up(seed: int) -> Built:
    node = host(seed, "h100-node-79", 112, H100_SXM, 8, frontend_gbps=200.0)
    pod = node.pod(name="vit-l-augment-e4c0")
    TrainingJob(node, pod, node.gpus, name="vit-l", compute=0.3, samples_per_step=256,
                feed=Feed(mode="loader", workers=6, prefetch=2, decode=1.75, decode_cv=0.15),
                grad_bytes=600e6)
    t = GpuTruth(
        "none",
        "48 DataLoader workers decode with heavy augmentation and are busy ~85 % of the time each: 48 cores near "
        "saturation, host CPU high. But six workers per rank produce ~3.4 batches/s against the ~3.1 steps/s the "
        "GPUs consume, so each rank's prefetch queue (12 batches) stays full and a batch is always ready: the GPUs "
        "compute ~94 % of the time, the rest in the NVLink all-reduce. Busy cores are not a bottleneck unless the GPU waits for them (A3).",
        ["pytorch-dataloader", "nvml-util", "nvml-gpm"])
    return Built(node, same(ALL8, t))


register(Scenario(
    "feeders_busy_gpus_busy_h100", "48 decode workers ~85 % busy that keep up: GPUs compute ~94 % (8x H100 DDP, pod)",
    _feeders_keep_up, claims=("A3",), family="too little work",
    story="Look-alike of data_pipeline: many nearly saturated cores of the GPU owner, and nothing waits.",
    checks=(Check(ALL8, "time_budget.data", 0.0, 0.03), Check(ALL8, "kernel_residency", 0.9, 1.0))))


def _ddp_decode_a100(seed: int) -> Built:
    node = host(seed, "a100-node-26", 128, A100_SXM, 8, frontend_gbps=100.0)
    job = node.slurm_job(702215)
    TrainingJob(node, job, node.gpus, name="effnet-ddp", compute=0.25, samples_per_step=192,
                feed=Feed(mode="loader", workers=4, prefetch=2, decode=1.6, decode_cv=0.2),
                grad_bytes=300e6, h2d_bytes=100e6)
    t = GpuTruth(
        "data_pipeline|sync",
        "PyTorch DDP with one DataLoader of 4 workers per rank; decoding a batch takes 1.6 CPU-seconds, so each "
        "rank's loader delivers ~2.5 batches/s against ~3.5 steps/s of compute: 32 saturated cores. The ranks "
        "step in lockstep at the all-reduce, so whichever rank's queue ran dry idles (no kernel: utilization "
        "drops) while the others have entered the collective and wait for it inside NCCL's resident kernel "
        "(utilization ~100 %, memory utilization and power low; A100, no GPM). Which rank starves drifts. Every "
        "GPU loses its time to the decode bottleneck, directly or through the barrier: data_pipeline is the cause, "
        "sync what a peer waiting for a starved rank sees.",
        ["pytorch-dataloader", "nccl-spin", "nvml-util", "nvml-memutil"])
    return Built(node, same(ALL8, t))


register(Scenario(
    "ddp_decode_per_rank_a100", "Decode-bound DDP, one DataLoader per rank, lockstep at the all-reduce (8x A100, Slurm)",
    _ddp_decode_a100, claims=("A2", "A3", "A12"), family="data pipeline",
    story="Per-rank loaders: the data wait moves between ranks, the barrier passes it on.",
    checks=(Check(ALL8, "time_budget.compute", 0.4, 0.85),)))
