"""Soak: a simulated 8-GPU node for more than half an hour of virtual time, through the same
Sampler.ingest / analyse_once path the live exporter runs, with the GPUs' jobs ending and new
ones starting every few minutes. Memory, open file descriptors, the window rings and the
exposed series must stay flat while owners come and go.

Virtual time makes 35 minutes of node time take a minute or two of wall time; every 10
simulated seconds the scenario also checks its budget, so the test cannot run away.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import time

import pytest

from gpuwait.cli import enabled_collectors
from gpuwait.core.registry import registry
from gpuwait.core.registry import resolve
from gpuwait.exposition.prometheus import GpuwaitCollector
from gpuwait.core.sampler import Sampler
from gpuwait.simulate import run as simulate_run
from gpuwait.simulate.model import get
from gpuwait.simulate.node import OWNER_LABELS, SimulatedNode
from gpuwait.collectors.gpu.payload import OwnerUse
from gpuwait.nvml.values import GpuProcess

SIMULATED_SECONDS = 35 * 60
#: Each GPU's job holds it this long, then another job's process takes it over.
OWNER_LIFETIME = 180.0
CHECK_EVERY = 60.0  # simulated seconds between measurements
WALL_BUDGET = 420.0


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def owner_of(gpu: int, generation: int) -> tuple[str, dict[str, str]]:
    uid = f"{gpu:08x}-0000-4000-8000-{generation:012x}"
    return f"kubernetes:{uid}", {**OWNER_LABELS, "owner": f"kubernetes:{uid}", "pod_uid": uid}


def churning_gpu_device(original):
    """The node's gpu_device reading, with each GPU's owner replaced every OWNER_LIFETIME
    (staggered across GPUs, so owners change every few seconds somewhere on the node)."""

    def gpu_device(self: SimulatedNode, t: float):
        data = original(self, t)
        elapsed = self.elapsed(t)
        devices, owners = [], {}
        for device in data.gpus:
            if not device.up or not device.owners:
                devices.append(device)
                continue
            stagger = device.index * OWNER_LIFETIME / max(1, len(data.gpus))
            generation = int((elapsed + stagger) // OWNER_LIFETIME)
            owner_id, labels = owner_of(device.index, generation)
            use = device.owners[0]
            pid = 100_000 + 1000 * generation + device.index
            devices.append(dataclasses.replace(
                device, processes=(GpuProcess(pid, use.memory_bytes),),
                owners=(OwnerUse(owner_id, 1, use.memory_bytes, use.utilization),)))
            template = next(iter(data.owners.values()))
            owners[owner_id] = dataclasses.replace(template, labels=labels, processes=2, threads=template.threads // 8 + 1)
        return dataclasses.replace(data, gpus=tuple(devices), owners=owners)

    return gpu_device


@dataclasses.dataclass
class Checkpoint:
    t: float
    rss: int
    fds: int
    ring_columns: int
    ring_rows: int
    series: int
    owners: frozenset


def test_soak_owners_come_and_go_with_memory_fds_and_series_flat(monkeypatch):
    monkeypatch.setattr(SimulatedNode, "gpu_device", churning_gpu_device(SimulatedNode.gpu_device))
    registry()
    settings, _ = resolve(["--analysis.interval=2s", *(f"--collector.{c.name}" for c in registry())])
    collectors = enabled_collectors(settings)
    checkpoints: list[Checkpoint] = []
    started = time.monotonic()

    class MeasuredSampler(Sampler):
        next_check = CHECK_EVERY

        def analyse_once(self, now=None):
            super().analyse_once(now)
            assert time.monotonic() - started < WALL_BUDGET, "soak over its wall-time budget"
            if now is None or now < self.next_check:
                return
            self.next_check += CHECK_EVERY
            gc.collect()
            families = list(GpuwaitCollector(self, collectors).collect())
            owner_family = [f for f in families if f.name == "gpuwait_gpu_owner_info"]
            owners = frozenset(s.labels["owner"] for f in owner_family for s in f.samples)
            rings = [s.ring for s in self.states.values() if s.ring is not None]
            checkpoints.append(Checkpoint(
                now, rss_bytes(), open_fds(),
                sum(r.width for r in rings), sum(len(r) for r in rings),
                sum(len(f.samples) for f in families), owners))

    monkeypatch.setattr(simulate_run, "Sampler", MeasuredSampler)
    simulate_run.run_virtual(get("healthy"), settings, SIMULATED_SECONDS, collectors)
    wall = time.monotonic() - started
    print(f"soak: {SIMULATED_SECONDS / 60:.0f} simulated minutes in {wall:.1f} s wall")
    for c in checkpoints:
        print(f"  t={c.t:6.0f}s rss={c.rss / 2**20:6.1f} MiB fds={c.fds} columns={c.ring_columns} "
              f"rows={c.ring_rows} series={c.series} owners={len(c.owners)}")

    assert checkpoints[-1].t >= 30 * 60
    # Owners came and went: far more over the run than at any one time.
    every_owner = frozenset().union(*(c.owners for c in checkpoints))
    assert len(every_owner) >= 80
    assert max(len(c.owners) for c in checkpoints) <= 8
    # After the first window (rings full) and the first owner turnover, nothing grows.
    settled = [c for c in checkpoints if c.t >= OWNER_LIFETIME + settings.analysis_window]
    first, rest = settled[0], settled[1:]
    assert max(c.fds for c in rest) <= first.fds
    assert max(c.ring_rows for c in rest) <= first.ring_rows
    assert max(c.ring_columns for c in rest) <= first.ring_columns + 16
    assert max(c.series for c in rest) <= first.series + 64
    assert max(c.rss for c in rest) - first.rss < 8 * 2**20, [c.rss for c in checkpoints]


@pytest.fixture(autouse=True)
def _quiet_simulated_logs(caplog):
    caplog.set_level("ERROR")
