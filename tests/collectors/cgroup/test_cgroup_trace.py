"""The owner cgroup payload in the trace format: a real reading of the fixture host encodes and
decodes to itself, and readings recorded live replay to the same window statistics."""

from __future__ import annotations

import shutil
import time

import pytest

from cgroup_owners import GPU_CONTAINER, JOB, POD, POD_PATH, fixture_owners, host_paths, source_with
from conftest import HOST_TREE
from gpuwait.cli import payload_types
from gpuwait.collectors.cgroup import COLLECTOR as CGROUP
from gpuwait.collectors.cgroup.payload import OwnerCgroupData
from gpuwait.core.registry import registry, resolve
from gpuwait.core.sampler import Sampler
from gpuwait.owners.cgroup import HOST as HOST_OWNER
from gpuwait.trace.codec import from_jsonable, to_jsonable
from gpuwait.trace.file import TraceReader, TraceWriter
from gpuwait.trace.replay import Replayer, ReplayedSource

GPU_CTR = f"{POD_PATH}/{GPU_CONTAINER}"


def test_a_reading_survives_the_trace_format():
    paths = host_paths()
    data = source_with(paths, [*fixture_owners(paths), HOST_OWNER]).read().data
    assert from_jsonable(OwnerCgroupData, to_jsonable(data)) == data
    assert from_jsonable(OwnerCgroupData, {"owners": {}}) == OwnerCgroupData({})


def test_recorded_readings_replay_to_the_live_statistics(tmp_path):
    """The GPU container's cpu.stat advanced between reads as the kernel would under its quota
    (10 periods a read, 6 throttled); the replay of the recording gives the same statistics."""
    sysfs = tmp_path / "sys"
    shutil.copytree(HOST_TREE / "sys", sysfs, symlinks=True)
    stat = sysfs / "fs/cgroup" / GPU_CTR.lstrip("/") / "cpu.stat"
    paths = host_paths(sysfs)
    cfg = resolve(["--analysis.window=30s"])[0]
    live = Sampler([CGROUP], cfg, make_source=lambda spec, s: source_with(paths, fixture_owners(paths)))
    state = live.states["owner_cgroup"]
    path = tmp_path / "t.jsonl.gz"
    writer = TraceWriter(str(path))
    taken = []
    live.observers += [writer.write, taken.append]
    for step in range(6):
        periods = 10 * step
        stat.write_text(f"usage_usec {periods * 20000}\nuser_usec {periods * 20000}\nsystem_usec 0\n"
                        f"nr_periods {periods}\nnr_throttled {periods * 6 // 10}\nthrottled_usec {periods * 48000}\n")
        live.sample_once(state)
        time.sleep(0.02)
    writer.close()
    live.analyse_once()
    live.summarize_due()
    stats = live.states["owner_cgroup"].stats
    assert stats.owners[POD].throttled_ratio == pytest.approx(0.6)
    assert set(stats.owners) == {POD, JOB}

    reader = TraceReader(str(path), payload_types(registry()))
    assert reader.header.version == 2
    back = list(reader)
    assert [r.data for r in back] == [r.data for r in taken]
    replayed = Sampler([CGROUP], cfg, make_source=lambda spec, s: ReplayedSource(spec.name, "slow"))
    replayer = Replayer(replayed, TraceReader(str(path), payload_types(registry())), speed=0)
    replayer.run()
    assert replayer.error is None and replayer.readings == 6
    replayed.analyse_once(now=back[-1].t + 0.01)
    replayed.summarize_due()
    again = replayed.states["owner_cgroup"].stats
    assert again.owners.keys() == stats.owners.keys()
    for owner, window in stats.owners.items():
        assert again.owners[owner].throttled_ratio == pytest.approx(window.throttled_ratio)
        assert again.owners[owner].usage_cores == pytest.approx(window.usage_cores, rel=1e-3)
    live.stop(0)
