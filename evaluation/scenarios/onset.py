"""Onset scenarios: 165 s node traces that run healthy until, at a known time, a mechanism
begins (or, for the look-alikes, something that must not change the verdict). The truth
gives the expected verdict just before the onset and at the end of the trace; the bench
(bench/time_to_verdict.py) measures how long the verdict takes to follow."""

from __future__ import annotations

from evaluation.model.gpu import A100_SXM, H100_SXM, L40S
from evaluation.model.jobs import (Checkpoint, DiskReader, Fabric, Feed, InferenceServer, NfsReader, Profile,
                                   TrainingJob, backup_agent, compile_job)
from evaluation.scenarios import Built, Check, Scenario, register
from evaluation.scenarios.hosts import SATA_SSD, disk, host, nic
from evaluation.scenarios.steady import ALL4, ALL8, NFS_SERVICE, _straggler_factor, same, tenant_group
from evaluation.truth import GpuTruth

DURATION = 165.0
ONSET = 75.0


def onset(name: str, title: str, build, checks=(), claims=(), story: str = "") -> None:
    register(Scenario(name, title, build, kind="onset", duration=DURATION, onset=ONSET, claims=claims,
                      checks=checks, family="onset", story=story))


HEALTHY = GpuTruth(
    "none",
    "Before the onset the job is healthy: its batches are ready when it needs them and the GPUs compute nearly all "
    "the time; nothing needs fixing.",
    ["nvml-util"])


# == mechanisms that begin ==================================================================

def _page_cache(seed: int) -> Built:
    node = host(seed, "a100-node-40", 96, A100_SXM, 8, frontend_gbps=100.0)
    node.add_disk("sda", 8, 0, **SATA_SSD)
    pod = node.pod(name="jax-imagenet-c0fe")
    reader = DiskReader(disk(node, "sda"), requests=2048, size=128 * 1024, depth=1, miss=0.02)
    TrainingJob(node, pod, node.gpus, name="imagenet", compute=0.25, samples_per_step=2048,
                feed=Feed(mode="shared", workers=24, prefetch=2, decode=0.9, threads=True, reader=reader),
                single_process=True, host_wait="sleep")

    def evict() -> None:
        reader.miss = 0.9
    after = GpuTruth(
        "storage",
        "At the onset another workload's memory use evicts the dataset from the page cache: 90 % of the 128 KiB "
        "record reads now go to the SATA SSD, which delivers ~0.5 GB/s against the ~1 GB/s the GPUs consume. The "
        "reader threads block in io_schedule (IO pressure), the disk's queue stays full, and the GPUs wait for "
        "storage about half the time.",
        ["page-cache", "iostats", "psi", "little"])
    return Built(node, same(ALL8, after), before=same(ALL8, HEALTHY), onset_action=evict)


onset("onset_page_cache_eviction", "Dataset evicted from the page cache: reads start hitting a SATA SSD (8x A100)",
      _page_cache, claims=("A6", "A7"),
      checks=(Check(ALL8, "time_budget.data", 0.0, 0.05, "before"), Check(ALL8, "time_budget.data", 0.3, 0.8, "after")))


def _filer(seed: int) -> Built:
    node = host(seed, "h100-node-24", 112, H100_SXM, 8, frontend_gbps=100.0)
    job = node.slurm_job(830551)
    mount = node.add_mount("/datasets", "filer07:/datasets", nic(node, "eth0"), NFS_SERVICE)
    for g in node.gpus:
        TrainingJob(node, job, [g], name=f"task{g.index}", compute=0.25, samples_per_step=256,
                    feed=Feed(mode="loader", workers=4, prefetch=2, decode=0.2,
                              reader=NfsReader(mount, [("READ", 2**20)], units=128, depth=4)), h2d_bytes=100e6)

    def slow() -> None:
        mount.slowdown = 60.0
    after = GpuTruth(
        "storage",
        "At the onset the NFS filer slows down (a RAID rebuild behind it): each 1 MiB READ takes ~50 ms instead of "
        "~1 ms. With 16 READs in flight per GPU the tasks now get ~300 MB/s each against the ~500 MB/s they consume; "
        "the readers wait for pages (IO pressure), the mount's RTT per READ grows fifty-fold, and the GPUs wait for "
        "storage about half the time.",
        ["mountstats", "psi", "little"])
    return Built(node, same(ALL8, after), before=same(ALL8, HEALTHY), onset_action=slow)


