"""Running a scenario: live behind the exporter (``--simulate``), or in virtual time for tests
and for the scenario table, where a minute of node time takes a fraction of a second."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence

from gpuwait.core.config import ANALYSIS_INTERVAL, SIMULATE_PARAMS, SIMULATE_SCENARIO, Settings
from gpuwait.core.errors import NoData
from gpuwait.core.plugin import CollectorSpec, SourceSpec
from gpuwait.core.reading import Reading
from gpuwait.core.registry import registry
from gpuwait.core.sampler import Sampler
from gpuwait.core.source import Source
from gpuwait.simulate.model import Params, Scenario, get
from gpuwait.simulate.node import SimulatedNode


class SimulatedSource(Source):
    """A source whose files are a simulated node."""

    def __init__(self, node: SimulatedNode, name: str, tier: str) -> None:
        self.node = node
        self.name = name
        self.tier = tier

    def read(self) -> Reading:
        t = time.monotonic()
        return self.node.reading(self.name, t)


def parse_params(text: str) -> dict[str, float | int]:
    """'period=2,duty=0.4,target_gpu=5' -> checked Params fields."""
    fields = {f.name: f.type for f in dataclasses.fields(Params)}
    out: dict[str, float | int] = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in fields:
            raise ValueError(f"unknown scenario parameter {item!r}; known: {', '.join(sorted(fields))}")
        try:
            out[key] = int(value) if fields[key] in (int, "int") else float(value)
        except ValueError:
            raise ValueError(f"scenario parameter {key} is not a number: {value!r}") from None
    return out


def scenario_from_settings(settings: Settings) -> Scenario:
    scenario = get(settings[SIMULATE_SCENARIO])
    params = parse_params(settings[SIMULATE_PARAMS])
    return scenario.with_params(**params) if params else scenario


def live_sampler(scenario: Scenario, collectors: Sequence[CollectorSpec], settings: Settings) -> Sampler:
    node = SimulatedNode(scenario, time.monotonic())
    return Sampler(list(collectors), settings, make_source=lambda spec, _s: SimulatedSource(node, spec.name, _tier(spec)))


def _tier(spec: SourceSpec) -> str:
    if spec.tier:
        return spec.tier
    return "slow" if spec.name in ("rdma", "nfs", "gpu_device") else "fast"


def run_virtual(
    scenario: Scenario, settings: Settings, duration: float, collectors: Sequence[CollectorSpec] | None = None,
    observers: Sequence[Callable[[Reading], None]] = (),
) -> Sampler:
    """Run ``duration`` seconds of the scenario through the sampler's ingest path on a virtual
    clock, analysing every ``analysis.interval``; returns the sampler to inspect. Observers
    see every Reading, as a trace recorder does live."""
    collectors = list(collectors if collectors is not None else registry())
    node = SimulatedNode(scenario, 0.0)
    sampler = Sampler(collectors, settings, make_source=lambda spec, _s: SimulatedSource(node, spec.name, _tier(spec)))
    sampler.observers.extend(observers)
    fast, slow, every = settings.sample_interval, settings.slow_interval, settings[ANALYSIS_INTERVAL]
    due = {name: 0.0 for name in sampler.states}
    next_analysis = every
    steps = int(round(duration / fast))
    for k in range(steps + 1):
        t = k * fast
        for name, state in sampler.states.items():
            if t + 1e-9 >= due[name]:
                try:
                    reading, no_data = node.reading(name, t), None
                except NoData as e:
                    reading, no_data = None, e
                sampler.ingest(state, reading, started=t, no_data=no_data)
                due[name] = t + (slow if state.interval >= slow else fast)
        if t + 1e-9 >= next_analysis:
            sampler.analyse_once(now=t)
            next_analysis += every
    return sampler
