"""Where PCI devices sit relative to each other: the GPU-NIC affinity of A10.

A GPU's traffic to a NIC crosses whatever lies between them in the PCIe tree. The relation is
named as ``nvidia-smi topo -m`` names it:

* ``PIX``: through at most one PCIe switch (or bridge), without crossing the root port;
* ``PXB``: through several switches, still below one root port;
* ``PHB``: through the PCIe host bridge (the CPU's root complex) both hang off;
* ``NODE``: between two host bridges of the same NUMA node;
* ``SYS``: across the link between NUMA nodes (sockets).

The tree comes from the device's resolved sysfs path, e.g.
``/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:01.0/0000:19:00.0``: the host bridge
(``pci0000:15``), the root port, a switch's upstream and downstream ports, the device. The ports
of one switch are counted as a single switch, as nvidia-smi and NCCL do: two devices on two
downstream ports of one switch are PIX, not "three bridges".

Paths are compared as found: switches that present one chip as two levels (some Gen4/Gen5
parts) read as PXB where nvidia-smi, which knows the part, says PIX.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from gpuwait.core import pseudofile
from gpuwait.core.errors import ParseError
from gpuwait.core.source import HostPaths

PIX, PXB, PHB, NODE, SYS = "PIX", "PXB", "PHB", "NODE", "SYS"
#: From nearest to farthest; a relation's index orders GPU-NIC pairs by affinity.
RELATIONS = (PIX, PXB, PHB, NODE, SYS)
#: The kernel's numa_node when firmware did not say (or the kernel has no NUMA).
UNKNOWN_NUMA_NODE = -1

_HEX = frozenset("0123456789abcdef")


def normalize_pci_address(address: str) -> str:
    """The sysfs spelling ``dddd:bb:dd.f`` of a PCI address.

    NVML writes an 8-digit domain (``00000000:17:00.0``), sometimes in upper case; lspci
    leaves out domain 0 (``17:00.0``). Domains above 0xffff (VMD) keep their digits.
    """
    text = address.strip().lower()
    parts = text.split(":")
    if len(parts) == 2:
        parts.insert(0, "0")
    if len(parts) != 3:
        raise ParseError(f"not a PCI address: {address[:40]!r}")
    domain, bus, devfn = parts
    device, dot, function = devfn.partition(".")
    fields = (domain, bus, device, function)
    if not dot or any(not f or not set(f) <= _HEX for f in fields):
        raise ParseError(f"not a PCI address: {address[:40]!r}")
    if len(domain) > 8 or len(bus) > 2 or len(device) > 2 or len(function) > 1:
        raise ParseError(f"PCI address field too wide: {address[:40]!r}")
    dom, b, d, f = (int(x, 16) for x in fields)
    if d > 0x1F or f > 7:
        raise ParseError(f"PCI device or function out of range: {address[:40]!r}")
    return f"{dom:04x}:{b:02x}:{d:02x}.{f:x}"


def _is_host_bridge(component: str) -> bool:
    # "pci0000:15": the directory of a PCI root bus under /sys/devices.
    if not component.startswith("pci"):
        return False
    domain, sep, bus = component[3:].partition(":")
    return bool(sep) and len(domain) >= 4 and len(bus) == 2 and set(domain + bus) <= _HEX


def pci_chain(sysfs_path: str) -> tuple[str, ...]:
    """(host bridge, root port, ..., device) from a resolved sysfs device path; () if the
    path is not below a PCI host bridge (a virtual device such as rxe or siw)."""
    parts = [p for p in sysfs_path.split("/") if p]
    for i, part in enumerate(parts):
        if _is_host_bridge(part):
            return tuple(parts[i:])
    return ()


def parse_numa_node(text: str) -> int:
    """A device's numa_node file; -1 means not known."""
    value = text.strip()
    body = value[1:] if value.startswith("-") else value
    if not (body.isascii() and body.isdigit()) or len(body) > 5:
        raise ParseError(f"numa_node is not an integer: {value[:20]!r}")
    node = int(value)
    return node if node >= 0 else UNKNOWN_NUMA_NODE


def parse_node_list(text: str) -> tuple[int, ...]:
    """A node (or cpu) list file such as /sys/devices/system/node/online: ``0``, ``0-1``, ``0,2-3``."""
    nodes: list[int] = []
    value = text.strip()
    if not value:
        return ()
    for item in value.split(","):
        lo, dash, hi = item.partition("-")
        for bound in (lo, hi) if dash else (lo,):
            if not (bound.isascii() and bound.isdigit()) or len(bound) > 5:
                raise ParseError(f"not a node list: {value[:40]!r}")
        first, last = int(lo), int(hi) if dash else int(lo)
        if last < first:
            raise ParseError(f"descending range in node list: {item!r}")
        nodes.extend(range(first, last + 1))
    return tuple(nodes)