onset("onset_nfs_filer_slowdown", "NFS filer slows down 60-fold under sequential reads (8x H100, Slurm tasks)",
      _filer, claims=("A6",),
      checks=(Check(ALL8, "time_budget.data", 0.0, 0.05, "before"), Check(ALL8, "time_budget.data", 0.3, 0.8, "after")))


def _decoding(seed: int) -> Built:
    node = host(seed, "a100-node-41", 96, A100_SXM, 8, frontend_gbps=100.0)
    pod = node.pod(name="augment-sweep-93d1")
    feeds = []
    for g in node.gpus:
        f = Feed(mode="loader", workers=3, prefetch=2, decode=0.2, decode_cv=0.2)
        feeds.append(f)
        TrainingJob(node, pod, [g], name=f"aug{g.index}", compute=0.15, samples_per_step=256, feed=f, h2d_bytes=80e6)

    def heavier() -> None:
        for f in feeds:
            f.decode = 0.7
    after = GpuTruth(
        "data_pipeline",
        "At the onset the trials switch on heavy augmentation: a batch now takes 0.7 CPU-seconds to decode instead "
        "of 0.2. Three workers per GPU, each at 100 % of its core, deliver ~4.3 batches/s against the ~6 the GPUs "
        "consume: 24 saturated cores, the GPUs waiting for the CPU side about a third of the time.",
        ["pytorch-dataloader", "nvml-util"])
    return Built(node, same(ALL8, after), before=same(ALL8, HEALTHY), onset_action=heavier)


onset("onset_heavier_decoding", "Augmentation switched on: decoding 3.5x heavier (8 single-GPU trials, A100, pod)",
      _decoding, claims=("A2", "A3"),
      checks=(Check(ALL8, "time_budget.data", 0.0, 0.05, "before"), Check(ALL8, "time_budget.data", 0.2, 0.7, "after")))


def _limit(seed: int) -> Built:
    node = host(seed, "h100-node-27", 112, H100_SXM, 8, frontend_gbps=100.0)
    pod = node.pod(quota_cores=32.0, name="resize-demo-4e8a")
    for g in node.gpus:
        TrainingJob(node, pod, [g], name=f"trial{g.index}", compute=0.22, samples_per_step=256,
                    feed=Feed(mode="loader", workers=3, prefetch=2, decode=0.3, decode_cv=0.2), h2d_bytes=60e6)

    def lower() -> None:
        pod.cgroup.quota_cores = 8.0
    after = GpuTruth(
        "data_pipeline",
        "At the onset the pod's CPU limit is lowered from 32 to 8 (cpu.max rewritten by an in-place resize). The 8 "
        "rank threads spinning in CUDA synchronize and 24 decode workers want ~17 CPUs; the group is now throttled in "
        "every period and the loaders deliver about half the batches the GPUs consume, while the host's cores are "
        "nearly all idle.",
        ["sched-bwc", "k8s-cpu-limit", "cgroup-v2", "psi-cpumax", "cuda-sched"])
    return Built(node, same(ALL8, after), before=same(ALL8, HEALTHY), onset_action=lower)


onset("onset_cpu_limit_lowered", "Pod CPU limit lowered from 32 to 8 (cpu.max), 8 single-GPU trials (H100)",
      _limit, claims=("A2", "A3"),
      checks=(Check(ALL8, "time_budget.data", 0.0, 0.05, "before"), Check(ALL8, "time_budget.data", 0.25, 0.8, "after")))


