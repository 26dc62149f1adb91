"""Hostile trace files and record paths: each is refused with one line naming file and line."""

from __future__ import annotations

import json
import os
import threading

import pytest

from gpuwait.collectors import cpu as cpu_exposition
from gpuwait.collectors.cpu.payload import CpuData
from gpuwait.core.config import Settings
from gpuwait.core.reading import Reading
from gpuwait.core.registry import resolve
from gpuwait.core.sampler import Sampler
from gpuwait.trace import file as trace_file
from gpuwait.trace.codec import to_jsonable
from gpuwait.trace.file import TraceError, TraceReader, TraceWriter
from gpuwait.trace.replay import ReplayedSource, Replayer

PAYLOADS = {"cpu": CpuData}
HEADER = json.dumps({"format": "gpuwait-trace", "version": 2})


def cpu_line(t, user="0.5") -> str:
    return ('{"t": %s, "source": "cpu", "data": {"cores": {"0": {"user": %s, "idle": 0.0}}, '
            '"procs_running": 1, "procs_blocked": 0}}' % (t, user))


def write_lines(path, lines):
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.mark.parametrize(
    "line, message",
    [(cpu_line("1e300"), "beyond the magnitude"), (cpu_line("1e12"), '"t" must be a number of seconds from 0 to'),
     (cpu_line("NaN"), "NaN is not a number"),
     (cpu_line(0, "Infinity"), "Infinity is not a number"),
     (cpu_line(0, "1e999"), "beyond the magnitude"),
     (cpu_line(0, "1e300"), "beyond the magnitude"),
     (cpu_line(0, "1" + "0" * 4000), "beyond 64 bits"),
     ('{"t": 0, "source": "cpu", "data": {"cores": {}, "procs_running": 1%s, "procs_blocked": 0}}' % ("0" * 30),
      "beyond 64 bits"),
     ('{"t": 0, "source": "cpu", "data": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply")],
)
def test_hostile_values_name_file_and_line(tmp_path, line, message):
    path = write_lines(tmp_path / "bad.jsonl", [HEADER, cpu_line(0), line])
    with pytest.raises(TraceError) as err:
        list(TraceReader(path, PAYLOADS))
    assert str(err.value).startswith(f"{path}:3: ") and message in str(err.value), str(err.value)
    assert len(str(err.value)) < 400


def test_overlong_line_refused_before_it_is_decoded(tmp_path, monkeypatch):
    monkeypatch.setattr(trace_file, "MAX_LINE_CHARS", 1000)
    path = write_lines(tmp_path / "long.jsonl", [HEADER, cpu_line(0), cpu_line(1, "0." + "1" * 2000)])
    reader = TraceReader(path, PAYLOADS)
    with pytest.raises(TraceError, match=r"long\.jsonl:3: line longer than 1000 characters"):
        list(reader)


def test_line_limit_fits_a_large_host():
    cores = {str(i): {"user": 1e6, "nice": 1e6, "system": 1e6, "idle": 1e6, "iowait": 1e6, "irq": 1e6,
                      "softirq": 1e6, "steal": 1e6} for i in range(1024)}
    assert len(json.dumps({"t": 1.0, "source": "cpu", "data": {"cores": cores}})) * 20 < trace_file.MAX_LINE_CHARS


def replay(path, speed=0.0):
    base, _ = resolve([])
    sampler = Sampler([cpu_exposition.COLLECTOR], Settings(dict(base.values)),
                      make_source=lambda spec, s: ReplayedSource(spec.name, "fast"))
    replayer = Replayer(sampler, TraceReader(path, PAYLOADS), speed=speed)
    return sampler, replayer


def test_far_future_t_within_bounds_does_not_run_a_pass_per_interval(tmp_path):
    path = write_lines(tmp_path / "gap.jsonl", [HEADER, cpu_line(0), cpu_line(0.1), cpu_line("9e8"), cpu_line("9e8")])
    sampler, replayer = replay(path)
    replayer.run()
    assert replayer.error is None and replayer.readings == 4
    # Passes up to the end of the first readings' window, and one window before the far reading.
    assert sampler.analysis_runs < 200


def test_a_gap_keeps_the_passes_that_see_data(tmp_path):
    lines = [HEADER] + [cpu_line(i * 0.1, str(i * 0.1)) for i in range(20)] + [cpu_line(5000, "2.0"), cpu_line(5000.1, "2.1")]
    sampler, replayer = replay(write_lines(tmp_path / "gap.jsonl", lines))
    replayer.run()
    sampler.summarize_due()
    assert replayer.error is None
    assert sampler.states["cpu"].stats.busy_ratio == {"0": pytest.approx(1.0)}


def test_tiny_speed_waits_without_overflow_and_stops(tmp_path):
    path = write_lines(tmp_path / "slow.jsonl", [HEADER, cpu_line(0), cpu_line("9e8")])
    _, replayer = replay(path, speed=1e-300)
    stop = threading.Event()
    thread = threading.Thread(target=replayer.run, args=(stop,))
    thread.start()
    stop.set()
    thread.join(30)
    assert not thread.is_alive() and replayer.error is None


def test_stopped_replay_keeps_its_error_with_file_and_line(tmp_path):
    path = write_lines(tmp_path / "bad.jsonl", [HEADER, cpu_line(0), cpu_line(0, "NaN")])
    _, replayer = replay(path)
    replayer.run()
    assert replayer.finished.is_set()
    assert replayer.error.startswith(f"{path}:3: ")


def test_record_file_refuses_a_symlink_and_leaves_its_target(tmp_path):
    target = tmp_path / "precious"
    target.write_text("keep me")
    link = tmp_path / "trace.jsonl"
    os.symlink(target, link)
    with pytest.raises(OSError, match="symbolic link"):
        TraceWriter(str(link))
    assert target.read_text() == "keep me"


def test_record_file_refuses_a_fifo(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OSError):
        TraceWriter(str(fifo))


def test_record_file_truncates_a_regular_file(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("x" * 10_000)
    writer = TraceWriter(str(path))
    writer.write(Reading("cpu", 0.0, CpuData({"0": {"user": 1.0, "idle": 0.0}}, 1, 0)))
    writer.close()
    assert len(list(TraceReader(str(path), PAYLOADS))) == 1


def padded_reading(line_chars: int, t: float = 1.0) -> Reading:
    """A cpu Reading whose trace line, newline included, is exactly ``line_chars`` long."""
    def reading(pad: int) -> Reading:
        # A non-ASCII character is written escaped: the line's length counts the escape.
        return Reading("cpu", t, CpuData({"0": {"\u00e9" + "u" * pad: 1.0}}, 1, 0))

    def length(r: Reading) -> int:
        record = {"t": t, "source": "cpu", "data": to_jsonable(r.data)}
        return len(json.dumps(record, separators=(",", ":"))) + 1

    r = reading(line_chars - length(reading(0)))
    assert length(r) == line_chars
    return r


@pytest.mark.parametrize("name", ["t.jsonl", "t.jsonl.gz"])
def test_recorder_writes_only_lines_the_reader_takes(tmp_path, caplog, name):
    limit = trace_file.MAX_LINE_CHARS
    path = str(tmp_path / name)
    writer = TraceWriter(path, origin=0.0)
    writer.write(padded_reading(limit, t=1.0))
    with caplog.at_level("WARNING", logger="gpuwait.record"):
        writer.write(padded_reading(limit + 1, t=2.0))
        writer.write(padded_reading(limit + 1000, t=3.0))
    writer.write(padded_reading(100, t=4.0))
    writer.close()
    readings = list(TraceReader(path, PAYLOADS))
    assert [r.t for r in readings] == [1.0, 4.0]
    assert readings[0] == padded_reading(limit, t=1.0)
    assert writer.refused == {"cpu": 2}
    warnings = [r.getMessage() for r in caplog.records if r.name == "gpuwait.record"]
    assert len(warnings) == 1 and "source cpu" in warnings[0] and str(limit) in warnings[0], warnings


def test_recorder_refuses_a_header_the_reader_would_not_take(tmp_path, monkeypatch):
    monkeypatch.setattr(trace_file, "MAX_LINE_CHARS", 1000)
    with pytest.raises(ValueError, match="header longer than 1000"):
        TraceWriter(str(tmp_path / "t.jsonl"), meta={"note": "x" * 1000})


def test_process_replay_stopped_on_an_error_is_not_ready(tmp_path):
    import subprocess
    import sys
    import time
    import urllib.error
    import urllib.request

    from support import REPO, free_port

    path = write_lines(tmp_path / "bad.jsonl", [HEADER, cpu_line(0), cpu_line(0.1), cpu_line(0.2, "NaN")])
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "gpuwait", f"--web.listen-address=127.0.0.1:{port}",
                             f"--replay={path}", "--replay.speed=0"], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        body, status = "", None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "replay stopped" not in body:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=5) as response:
                    status, body = response.status, response.read().decode()
            except urllib.error.HTTPError as e:
                status, body = e.code, e.read().decode()
            except OSError:
                pass
            time.sleep(0.1)
        assert status == 503 and f"replay stopped: {path}:4: " in body, (status, body)
    finally:
        proc.terminate()
        _, stderr = proc.communicate(timeout=30)
    assert "Traceback" not in stderr, stderr


def test_process_record_file_through_a_symlink_is_refused_and_its_target_kept(tmp_path):
    # The exporter itself, not only TraceWriter: the file must be checked before anything
    # opens it for writing, or the target is truncated before the refusal.
    import subprocess
    import sys

    from support import REPO

    target = tmp_path / "precious"
    target.write_text("keep me")
    link = tmp_path / "trace.jsonl"
    os.symlink(target, link)
    r = subprocess.run([sys.executable, "-m", "gpuwait", "--web.listen-address=127.0.0.1:0", "--no-collector.gpu",
                        f"--record.file={link}"], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(link) in lines[0] and "symbolic link" in lines[0], r.stderr
    assert target.read_text() == "keep me"