def classify(
    chain_a: tuple[str, ...], numa_a: int, chain_b: tuple[str, ...], numa_b: int, *, single_numa_node: bool = False
) -> str | None:
    """The relation of two devices, or None when it cannot be told.

    ``chain_*`` come from :func:`pci_chain`. Under different host bridges only the NUMA nodes
    can tell NODE from SYS: with either unknown the answer is None, unless the machine has a
    single NUMA node (then it is NODE).
    """
    if not chain_a or not chain_b:
        return None
    if chain_a[0] != chain_b[0]:
        if numa_a >= 0 and numa_b >= 0:
            return NODE if numa_a == numa_b else SYS
        return NODE if single_numa_node else None
    above_a, above_b = chain_a[1:-1], chain_b[1:-1]
    if not above_a or not above_b or above_a[0] != above_b[0]:
        # Different root ports (or a device on the root bus itself): through the host bridge.
        return PHB
    common = 0
    for x, y in zip(above_a, above_b):
        if x != y:
            break
        common += 1
    # Bridges each device has below the shared ancestor: one is the downstream port of the
    # shared switch; a second means another switch on that side.
    if len(above_a) - common <= 1 and len(above_b) - common <= 1:
        return PIX
    return PXB


# -- tiny sysfs readers ---------------------------------------------------------------------

def _read_small(path: str) -> str | None:
    try:
        return pseudofile.read(path, 4096)
    except OSError:
        return None


def read_numa_node(device_path: str) -> int:
    """numa_node of a sysfs device directory; -1 when absent, unreadable or garbled."""
    text = _read_small(os.path.join(device_path, "numa_node"))
    if text is None:
        return UNKNOWN_NUMA_NODE
    try:
        return parse_numa_node(text)
    except ParseError:
        return UNKNOWN_NUMA_NODE


def pci_device_path(paths: HostPaths, address: str) -> str | None:
    """Resolved sysfs directory of a PCI device (any address spelling), None if not present."""
    try:
        bdf = normalize_pci_address(address)
    except ParseError:
        return None
    link = paths.sys("bus", "pci", "devices", bdf)
    if not os.path.exists(link):
        return None
    return os.path.realpath(link)


def single_numa_node(paths: HostPaths) -> bool:
    """True when the machine has exactly one NUMA node online (unknown numa_node then means it)."""
    text = _read_small(paths.sys("devices", "system", "node", "online"))
    if text is None:
        return False
    try:
        return len(parse_node_list(text)) == 1
    except ParseError:
        return False


class PciLocation(NamedTuple):
    pci_address: str
    numa_node: int
    sysfs_path: str

    @property
    def chain(self) -> tuple[str, ...]:
        return pci_chain(self.sysfs_path)


def locate(paths: HostPaths, address: str) -> PciLocation | None:
    """A PCI device's place in the tree (e.g. a GPU from its NVML bus id)."""
    path = pci_device_path(paths, address)
    if path is None:
        return None
    return PciLocation(os.path.basename(path), read_numa_node(path), path)


class RdmaDevice(NamedTuple):
    device: str
    pci_address: str
    numa_node: int
    sysfs_pci_path: str

    @property
    def chain(self) -> tuple[str, ...]:
        return pci_chain(self.sysfs_pci_path)


def relation(a: PciLocation | RdmaDevice, b: PciLocation | RdmaDevice, *, single_numa_node: bool = False) -> str | None:
    """E.g. ``relation(locate(paths, nvml_bus_id), rdma_device)``."""
    return classify(a.chain, a.numa_node, b.chain, b.numa_node, single_numa_node=single_numa_node)


def rdma_device_location(paths: HostPaths, device: str) -> RdmaDevice:
    """The PCI function behind an RDMA device; pci_address and path are "" for virtual devices."""
    link = paths.sys("class", "infiniband", device, "device")
    if not os.path.exists(link):
        return RdmaDevice(device, "", UNKNOWN_NUMA_NODE, "")
    path = os.path.realpath(link)
    try:
        address = normalize_pci_address(os.path.basename(path))
    except ParseError:
        address = ""
    if not address:
        return RdmaDevice(device, "", UNKNOWN_NUMA_NODE, "")
    return RdmaDevice(device, address, read_numa_node(path), path)


def rdma_devices(paths: HostPaths) -> list[RdmaDevice]:
    """Every RDMA device with its PCI function, sorted by name; [] without RDMA."""
    try:
        names = sorted(os.listdir(paths.sys("class", "infiniband")))
    except OSError:
        return []
    return [rdma_device_location(paths, name) for name in names]