def _roce(seed: int) -> Built:
    node = host(seed, "h100-node-62", 112, H100_SXM, 8, frontend_gbps=100.0, ports=("Ethernet", 400.0, 8))
    job = node.slurm_job(557020)
    fabric = Fabric(node.ports, goodput=0.85, goodput_cv=0.05, congestion=0.01)
    TrainingJob(node, job, node.gpus, name="roce-train", compute=0.5, samples_per_step=32,
                feed=Feed(mode="loader", workers=4, prefetch=2, decode=0.15), grad_bytes=1.5e9, nodes=2,
                fabric=fabric, channels=16)

    def congest() -> None:
        fabric.goodput, fabric.goodput_cv, fabric.congestion = 0.2, 0.25, 0.45
    before = GpuTruth(
        "none",
        "Before the onset the 1.5 GB all-reduce over 400 GbE RoCE runs at ~85 % of line rate and takes ~12 % of the "
        "step: the normal cost of data parallelism across two nodes, nothing to fix.",
        ["nccl-spin", "nvml-gpm"])
    after = GpuTruth(
        "network",
        "At the onset another job's traffic congests the fabric: ECN marks and CNPs rise on every port and the "
        "all-reduce's goodput falls to ~20 % of line rate; it now takes ~0.3 s of a ~0.85 s step, the GPUs at NCCL's "
        "SM footprint meanwhile (utilization still ~100 %).",
        ["roce-ecn", "nccl-spin", "nccl-sm", "nvml-gpm"])
    return Built(node, same(ALL8, after), before=same(ALL8, before), onset_action=congest)


onset("onset_roce_congestion", "RoCE fabric congests: ECN/CNP rise, all-reduce goodput falls to ~20 % (8x H100, 2 nodes)",
      _roce, claims=("A10", "A11"),
      checks=(Check(ALL8, "time_budget.comm", 0.0, 0.2, "before"), Check(ALL8, "time_budget.comm", 0.25, 0.6, "after")))


def _brake(seed: int) -> Built:
    node = host(seed, "h100-node-81", 112, H100_SXM, 8, frontend_gbps=100.0)
    c = node.container()
    for g in node.gpus:
        TrainingJob(node, c, [g], name=f"bench{g.index}", compute=0.4, samples_per_step=64,
                    feed=Feed(mode="loader", workers=3, prefetch=2, decode=0.2))
    braked = node.gpus[2:4]

    def fail() -> None:
        for g in braked:
            g.power_brake = True
    hot = GpuTruth(
        "throttled",
        "At the onset one of the chassis' power supplies fails and the board asserts the external power brake on "
        "the GPUs it feeds (2 and 3): the driver halves their clocks at once and reports HwSlowdown and "
        "HwPowerBrakeSlowdown. Their jobs keep them computing all the time, at half speed.",
        ["nvml-clocks"])
    return Built(node, {i: (hot if i in (2, 3) else HEALTHY) for i in ALL8}, before=same(ALL8, HEALTHY),
                 onset_action=fail)


onset("onset_power_brake", "A power supply fails: power brake on GPUs 2-3 of 8 independent jobs (H100, container)",
      _brake, checks=(Check((2, 3), "clock_reduced_share", 0.9, 1.0, "after"),
                      Check((2, 3), "clock_reduced_share", 0.0, 0.01, "before")))


def _downtrain(seed: int) -> Built:
    node = host(seed, "a100-node-58", 128, A100_SXM, 8, frontend_gbps=100.0)
    job = node.slurm_job(774410)
    for g in node.gpus:
        TrainingJob(node, job, [g], name=f"unet{g.index}", compute=0.35, samples_per_step=4,
                    feed=Feed(mode="loader", workers=4, prefetch=2, decode=0.3), h2d_bytes=1.4e9, h2d_pinned=True)
    gpu = node.gpus[2]

    def retrain() -> None:
        gpu.link_generation = 1
        gpu.replay_rate = 40.0
    slow = GpuTruth(
        "host_transfer",
        "At the onset GPU 2's PCIe link retrains to Gen1 after a burst of link errors (the replay counter climbs; "
        "the slot and the GPU still allow Gen4 x16): ~3.2 GB/s for a DMA copy instead of ~25. Each step's 1.4 GB "
        "pinned host-to-device copy now takes ~0.45 s against 0.35 s of compute, and the GPU runs no kernel "
        "meanwhile: it waits for the transfer more than half the time. The other GPUs' links are unchanged.",
        ["nvml-pcie", "cuda-memcpy", "nvml-util"])
    return Built(node, {i: (slow if i == 2 else HEALTHY) for i in ALL8}, before=same(ALL8, HEALTHY),
                 onset_action=retrain)


