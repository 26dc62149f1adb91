"""Nodes the scenarios run on: a CPU count, GPUs of one model, disks, NICs and RDMA ports.

Device figures are typical datasheet numbers of their class, not of one product: a PCIe Gen4
data NVMe (~800k random-read IOPS, ~6.5 GB/s, ~90 us unloaded read latency), a smaller boot
NVMe, a SATA SSD; 25/100/200 GbE front-end NICs; InfiniBand NDR (400 Gb/s) and RoCE ports.
"""

from __future__ import annotations

from evaluation.model.node import Node

NVME_DATA = dict(read_iops=800e3, read_bandwidth=6.5e9, read_latency=90e-6,
                 write_iops=180e3, write_bandwidth=3.6e9, write_latency=30e-6)
NVME_BOOT = dict(read_iops=350e3, read_bandwidth=3.2e9, read_latency=100e-6,
                 write_iops=120e3, write_bandwidth=1.6e9, write_latency=40e-6)
SATA_SSD = dict(read_iops=90e3, read_bandwidth=0.53e9, read_latency=160e-6,
                write_iops=80e3, write_bandwidth=0.48e9, write_latency=70e-6)

GBE = 1e9 / 8  # bytes per second per Gb/s


def host(seed: int, hostname: str, cores: int, spec, gpus: int, *, frontend_gbps: float = 100.0,
         ports: tuple[str, float, int] | None = None, data_disks: int = 1, extra_nics: tuple[tuple[str, float], ...] = (),
         **gpu_kw) -> Node:
    """``ports``: (link layer, Gb/s, count) of the RDMA ports, one per GPU when count == gpus."""
    node = Node(hostname, cores, seed)
    node.add_disk("nvme0n1", 259, 0, **NVME_BOOT)
    for i in range(data_disks):
        node.add_disk(f"nvme{i + 1}n1", 259, 2 * (i + 1), **NVME_DATA)
    node.add_nic("eth0", frontend_gbps * GBE, mtu=9000, irq_core=cores - 1)
    for name, gbps in extra_nics:
        node.add_nic(name, gbps * GBE, mtu=1500, irq_core=cores - 2)
    if ports is not None:
        layer, gbps, count = ports
        node.add_ports(count, layer, gbps * GBE)
    node.add_gpus(spec, gpus, **gpu_kw)
    return node


def disk(node: Node, name: str):
    return next(d for d in node.disks if d.name == name)


def nic(node: Node, name: str):
    return next(n for n in node.nics if n.name == name)
