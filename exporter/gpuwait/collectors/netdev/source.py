"""Network interface traffic counters from /proc/net/dev (A9, A10)."""

from __future__ import annotations

from gpuwait.collectors.netdev.parse import parse_netdev
from gpuwait.core.config import Option, parse_regex
from gpuwait.core.device_lines import DeviceLinesSource

#: Loopback and container plumbing: a Kubernetes node has a veth/cali/lxc interface per pod,
#: which multiplies the series without saying anything about traffic leaving the node.
DEFAULT_DEVICE_EXCLUDE = r"^(lo|veth[0-9a-f]+|cali[0-9a-f]+|lxc[0-9a-f_]+|docker[0-9]+|cni[0-9]+|flannel\..*)$"

DEVICE_EXCLUDE = Option(
    "collector.netdev.device-exclude", parse_regex, parse_regex(DEFAULT_DEVICE_EXCLUDE),
    "Regular expression of network interface names the netdev collector leaves out.", "REGEX",
)


class NetdevSource(DeviceLinesSource):
    """Its Reading's data is a ``payload.NetDev``."""

    name = "netdev"
    tier = "fast"
    path_parts = ("net", "dev")
    parse = staticmethod(parse_netdev)