onset("onset_pcie_link_downtrain", "GPU 2's PCIe link retrains to Gen1 under copy-heavy steps (8 single-GPU trials, A100)",
      _downtrain, claims=("A9",),
      checks=(Check((2,), "time_budget.copy", 0.0, 0.2, "before"), Check((2,), "time_budget.copy", 0.4, 0.7, "after"),
              Check((0, 1, 3, 4, 5, 6, 7), "kernel_residency", 0.7, 1.0, "after")))


def _traffic(seed: int) -> Built:
    node = host(seed, "h100-node-76", 112, H100_SXM, 8, frontend_gbps=100.0)
    servers = []
    for g in node.gpus:
        pod = node.pod(name=f"embed-bs1-{g.index}", namespace="serving")
        servers.append(InferenceServer(node, pod, g, name=f"embed{g.index}", rate=0.0, cpu_per_request=0.0033,
                                       gpu_per_request=0.0012,
                                       profile=Profile(sm=0.08, occ=0.04, tensor=0.03, dram=0.1, power=0.3, sens=0.6)))

    def arrive() -> None:
        for s in servers:
            s.rate = 150.0
    idle = GpuTruth(
        "none",
        "Before the onset the replicas are out of the load balancer's rotation: no request arrives, the server "
        "threads sleep and the GPUs hold their model idle. No demand (A1).",
        ["nvml-util"])
    busy = GpuTruth(
        "insufficient_work",
        "At the onset the replicas enter rotation and each gets ~150 requests/s at batch size 1: ~1.2 ms of tiny "
        "kernels on a few SMs per request, launched by one server thread in ~3.3 ms. Utilization ~18 %, SM activity "
        "~1.5 %, no IO, no queueing: the GPU has demand and nothing upstream delays it, the work units are too "
        "small for it (A4, A13).",
        ["nvml-util", "nvml-gpm", "cuda-sched"])
    return Built(node, same(ALL8, busy), before=same(ALL8, idle), onset_action=arrive)


onset("onset_bs1_traffic_arrives", "Batch-1 embedding replicas enter rotation: ~150 requests/s each (8 pods, H100)",
      _traffic, claims=("A4", "A13"),
      checks=(Check(ALL8, "kernel_residency", 0.0, 0.0, "before"), Check(ALL8, "kernel_residency", 0.08, 0.3, "after")))


def _power(seed: int) -> Built:
    node = host(seed, "a100-node-67", 96, A100_SXM, 8, frontend_gbps=100.0)
    job = node.slurm_job(591202)
    TrainingJob(node, job, node.gpus, name="powercap", compute=0.45, samples_per_step=64,
                feed=Feed(mode="loader", workers=4, prefetch=2, decode=0.2), grad_bytes=700e6)

    def cap() -> None:
        for g in node.gpus:
            g.power_limit = 250.0
    after = GpuTruth(
        "throttled",
        "At the onset the administrators lower every GPU's power limit from 400 W to 250 W (a facility power "
        "emergency). The step's kernels would draw ~390 W; the driver holds the clocks near 80 % with SwPowerCap set "
        "whenever the GPUs compute, all of them alike.",
        ["nvml-clocks"])
    return Built(node, same(ALL8, after), before=same(ALL8, HEALTHY), onset_action=cap)


onset("onset_power_cap_lowered", "Power limit lowered from 400 W to 250 W on busy GPUs (8x A100, Slurm)",
      _power, checks=(Check(ALL8, "clock_reduced_share", 0.7, 1.0, "after"),))


def _straggler(seed: int) -> Built:
    node = host(seed, "h100-node-71", 112, H100_SXM, 8, frontend_gbps=100.0)
    pod = node.pod(name="moe-drift-2a90")
    tj = TrainingJob(node, pod, node.gpus, name="moe-drift", compute=0.35, samples_per_step=32,
                     feed=Feed(mode="loader", workers=4, prefetch=2, decode=0.15), grad_bytes=1.5e9, channels=16)

    def skew() -> None:
        tj.straggler = {"rank": 5, "factor": _straggler_factor}
    peer = GpuTruth(
        "sync",
        "From the onset the rank on GPU 5 receives the tokens of the hottest experts and takes 30-160 % longer per "
        "step; the other seven wait for it in NCCL's resident kernel (GPM at NCCL's footprint, one node, no network).",
        ["nccl-spin", "nccl-sm", "nvml-gpm"])
    slow = GpuTruth("none", "The straggler computes nearly all the time: it is waited for, not waiting.", ["nvml-gpm"])
    return Built(node, {i: (slow if i == 5 else peer) for i in ALL8}, before=same(ALL8, HEALTHY), onset_action=skew)


