import gzip
import json
import threading

import pytest

from gpuwait.core.config import Settings
from gpuwait.core.registry import resolve
from gpuwait.collectors import cpu as cpu_exposition
from gpuwait.core.reading import Reading
from gpuwait.core.sampler import Sampler
from gpuwait.collectors.cpu.payload import CpuData
from gpuwait.trace.file import TraceError, TraceReader, TraceWriter
from gpuwait.trace.replay import Replayer, ReplayedSource

PAYLOADS = {"cpu": CpuData}


def cpu_reading(t, busy, idle=0.0):
    return Reading("cpu", t, CpuData({"0": {"user": busy, "idle": idle}}, 2, 0))


def write_trace(path, readings):
    writer = TraceWriter(str(path))
    for r in readings:
        writer.write(r)
    writer.close()


def settings(**overrides) -> Settings:
    base, _ = resolve([])
    values = dict(base.values)
    values.update(overrides)
    return Settings(values)


@pytest.mark.parametrize("name", ["trace.jsonl.gz", "trace.jsonl"])
def test_round_trip_keeps_payloads_and_relative_time(tmp_path, name):
    path = tmp_path / name
    readings = [cpu_reading(1000.0 + i * 0.1, busy=float(i), idle=float(100 - i)) for i in range(5)]
    write_trace(path, readings)
    reader = TraceReader(str(path), PAYLOADS)
    assert reader.header.version == 2
    back = list(reader)
    assert [r.data for r in back] == [r.data for r in readings]
    assert [r.t for r in back] == pytest.approx([i * 0.1 for i in range(5)])


def test_readings_finished_out_of_order_stay_after_the_recording_start(tmp_path):
    # Each source's thread writes when its read is done: a slow read taken first is written
    # after a quick one taken later, and t counts from when the recording started.
    path = tmp_path / "t.jsonl.gz"
    writer = TraceWriter(str(path), origin=1000.0)
    for source, t in (("slow", 1000.3), ("quick", 1000.1), ("quick", 1000.2)):
        writer.write(Reading(source, t, CpuData({"0": {"user": 1.0, "idle": 0.0}}, 2, 0)))
    writer.close()
    back = TraceReader(str(path), {"slow": CpuData, "quick": CpuData})
    assert [(r.source, r.t) for r in back] == [("slow", pytest.approx(0.3)), ("quick", pytest.approx(0.1)),
                                                ("quick", pytest.approx(0.2))]


def test_replay_gives_the_same_window_stats_as_live(tmp_path):
    """The replay path is the live path: the same readings give the same statistics."""
    cfg = settings(**{"analysis.window": 10.0, "analysis.interval": 1.0})
    readings = [cpu_reading(50.0 + i * 0.1, busy=i * 0.1 * (0.5 if i < 30 else 1.0), idle=i * 0.05) for i in range(60)]
    live = Sampler([cpu_exposition.COLLECTOR], cfg, make_source=lambda spec, s: ReplayedSource(spec.name, "fast"))
    for r in readings:
        live.ingest(live.states["cpu"], r)
    live.analyse_once(now=readings[-1].t + 0.5)
    live.summarize_due()

    path = tmp_path / "t.jsonl.gz"
    write_trace(path, readings)
    replayed = Sampler([cpu_exposition.COLLECTOR], cfg, make_source=lambda spec, s: ReplayedSource(spec.name, "fast"))
    replayer = Replayer(replayed, TraceReader(str(path), PAYLOADS), speed=0)
    replayer.run(threading.Event())
    replayed.summarize_due()
    assert replayer.error is None
    assert replayer.readings == 60
    assert replayed.states["cpu"].stats.busy_ratio == pytest.approx(live.states["cpu"].stats.busy_ratio)
    assert replayed.analysis_runs >= 6  # analysed on the trace's own clock, once per second


def _lines(path, lines):
    path.write_text("".join(line + "\n" for line in lines))


HEADER = json.dumps({"format": "gpuwait-trace", "version": 1})
GOOD = json.dumps({"t": 0.0, "source": "cpu", "data": {"cores": {}, "procs_running": None, "procs_blocked": None}})


