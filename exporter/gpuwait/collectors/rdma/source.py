"""RDMA ports from /sys/class/infiniband: traffic for the window, health and identity beside it
(A9, A10, A11).

Two sources share the tree. ``rdma_traffic`` (fast tier) reads only the two data counters of
each port, so that NIC bursts can be lined up with GPU utilization dips at the sampling
interval; it keeps the list of ports and re-lists the devices every few seconds (or at once
when one vanishes), so a hot-plugged HCA is noticed without a directory walk per sample.
``rdma`` (slow tier) reads everything else: state, rate, link layer, the packet counters (of
which the window needs only the mean), every error and hardware counter, the RoCE netdev, the
PCI function and its NUMA node.

Every PMA counter read makes the kernel ask the HCA (``show_pma_counter`` sends a MAD to its
firmware, drivers/infiniband/core/sysfs.c), which is why the fast tier reads two files per
port and no more.

A host without RDMA devices (no /sys/class/infiniband, or an empty one) is no data, not a
failure: both sources keep looking on their schedule.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from gpuwait.collectors.rdma.parse import (
    DATA_WORD_BYTES,
    parse_counter,
    parse_name,
    parse_netdev_name,
    parse_numbered_state,
    parse_rate,
)
from gpuwait.collectors.rdma.payload import (
    PortTraffic,
    RdmaData,
    RdmaDeviceData,
    RdmaPortData,
    RdmaTrafficData,
)
from gpuwait.core.errors import NoData, ParseError, SourceError
from gpuwait.core import pseudofile
from gpuwait.core.reading import Reading
from gpuwait.core.source import HostPaths, Source
from gpuwait.core.topology import rdma_device_location

#: (file, field) of what the fast tier reads.
TRAFFIC_COUNTERS = (
    ("port_xmit_data", "transmit_bytes"),
    ("port_rcv_data", "receive_bytes"),
)
_TRAFFIC_FILES = frozenset(name for name, _ in TRAFFIC_COUNTERS)
#: Not a counter: how long (ms) the driver caches hw_counters between firmware queries.
HW_COUNTERS_NOT_COUNTERS = frozenset({"lifespan"})
#: Read errors that mean "this driver or port does not offer it", not a failure.
_UNSUPPORTED_ERRNOS = frozenset({errno.EINVAL, errno.EOPNOTSUPP, errno.ENODATA, errno.ENOSYS})
#: Kernels before RoCE (2.6.37) had no link_layer file: every port was InfiniBand.
LINK_LAYER_BEFORE_ROCE = "InfiniBand"

T = TypeVar("T")


class _Vanished(Exception):
    """The device went away while it was being read (hot unplug, driver unbind)."""


#: One sysfs attribute is at most a page (PAGE_SIZE, which sysfs_emit() never exceeds).
_ATTRIBUTE_BYTES = 4096


def _read(path: str, kept: pseudofile.KeptDescriptors | None = None) -> str:
    # Counters are queried from the HCA's firmware, which may not answer: a hung one costs
    # that file, not every port (see pseudofile.read_unless_hung).
    return pseudofile.read_unless_hung(path, _ATTRIBUTE_BYTES, kept)


_os_cause = pseudofile.os_cause


def _no_devices(root: str) -> NoData:
    return NoData(f"unavailable:{root}", "no RDMA device (ib_core not loaded, or no HCA)")


def _port_dirs(root: str, device: str) -> list[tuple[int, str]]:
    ports_dir = os.path.join(root, device, "ports")
    ports = []
    for name in os.listdir(ports_dir):
        if name.isascii() and name.isdigit():
            ports.append((int(name), os.path.join(ports_dir, name)))
    ports.sort()
    return ports


class _Once:
    """Causes worth one count and one log line, not one per sample (a port without PMA
    stays without PMA)."""

    def __init__(self) -> None:
        self._seen: set[str] = set()

    def __call__(self, cause: str, errors: list[str]) -> None:
        if cause not in self._seen:
            self._seen.add(cause)
            errors.append(cause)


@dataclass(slots=True)
class _PortHandle:
    device: str
    port: int
    link_layer: str
    device_dir: str
    files: tuple[str, ...]


class RdmaTrafficSource(Source):
    name = "rdma_traffic"
    tier = "fast"
    #: How often the device list is re-read to notice an added HCA.
    relist_seconds = 5.0

    def __init__(self, paths: HostPaths, relist_seconds: float | None = None) -> None:
        super().__init__(paths)
        self.root = paths.sys("class", "infiniband")
        if relist_seconds is not None:
            self.relist_seconds = relist_seconds
        self._handles: list[_PortHandle] = []
        #: RDMA devices at the last listing
        self._devices = 0
        self._next_relist = -1.0
        self._once = _Once()
        #: the traffic counters are read ten times a second: through descriptors kept open
        self._kept = pseudofile.KeptDescriptors()

    def close(self) -> None:
        self._kept.close()

    def _relist(self, errors: list[str]) -> list[_PortHandle]:
        try:
            devices = sorted(os.listdir(self.root))
        except FileNotFoundError:
            devices = []  # ib_core not loaded: no RDMA on this host, nothing is wrong
        except OSError as e:
            raise SourceError(_os_cause(self.root, e), str(e)) from None
        self._devices = len(devices)
        handles = []
        for device in devices:
            device_dir = os.path.join(self.root, device)
            try:
                ports = _port_dirs(self.root, device)
            except FileNotFoundError:
                continue  # went away while listing
            except OSError as e:
                errors.append(_os_cause(os.path.join(device_dir, "ports"), e))
                continue
            for port, port_dir in ports:
                counters_dir = os.path.join(port_dir, "counters")
                if not os.path.isdir(counters_dir):
                    # The kernel creates counters/ only for drivers with a PMA (not iWARP or
                    # EFA, which count in hw_counters, read by the slow tier) and only in the
                    # device's own network namespace: a container without the host's network
                    # sees the device without it.
                    if os.path.isdir(port_dir):
                        self._once(f"unavailable:{counters_dir}", errors)
                    continue
                link_layer = self._link_layer(port_dir, errors)
                files = tuple(os.path.join(counters_dir, name) for name, _ in TRAFFIC_COUNTERS)
                handles.append(_PortHandle(device, port, link_layer, device_dir, files))
        return handles

    def _link_layer(self, port_dir: str, errors: list[str]) -> str:
        path = os.path.join(port_dir, "link_layer")
        try:
            return parse_name(_read(path), "link_layer")
        except FileNotFoundError:
            return LINK_LAYER_BEFORE_ROCE if os.path.isdir(port_dir) else ""
        except OSError as e:
            errors.append(_os_cause(path, e))
        except ParseError:
            errors.append(f"parse:{path}")
        return "Unknown"

    def read(self) -> Reading:
        t = time.monotonic()
        errors: list[str] = []
        if t >= self._next_relist:
            self._handles = self._relist(errors)
            self._kept.retain(path for handle in self._handles for path in handle.files)
            self._next_relist = t + self.relist_seconds
        if not self._devices:
            raise _no_devices(self.root)
        ports = []
        vanished = False
        for handle in self._handles:
            values: list[int | None] = []
            for path in handle.files:
                try:
                    value = parse_counter(_read(path, self._kept))
                except FileNotFoundError:
                    if not os.path.isdir(handle.device_dir):
                        vanished = True
                        break
                    errors.append(f"missing:{path}")
                    value = None
                except OSError as e:
                    if e.errno in _UNSUPPORTED_ERRNOS:
                        self._once(f"unavailable:{os.path.dirname(path)}", errors)
                    else:
                        errors.append(_os_cause(path, e))
                    value = None
                except ParseError:
                    errors.append(f"parse:{path}")
                    value = None
                else:
                    if value is None:
                        self._once(f"unavailable:{os.path.dirname(path)}", errors)
                values.append(value)
            else:
                tx, rx = values
                ports.append(PortTraffic(
                    handle.device, handle.port, handle.link_layer,
                    tx * DATA_WORD_BYTES if tx is not None else None,
                    rx * DATA_WORD_BYTES if rx is not None else None,
                ))
        if vanished:
            self._next_relist = t  # drop it from the list at the next sample, not seconds later
        return self.reading(t, RdmaTrafficData(tuple(ports)), tuple(errors))


class RdmaSource(Source):
    name = "rdma"
    tier = "slow"

    def __init__(self, paths: HostPaths) -> None:
        super().__init__(paths)
        self.root = paths.sys("class", "infiniband")
        self._once = _Once()

    def read(self) -> Reading:
        t = time.monotonic()
        errors: list[str] = []
        try:
            names = sorted(os.listdir(self.root))
        except FileNotFoundError:
            names = []
        except OSError as e:
            raise SourceError(_os_cause(self.root, e), str(e)) from None
        if not names:
            raise _no_devices(self.root)
        devices = []
        for name in names:
            try:
                devices.append(self._device(name, errors))
            except _Vanished:
                continue
        return self.reading(t, RdmaData(tuple(devices)), tuple(errors))

    # -- helpers that tell a vanished device from a broken file ----------------------------
    def _get(self, device_dir: str, path: str, parse: Callable[[str], T], errors: list[str], optional: bool = False) -> T | None:
        """Parsed content of ``path``; None (with a cause unless ``optional``) when it fails."""
        try:
            return parse(_read(path))
        except FileNotFoundError:
            if not os.path.isdir(device_dir):
                raise _Vanished from None
            if not optional:
                errors.append(f"missing:{path}")
        except OSError as e:
            if e.errno in _UNSUPPORTED_ERRNOS:
                if not optional:
                    self._once(f"unavailable:{path}", errors)
            else:
                errors.append(_os_cause(path, e))
        except ParseError:
            errors.append(f"parse:{path}")
        return None

    def _list(self, device_dir: str, path: str, errors: list[str]) -> list[str]:
        try:
            return sorted(os.listdir(path))
        except FileNotFoundError:
            if not os.path.isdir(device_dir):
                raise _Vanished from None
            return []
        except OSError as e:
            errors.append(_os_cause(path, e))
            return []

    def _device(self, name: str, errors: list[str]) -> RdmaDeviceData:
        device_dir = os.path.join(self.root, name)
        if not os.path.isdir(device_dir):
            raise _Vanished
        location = rdma_device_location(self.paths, name)

        def info(attr: str) -> str:
            return self._get(device_dir, os.path.join(device_dir, attr), lambda s: parse_name(s, attr), errors, optional=True) or ""

        try:
            port_dirs = _port_dirs(self.root, name)
        except FileNotFoundError:
            if not os.path.isdir(device_dir):
                raise _Vanished from None
            port_dirs = []
        except OSError as e:
            errors.append(_os_cause(os.path.join(device_dir, "ports"), e))
            port_dirs = []
        ports = tuple(self._port(device_dir, port, port_dir, location.sysfs_pci_path, errors) for port, port_dir in port_dirs)
        return RdmaDeviceData(
            device=name,
            pci_address=location.pci_address,
            numa_node=location.numa_node,
            node_guid=info("node_guid"),
            firmware_version=info("fw_ver"),
            hca_type=info("hca_type"),
            board_id=info("board_id"),
            ports=ports,
        )

    def _port(self, device_dir: str, port: int, port_dir: str, pci_path: str, errors: list[str]) -> RdmaPortData:
        link_layer = self._get(device_dir, os.path.join(port_dir, "link_layer"), lambda s: parse_name(s, "link_layer"), errors, optional=True)
        if link_layer is None:
            link_layer = LINK_LAYER_BEFORE_ROCE if not os.path.exists(os.path.join(port_dir, "link_layer")) else "Unknown"
        state = self._get(device_dir, os.path.join(port_dir, "state"), parse_numbered_state, errors)
        phys = self._get(device_dir, os.path.join(port_dir, "phys_state"), parse_numbered_state, errors)
        rate = self._get(device_dir, os.path.join(port_dir, "rate"), parse_rate, errors)
        counters = self._counters(device_dir, os.path.join(port_dir, "counters"), _TRAFFIC_FILES, errors)
        hw_counters = self._counters(device_dir, os.path.join(port_dir, "hw_counters"), HW_COUNTERS_NOT_COUNTERS, errors)
        return RdmaPortData(
            port=port,
            link_layer=link_layer,
            netdev=self._netdev(device_dir, port, port_dir, pci_path),
            state=state.value if state else None,
            state_name=state.name if state else "",
            physical_state=phys.value if phys else None,
            physical_state_name=phys.name if phys else "",
            rate_bytes_per_second=rate.bytes_per_second if rate else None,
            link_width=f"{rate.width}X" if rate else "",
            link_speed=rate.speed if rate else "",
            counters=counters,
            hw_counters=hw_counters,
        )

    def _counters(self, device_dir: str, directory: str, skip: frozenset[str], errors: list[str]) -> dict[str, int]:
        values: dict[str, int] = {}
        unavailable = False
        for name in self._list(device_dir, directory, errors):
            if name in skip:
                continue
            path = os.path.join(directory, name)
            try:
                value = parse_counter(_read(path))
            except IsADirectoryError:
                continue
            except FileNotFoundError:
                if not os.path.isdir(device_dir):
                    raise _Vanished from None
                continue  # listed, then gone: the driver re-created its counter set
            except OSError as e:
                if e.errno in _UNSUPPORTED_ERRNOS:
                    unavailable = True
                else:
                    errors.append(_os_cause(path, e))
                continue
            except ParseError:
                errors.append(f"parse:{path}")
                continue
            if value is None:
                unavailable = True
            else:
                values[name] = value
        if unavailable:
            self._once(f"unavailable:{directory}", errors)
        return values

    def _netdev(self, device_dir: str, port: int, port_dir: str, pci_path: str) -> str:
        # GID 0 is the port's default GID; on RoCE it belongs to the netdev that carries the
        # traffic (the bond for a LAG device). IB ports have no netdev there: the read fails.
        gid_netdev = self._get(device_dir, os.path.join(port_dir, "gid_attrs", "ndevs", "0"), parse_netdev_name, [], optional=True)
        if gid_netdev:
            return gid_netdev
        if not pci_path:
            return ""
        net_dir = os.path.join(pci_path, "net")
        try:
            candidates = os.listdir(net_dir)
        except OSError:
            return ""
        matching = []
        for name in candidates:
            try:
                dev_port = int(_read(os.path.join(net_dir, name, "dev_port")).strip())
            except (OSError, ValueError):
                dev_port = None
            # dev_port is 0-based; a netdev without it belongs to a single-port function.
            if dev_port is None or dev_port == port - 1:
                matching.append(name)
        # Shortest first: the parent before its VLAN or IPoIB child interfaces (ib0 before ib0.8001).
        matching.sort(key=lambda n: (len(n), n))
        return matching[0] if matching else ""