onset("onset_straggler", "A straggler appears on GPU 5 (8x H100, DDP, one node)",
      _straggler, claims=("A12",),
      checks=(Check((0, 1, 2, 3, 4, 6, 7), "time_budget.peer", 0.25, 0.6, "after"),))


def _hang(seed: int) -> Built:
    node = host(seed, "h100-node-96", 112, H100_SXM, 8, frontend_gbps=100.0, ports=("InfiniBand", 400.0, 8))
    job = node.slurm_job(733902)
    tj = TrainingJob(node, job, node.gpus, name="hang-late", compute=0.5, samples_per_step=32,
                     feed=Feed(mode="loader", workers=4, prefetch=2, decode=0.2), grad_bytes=1e9, nodes=2,
                     fabric=Fabric(node.ports, goodput=0.85), inspector=True, channels=20)

    def hang() -> None:
        tj.hung_after = node.t
    after = GpuTruth(
        "sync",
        "At the onset a rank on the other node dies without leaving the communicator: every local rank enters the "
        "next all-reduce and never leaves it. Utilization stays ~100 % (NCCL's resident kernel), GPM shows its SM "
        "footprint, the IB ports carry nothing and Inspector's last sequence number stops. The GPUs wait for a peer "
        "that never arrives (A12), on idle, healthy links; a hang has no verdict of its own, collective_stalled is "
        "the flag to raise.",
        ["nccl-hang", "nccl-spin", "nccl-inspector"], collective_stalled=True)
    before = GpuTruth(
        "none",
        "Before the onset the 1 GB all-reduce over NDR InfiniBand takes ~10 % of the step: healthy data parallelism.",
        ["nvml-gpm"])
    return Built(node, same(ALL8, after), before=same(ALL8, before), onset_action=hang)


onset("onset_collective_hang", "A remote rank dies: the all-reduce hangs at 100 % utilization (8x H100, 2 nodes)",
      _hang, claims=("A10", "A12"), checks=(Check(ALL8, "time_budget.peer", 0.95, 1.0, "after"),))


# == look-alikes that must keep none ========================================================

def _checkpoint(seed: int) -> Built:
    node = host(seed, "h100-node-53", 112, H100_SXM, 8, frontend_gbps=100.0, data_disks=2)
    job = node.slurm_job(915601)
    tj = TrainingJob(node, job, node.gpus, name="ckpt-late", compute=0.5, samples_per_step=64,
                     feed=Feed(mode="loader", workers=4, prefetch=2, decode=0.25), grad_bytes=1.2e9)
    target = disk(node, "nvme1n1")

    def begin() -> None:
        tj.checkpoint = Checkpoint(interval=30.0, bytes_per_rank=3.0e9, disk=target)
        for r in tj.ranks:
            r.next_checkpoint = node.t + 3.0
    after = GpuTruth(
        "none",
        "From the onset the job saves a 24 GB checkpoint every 30 s to local NVMe: the GPUs pause ~20 % of the time "
        "while the ranks write, under dirty-page throttling (IO wait, IO pressure, a deep write queue). The pauses "
        "are the job's own, only writes happen, and nothing the GPUs need is slow (A1).",
        ["dirty-throttle", "iostats", "psi"])
    return Built(node, same(ALL8, after), before=same(ALL8, HEALTHY), onset_action=begin)


onset("onset_checkpoint_begins", "Periodic checkpoints begin: writes only (8x H100, Slurm)", _checkpoint,
      claims=("A1",), story="Look-alike of storage: IO pressure and pauses that are the job's own writes.",
      checks=(Check(ALL8, "time_budget.checkpoint", 0.08, 0.4, "after"),))


