"""The nccl source's readings in a trace: recorded live, replayed to the same statistics; and
a version 1 trace, which has no nccl source, replayed by every collector as before."""

from __future__ import annotations

import json
import time

import pytest

from fixture_host import inspector_line
from gpuwait.cli import payload_types
from gpuwait.collectors.nccl import COLLECTOR as NCCL
from gpuwait.collectors.nccl import window
from gpuwait.collectors.nccl.payload import NcclData
from gpuwait.core.registry import registry, resolve
from gpuwait.core.sampler import Sampler
from gpuwait.trace.file import TraceReader, TraceWriter
from gpuwait.trace.replay import Replayer, ReplayedSource


def settings(*args):
    return resolve(["--analysis.window=30s", *args])[0]


def test_recorded_readings_replay_to_the_live_statistics(tmp_path):
    dump = tmp_path / "dump"
    dump.mkdir()
    path = dump / "hgx-a17-pid4242.log"
    cfg = settings(f"--collector.nccl.dump-dir={dump}")
    live = Sampler([NCCL], cfg)
    state = live.states["nccl"]
    writer = TraceWriter(str(tmp_path / "t.jsonl.gz"))
    taken = []
    live.observers += [writer.write, taken.append]
    seq = 0
    for step in range(6):
        with open(path, "a") as f:
            for _ in range(10 + step):
                f.write(inspector_line(seq, time.time(), exec_us=1000 + 100 * step))
                seq += 1
        live.sample_once(state)
        time.sleep(0.05)
    writer.close()
    live.analyse_once()
    live.summarize_due()
    ((key, stat),) = live.states["nccl"].stats.ranks.items()
    assert stat.operations == sum(range(11, 16))
    # the file's own ranks in the payload survive the trace format field by field
    reader = TraceReader(str(tmp_path / "t.jsonl.gz"), payload_types(registry()))
    assert reader.header.version == 2
    back = list(reader)
    assert [r.data for r in back] == [r.data for r in taken]
    assert back[-1].data.ranks[0].collectives == 15
    replayed = Sampler([NCCL], cfg, make_source=lambda spec, s: ReplayedSource(spec.name, "slow"))
    replayer = Replayer(replayed, TraceReader(str(tmp_path / "t.jsonl.gz"), payload_types(registry())), speed=0)
    replayer.run()
    assert replayer.error is None and replayer.readings == 6
    replayed.analyse_once(now=back[-1].t + 0.01)
    replayed.summarize_due()
    again = replayed.states["nccl"].stats.ranks[key]
    assert again.operations == stat.operations
    assert again.exec_seconds == pytest.approx(stat.exec_seconds)
    assert again.bus_bytes_per_second == pytest.approx(stat.bus_bytes_per_second)
    # the age of the latest operation is the same on the trace's clock as it was live
    (live_rank,) = window.ranks(live.states["nccl"].ring.view())
    (replayed_rank,) = window.ranks(replayed.states["nccl"].ring.view())
    assert 0.0 <= window.seconds_since_completion(replayed_rank) < 5.0
    assert window.seconds_since_completion(replayed_rank) == pytest.approx(window.seconds_since_completion(live_rank))
    live.stop(0)


def test_a_version_1_trace_replays_with_every_collector(tmp_path):
    path = tmp_path / "v1.jsonl"
    lines = [json.dumps({"format": "gpuwait-trace", "version": 1, "meta": {"gpuwait_version": "0.1.0"}})]
    for i in range(40):
        data = {"cores": {"0": {"user": i * 0.05, "idle": i * 0.05}}, "procs_running": 1, "procs_blocked": 0}
        lines.append(json.dumps({"t": i * 0.1, "source": "cpu", "data": data}))
    path.write_text("\n".join(lines) + "\n")
    collectors = list(registry())
    sampler = Sampler(collectors, settings(), make_source=lambda spec, s: ReplayedSource(spec.name, spec.tier or "fast"))
    reader = TraceReader(str(path), payload_types(collectors))
    assert reader.header.version == 1
    replayer = Replayer(sampler, reader, speed=0)
    replayer.run()
    sampler.summarize_due()
    assert replayer.error is None and replayer.readings == 40
    assert sampler.states["cpu"].stats.busy_ratio == {"0": pytest.approx(0.5)}
    assert sampler.states["nccl"].latest is None  # recorded before the source existed
    assert payload_types(collectors)["nccl"] is NcclData
