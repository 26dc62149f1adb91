"""The collectors gpuwait has, in exposition order, and the table of every option they and
the exporter read. This is the one module of ``core`` that imports the collectors and the
verdict: listing them is its job."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from gpuwait.analysis import metrics as verdict
from gpuwait.collectors import cgroup, cpu, diskstats, gpu, nccl, netdev, nfs, pressure, rdma, workload
from gpuwait.core import config
from gpuwait.core.config import EXPORTER_OPTIONS, OptionTable, Settings
from gpuwait.core.plugin import CollectorSpec

COLLECTORS: tuple[CollectorSpec, ...] = (
    cpu.COLLECTOR, pressure.COLLECTOR, diskstats.COLLECTOR, netdev.COLLECTOR, nfs.COLLECTOR, rdma.COLLECTOR,
    gpu.COLLECTOR, cgroup.COLLECTOR, workload.COLLECTOR, nccl.COLLECTOR, verdict.COLLECTOR,
)

#: Every option: the exporter's own, then each collector's in registry order, and a
#: ``collector.<name>`` toggle per collector. A name declared twice fails here, at start.
TABLE = OptionTable(
    EXPORTER_OPTIONS + tuple(option for collector in COLLECTORS for option in collector.options),
    {collector.name: collector.default_enabled for collector in COLLECTORS},
)
#: The options other than the collector toggles, in --help order.
OPTIONS = TABLE.options
#: collector name -> enabled by default.
COLLECTOR_DEFAULTS = dict(TABLE.collectors)


def registry() -> tuple[CollectorSpec, ...]:
    """Every collector, in exposition order."""
    return COLLECTORS


def resolve(argv: Sequence[str] | None = None) -> tuple[Settings, argparse.Namespace]:
    """Defaults, then --config.file, then flags, over every option of the table."""
    return config.resolve(argv, TABLE)


def load_config_file(path: str) -> dict[str, Any]:
    return config.load_config_file(path, TABLE)


def build_parser(prog: str = "gpuwait-exporter") -> argparse.ArgumentParser:
    return config.build_parser(TABLE, prog)