def _load_drop(seed: int) -> Built:
    node = host(seed, "l40s-node-31", 64, L40S, 4, frontend_gbps=25.0)
    servers = []
    for g in node.gpus:
        unit = node.systemd_unit(f"llm-serve@{g.index}.service")
        servers.append(InferenceServer(node, unit, g, name=f"serve{g.index}", rate=8.0, cpu_per_request=0.004,
                                       gpu_per_request=0.06, instrumented=(g.index == 0)))

    def drop() -> None:
        for s in servers:
            s.rate = 0.0
    before = GpuTruth(
        "none",
        "Before the onset each replica serves Poisson traffic at ~8 requests/s of ~60 ms GPU work: ~50 % utilization "
        "set by the request load. The GPU idles only while no request is queued: nothing upstream (A1, A13).",
        ["nvml-util"])
    after = GpuTruth(
        "none",
        "At the onset the load balancer drains these replicas: no request arrives, the server threads sleep, the GPUs "
        "hold their model and idle. No demand, nothing to fix (A1).",
        ["nvml-util"])
    return Built(node, same(ALL4, after), before=same(ALL4, before), onset_action=drop)


onset("onset_inference_load_drops", "Inference traffic drops to zero (4x L40S replicas, systemd units)", _load_drop,
      claims=("A1", "A13"), story="Look-alike: utilization falls to 0 with nothing waiting.",
      checks=(Check(ALL4, "kernel_residency", 0.0, 0.001, "after"),))


def _compile(seed: int) -> Built:
    node = host(seed, "a100-node-44", 128, A100_SXM, 8, frontend_gbps=100.0)
    pod = node.pod(name="bert-ddp-1f3b")
    TrainingJob(node, pod, node.gpus, name="bert", compute=0.4, samples_per_step=128,
                feed=Feed(mode="loader", workers=4, prefetch=2, decode=0.3), grad_bytes=700e6)
    group = node.cgroup("/user.slice/user-1044.slice/session-7.scope")

    def build() -> None:
        compile_job(node, group, jobs=72)
    after = GpuTruth(
        "none",
        "At the onset a user starts make -j72 on the same host: 72 of the 128 cores saturate (host CPU pressure). "
        "The training pod's 32 workers and 8 rank threads still find free cores, its batches stay ready and its GPUs "
        "keep computing ~95 % of the time. The saturation is another tenant's.",
        ["psi", "pytorch-dataloader"])
    return Built(node, same(ALL8, after), before=same(ALL8, HEALTHY), onset_action=build)


onset("onset_cotenant_compile", "A co-tenant's build saturates 72 other cores (8x A100 DDP, 128 cores)", _compile,
      claims=("A3",), story="Look-alike of data_pipeline: saturated cores that are not the GPU owner's.",
      checks=(Check(ALL8, "kernel_residency", 0.85, 1.0, "after"),))


def _backup(seed: int) -> Built:
    node = host(seed, "h100-node-34", 112, H100_SXM, 8, frontend_gbps=100.0, data_disks=2)
    pod = node.pod(name="t5-ddp-70ce")
    TrainingJob(node, pod, node.gpus, name="t5", compute=0.45, samples_per_step=128,
                feed=Feed(mode="loader", workers=4, prefetch=2, decode=0.25), grad_bytes=900e6)
    group = tenant_group(node, "backup-agent.service")
    target = disk(node, "nvme2n1")

    def start() -> None:
        backup_agent(node, group, target, threads=6, depth=6)
    after = GpuTruth(
        "none",
        "At the onset a backup agent starts streaming nvme2n1: its readers block in IO (host IO pressure) and the "
        "disk's queue is deep. The training pod reads from the page cache, not from that disk; its GPUs keep "
        "computing. The IO pressure is the backup's.",
        ["psi", "iostats", "cgroup-v2"])
    return Built(node, same(ALL8, after), before=same(ALL8, HEALTHY), onset_action=start)


onset("onset_cotenant_backup", "A co-tenant's backup starts reading another disk (8x H100 DDP)", _backup,
      claims=("A6",), story="Look-alike of storage: host IO pressure from a tenant that owns no GPU.",
      checks=(Check(ALL8, "kernel_residency", 0.85, 1.0, "after"),))