@pytest.mark.parametrize(
    "lines,message",
    [
        ([], "empty trace"),
        (['{"format": "other"}'], ":1: not a gpuwait trace"),
        ([json.dumps({"format": "gpuwait-trace", "version": 7})], ":1: trace version 7"),
        ([HEADER, "{nope"], ":2: not valid JSON"),
        ([HEADER, GOOD, json.dumps({"t": 1, "source": "gpux", "data": {}})], ":3: unknown source 'gpux'"),
        ([HEADER, json.dumps({"t": -1, "source": "cpu", "data": {}})], ":2: \"t\" must be"),
        ([HEADER, json.dumps({"t": 1, "source": "cpu", "data": {"cores": {}}})], ":2: data: missing field 'procs_running'"),
        ([HEADER, json.dumps({"t": 1, "source": "cpu", "data": {}, "extra": 1})], ":2: unknown key"),
        ([HEADER, json.dumps({"t": 2, "source": "cpu", "data": json.loads(GOOD)["data"]}), GOOD], ":3: \"t\" goes backwards"),
    ],
)
def test_bad_traces_name_the_line(tmp_path, lines, message):
    path = tmp_path / "bad.jsonl"
    _lines(path, lines)
    with pytest.raises(TraceError, match=message.replace("(", r"\(")):
        list(TraceReader(str(path), PAYLOADS))


def test_truncated_gzip_names_the_line(tmp_path):
    path = tmp_path / "t.jsonl.gz"
    write_trace(path, [cpu_reading(i * 0.1, float(i)) for i in range(2000)])
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    reader = TraceReader(str(path), PAYLOADS)
    with pytest.raises(TraceError, match=r"t\.jsonl\.gz:\d+: (truncated|not valid JSON)"):
        list(reader)


def test_truncated_last_line_is_reported(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(HEADER + "\n" + GOOD + "\n" + GOOD[:20])
    with pytest.raises(TraceError, match=":3: truncated line"):
        list(TraceReader(str(path), PAYLOADS))


@pytest.mark.parametrize("version", [1, 2])
def test_hand_written_trace_replays(tmp_path, version):
    """The documented format is enough to write a trace by hand, of either version."""
    path = tmp_path / "hand.jsonl"
    lines = [json.dumps({"format": "gpuwait-trace", "version": version})]
    for i in range(30):
        data = {"cores": {"0": {"user": i * 0.1, "idle": 0.0}}, "procs_running": 1, "procs_blocked": 0}
        lines.append(json.dumps({"t": i * 0.1, "source": "cpu", "data": data}))
    _lines(path, lines)
    with gzip.open(tmp_path / "hand.jsonl.gz", "wt") as f:
        f.write("\n".join(lines) + "\n")
    for p in (path, tmp_path / "hand.jsonl.gz"):
        sampler = Sampler([cpu_exposition.COLLECTOR], settings(), make_source=lambda spec, s: ReplayedSource(spec.name, "fast"))
        replayer = Replayer(sampler, TraceReader(str(p), PAYLOADS), speed=0)
        replayer.run()
        sampler.summarize_due()
        assert replayer.error is None
        assert sampler.states["cpu"].stats.busy_ratio == {"0": pytest.approx(1.0)}


def test_a_version_1_trace_replays_as_before_through_every_collector(tmp_path):
    """A trace recorded before the owner_cgroup source (version 1, without its lines) replays
    through the whole registry with the same window statistics and verdicts as the version-2
    recording of the same run; only the owner cgroup series are missing."""
    from gpuwait.diagnose import from_trace
    from gpuwait.simulate.model import get
    from gpuwait.simulate.run import run_virtual
    from gpuwait.simulate.table import default_settings

    v2 = tmp_path / "v2.jsonl"
    writer = TraceWriter(str(v2))
    run_virtual(get("data_pipeline"), default_settings(), 30.0, observers=[writer.write])
    writer.close()
    header, *records = v2.read_text().splitlines()
    header = json.loads(header)
    assert header["version"] == 2
    v1 = tmp_path / "v1.jsonl"
    _lines(v1, [json.dumps({**header, "version": 1}), *(r for r in records if json.loads(r)["source"] != "owner_cgroup")])
    old, new = from_trace(str(v1)), from_trace(str(v2))
    assert "gpuwait_owner_cpu_window_usage_cores" in new and not any(name.startswith("gpuwait_owner_") for name in old)
    assert "gpuwait_gpu_verdict" in old
    assert {name: series for name, series in new.items() if not name.startswith("gpuwait_owner_")} == old
