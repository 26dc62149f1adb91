"""Every source's payload survives the trace format: what a node records, a laptop replays."""

import pytest

from fixture_host import host_args
from gpuwait.core.registry import registry
from gpuwait.core.registry import resolve
from gpuwait.core.sampler import Sampler
from gpuwait.trace.codec import from_jsonable, to_jsonable

SPECS = [(c, s) for c in registry() for s in c.sources]


@pytest.mark.parametrize("collector,spec", SPECS, ids=[s.name for _, s in SPECS])
def test_payload_declared_and_round_trips(collector, spec):
    assert spec.payload is not None, f"source {spec.name} declares no payload class, so it cannot be replayed"
    settings, _ = resolve(host_args())
    sampler = Sampler([collector], settings)
    state = sampler.states[spec.name]
    reading = state.source.read()
    assert isinstance(reading.data, spec.payload)
    assert from_jsonable(spec.payload, to_jsonable(reading.data)) == reading.data
    sampler.stop(0)
