"""Record a simulated incident, replay the trace: the same verdicts, the same figures."""

import pytest

from gpuwait.cli import payload_types
from gpuwait.core.registry import registry
from gpuwait.core.sampler import Sampler
from gpuwait.simulate.model import SCENARIOS
from gpuwait.simulate.run import run_virtual
from gpuwait.simulate.table import default_settings
from gpuwait.trace.file import TraceReader, TraceWriter
from gpuwait.trace.replay import ReplayedSource, Replayer


@pytest.mark.parametrize("name", ["network_allreduce_roce", "straggler", "storage"])
def test_replayed_trace_gives_identical_verdicts(tmp_path, name):
    settings = default_settings()
    path = tmp_path / f"{name}.jsonl.gz"
    writer = TraceWriter(str(path))
    live = run_virtual(SCENARIOS[name], settings, 30.0, observers=[writer.write])
    writer.close()

    collectors = list(registry())
    replayed = Sampler(collectors, settings, make_source=lambda spec, _s: ReplayedSource(spec.name, spec.tier or "fast"))
    replayer = Replayer(replayed, TraceReader(str(path), payload_types(collectors)), speed=0)
    replayer.run()
    assert replayer.error is None

    a, b = live.analyses["verdict"], replayed.analyses["verdict"]
    assert b.verdict == a.verdict
    assert [(g.index, g.verdict, g.straggler) for g in b.gpus] == [(g.index, g.verdict, g.straggler) for g in a.gpus]
    for ga, gb in zip(a.gpus, b.gpus):
        assert gb.attribution.wait_ratio == pytest.approx(ga.attribution.wait_ratio, abs=0.02)
        if ga.dip_period_seconds is not None:
            assert gb.dip_period_seconds == pytest.approx(ga.dip_period_seconds, rel=0.02)
