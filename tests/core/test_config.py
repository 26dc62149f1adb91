"""Flags, the configuration file and their errors, down to what the real process prints."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpuwait.core.registry import registry
from gpuwait.core.config import parse_bool, parse_duration, parse_fraction, parse_level, parse_regex
from gpuwait.core.registry import OPTIONS, load_config_file, resolve
from gpuwait.core.errors import ConfigError
from gpuwait.exposition.server import parse_listen_address
from support import REPO


def run_exporter(*args: str, timeout: float = 30.0) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpuwait", *args], capture_output=True, text=True, timeout=timeout, cwd=REPO,
    )


# -- value parsers -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, seconds",
    [("100ms", 0.1), ("5s", 5.0), ("2.5s", 2.5), ("1m", 60.0), ("1m30s", 90.0), ("1h", 3600.0),
     ("1h2m3s", 3723.0), (" 250ms ", 0.25), (5, 5.0), (0.5, 0.5)],
)
def test_duration_accepted(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "ms", "fast", "1x", "1s2", "s1", "-1s", "0s", "0ms", 0, -3, True, "1.s", "1 s"])
def test_duration_rejected(text):
    with pytest.raises(ValueError):
        parse_duration(text)


@pytest.mark.parametrize("text, value", [("true", True), ("Yes", True), ("1", True), ("on", True), (True, True),
                                         ("false", False), ("NO", False), ("0", False), ("off", False), (False, False)])
def test_bool(text, value):
    assert parse_bool(text) is value


@pytest.mark.parametrize("text", ["", "maybe", "2", "enabled"])
def test_bool_rejected(text):
    with pytest.raises(ValueError):
        parse_bool(text)


def test_regex():
    assert parse_regex("^(sd|nvme)[a-z0-9]+$").match("nvme0n1")
    with pytest.raises(ValueError, match="bad regular expression"):
        parse_regex("(unclosed")


def test_fraction_and_level():
    assert parse_fraction("0.9") == 0.9
    with pytest.raises(ValueError):
        parse_fraction("1.5")
    with pytest.raises(ValueError):
        parse_fraction("nope")
    assert parse_level("WARN") == "warn"
    with pytest.raises(ValueError):
        parse_level("verbose")


def test_defaults():
    settings, _ = resolve([])
    assert settings["web.listen-address"] == ":9975"
    assert settings["web.telemetry-path"] == "/metrics"
    assert settings.sample_interval == 0.1
    assert settings.slow_interval == 5.0
    assert settings.analysis_window == 60.0
    for collector in registry():
        assert settings.collector_enabled(collector.name) is collector.default_enabled


def test_every_option_default_is_valid_for_its_own_parser():
    for option in OPTIONS:
        if option.default is None:
            continue
        default = option.default.pattern if hasattr(option.default, "pattern") else option.default
        option.convert(default)


# -- configuration file --------------------------------------------------------------------


def write(tmp_path, text: str, name: str = "gpuwait.yml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_file_flat_keys(tmp_path):
    path = write(tmp_path, "sample.interval: 200ms\nanalysis.window: 2m\nlog.level: warn\n")
    assert load_config_file(path) == {"sample.interval": 0.2, "analysis.window": 120.0, "log.level": "warn"}


def test_file_nested_keys(tmp_path):
    path = write(tmp_path, "sample:\n  interval: 200ms\n  slow-interval: 10s\nweb:\n  listen-address: 127.0.0.1:9999\n")
    assert load_config_file(path) == {
        "sample.interval": 0.2, "sample.slow-interval": 10.0, "web.listen-address": "127.0.0.1:9999",
    }


def test_file_nested_collector_options(tmp_path):
    path = write(tmp_path, "collector:\n  cpu:\n    saturation-threshold: 0.8\n")
    assert load_config_file(path) == {"collector.cpu.saturation-threshold": 0.8}


def test_file_enables_and_disables_collectors(tmp_path):
    lines = "".join(f"collector.{c.name}: {'false' if c.default_enabled else 'true'}\n" for c in registry())
    settings, _ = resolve(["--config.file", write(tmp_path, lines)])
    for collector in registry():
        assert settings.collector_enabled(collector.name) is not collector.default_enabled


def test_empty_file_is_all_defaults(tmp_path):
    assert load_config_file(write(tmp_path, "# nothing set\n")) == {}


def test_unknown_key_names_file_and_key(tmp_path):
    path = write(tmp_path, "sample:\n  intervall: 1s\n")
    with pytest.raises(ConfigError) as e:
        load_config_file(path)
    assert path in str(e.value) and "sample.intervall" in str(e.value)


def test_config_file_key_itself_is_refused(tmp_path):
    path = write(tmp_path, "config.file: other.yml\n")
    with pytest.raises(ConfigError, match="config.file"):
        load_config_file(path)


def test_bad_value_names_key(tmp_path):
    path = write(tmp_path, "analysis.window: soon\n")
    with pytest.raises(ConfigError) as e:
        load_config_file(path)
    assert "analysis.window" in str(e.value) and path in str(e.value) and "soon" in str(e.value)


def test_bad_yaml_names_file_and_line(tmp_path):
    path = write(tmp_path, "sample.interval: 100ms\nlog.level: info\nanalysis:\n  window: [60s\n")
    with pytest.raises(ConfigError) as e:
        load_config_file(path)
    message = str(e.value)
    assert path in message
    assert "line " in message
    line = int(message.split("line ", 1)[1].split()[0].rstrip(":"))
    # The unclosed bracket opens on line 4; YAML reports where it noticed, at or after it.
    assert line >= 4


def test_top_level_not_a_mapping(tmp_path):
    with pytest.raises(ConfigError, match="mapping"):
        load_config_file(write(tmp_path, "- sample.interval\n- 1s\n"))


def test_missing_file_named(tmp_path):
    path = str(tmp_path / "absent.yml")
    with pytest.raises(ConfigError) as e:
        load_config_file(path)
    assert path in str(e.value)


# -- flags and precedence ------------------------------------------------------------------


def test_flags_override_file(tmp_path):
    path = write(tmp_path, "sample.interval: 200ms\nanalysis.window: 30s\n")
    settings, _ = resolve(["--config.file", path, "--sample.interval=50ms"])
    assert settings.sample_interval == 0.05
    assert settings.analysis_window == 30.0, "keys the flags do not set still come from the file"
    assert settings["config.file"] == path


def test_flag_with_space_or_equals():
    a, _ = resolve(["--analysis.window", "90s"])
    b, _ = resolve(["--analysis.window=90s"])
    assert a.analysis_window == b.analysis_window == 90.0


@pytest.mark.parametrize("collector", [c.name for c in registry()])
def test_collector_flags(collector):
    on, _ = resolve([f"--collector.{collector}"])
    off, _ = resolve([f"--no-collector.{collector}"])
    assert on.collector_enabled(collector) is True
    assert off.collector_enabled(collector) is False


def test_collector_flag_overrides_file(tmp_path):
    name = registry()[0].name
    path = write(tmp_path, f"collector.{name}: false\n")
    settings, _ = resolve(["--config.file", path, f"--collector.{name}"])
    assert settings.collector_enabled(name)


def test_contradicting_collector_flags_refused():
    name = registry()[0].name
    with pytest.raises(ConfigError):
        resolve([f"--collector.{name}", f"--no-collector.{name}"])


def test_bad_flag_value_names_flag():
    with pytest.raises(ConfigError, match="--sample.interval"):
        resolve(["--sample.interval=quick"])


def test_abbreviated_flags_refused():
    # argparse would otherwise take --sample.int as --sample.interval, and a later option
    # with the same prefix would silently change what an old command line means.
    with pytest.raises(ConfigError):
        resolve(["--sample.int=1s"])


@pytest.mark.parametrize(
    "flags, culprit",
    [(["--analysis.window=100ms", "--sample.interval=100ms"], "analysis.window"),
     (["--sample.slow-interval=50ms"], "sample.slow-interval"),
     (["--web.telemetry-path=/"], "web.telemetry-path"),
     (["--web.telemetry-path=metrics"], "web.telemetry-path"),
     (["--web.telemetry-path=/-/ready"], "web.telemetry-path")],
)
def test_inconsistent_settings_refused(flags, culprit):
    with pytest.raises(ConfigError, match=culprit):
        resolve(flags)


# -- listen address ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "address, expected",
    [(":9975", ("", 9975)), ("0.0.0.0:9975", ("0.0.0.0", 9975)), ("127.0.0.1:0", ("127.0.0.1", 0)),
     ("[::1]:9975", ("::1", 9975)), ("[::]:80", ("::", 80)), ("localhost:65535", ("localhost", 65535))],
)
def test_listen_address(address, expected):
    assert parse_listen_address(address) == expected


@pytest.mark.parametrize("address", ["9975", "", "host", ":port", "127.0.0.1:", ":65536", ":-1", "[::1]:x"])
def test_listen_address_rejected(address):
    with pytest.raises(ConfigError, match="web.listen-address"):
        parse_listen_address(address)


# -- what the process prints ---------------------------------------------------------------


def assert_one_line_error(result: subprocess.CompletedProcess, *mentions: str) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert len(lines) == 1, f"expected one line on stderr, got:\n{result.stderr}"
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    for mention in mentions:
        assert mention in lines[0], lines[0]
    return lines[0]


def test_process_unknown_flag_one_line():
    line = assert_one_line_error(run_exporter("--no-such.flag=1"), "--no-such.flag")
    assert line.startswith("gpuwait-exporter: error:")


def test_process_bad_flag_value_one_line():
    assert_one_line_error(run_exporter("--sample.interval=quick"), "--sample.interval", "quick")


def test_process_bad_listen_address_one_line():
    assert_one_line_error(run_exporter("--web.listen-address=localhost"), "web.listen-address")


def test_process_bad_config_file_one_line(tmp_path):
    path = write(tmp_path, "sample.interval: 100ms\nnot: valid: yaml\n")
    assert_one_line_error(run_exporter("--config.file", path), path, "line 2")


def test_process_unknown_config_key_one_line(tmp_path):
    path = write(tmp_path, "web:\n  listen_address: :1234\n")
    assert_one_line_error(run_exporter("--config.file", path), path, "web.listen_address")


def test_process_version():
    result = run_exporter("--version")
    assert result.returncode == 0
    assert result.stdout.startswith("gpuwait-exporter ")


def test_process_help_lists_every_option():
    result = run_exporter("--help")
    assert result.returncode == 0, result.stderr
    for option in OPTIONS:
        assert f"--{option.name}" in result.stdout
    for collector in registry():
        assert f"--collector.{collector.name}" in result.stdout



# -- hostile values ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "flag, mention",
    [("--analysis.window=1000h", "at most"), ("--analysis.window=2h", "at most 1h"),
     ("--sample.interval=1e-9", "at least 10ms"), ("--sample.interval=1ms", "at least 10ms"),
     ("--sample.interval=1us", "not a duration"), ("--sample.slow-interval=5ms", "at least 10ms"),
     ("--analysis.interval=1ms", "at least 10ms"), ("--collector.cgroup.interval=1ms", "at least 10ms"),
     ("--collector.nccl.interval=1ms", "at least 10ms"), ("--verdict.interval=1ms", "at least 10ms"),
     ("--collector.nccl.stale-after=1e300", "at most 720h"),
     ("--web.max-connections=1000000000000", "at most 65535"), ("--web.max-connections=0", "at least 1"),
     ("--web.max-connections=1e3", "whole number"), ("--web.max-connections=" + "9" * 5000, "whole number")],
)
def test_out_of_range_flag_names_flag(flag, mention):
    with pytest.raises(ConfigError) as err:
        resolve([flag])
    message = str(err.value)
    assert flag.split("=")[0] in message and mention in message, message
    assert "\n" not in message and len(message) < 200


@pytest.mark.parametrize(
    "text, key",
    [("analysis.window: 1000h\n", "analysis.window"), ("sample:\n  interval: 1us\n", "sample.interval"),
     ("sample.interval: 1.0e-9\n", "sample.interval"), ("web.max-connections: 1000000000000\n", "web.max-connections")],
)
def test_out_of_range_file_value_names_file_and_key(tmp_path, text, key):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        resolve(["--config.file", path])
    assert path in str(err.value) and repr(key) in str(err.value), str(err.value)


def test_bounds_themselves_accepted():
    settings, _ = resolve(["--analysis.window=1h", "--sample.interval=10ms", "--analysis.interval=10ms",
                           "--web.max-connections=65535"])
    assert settings.analysis_window == 3600.0 and settings.sample_interval == 0.01
    assert settings["web.max-connections"] == 65535


def test_ring_samples_refused_before_any_ring_is_allocated(tmp_path, monkeypatch):
    from gpuwait.cli import enabled_collectors
    from gpuwait.core import sampler as sampler_module

    allocated = []
    monkeypatch.setattr(sampler_module, "ColumnRing", lambda capacity: allocated.append(capacity))
    path = write(tmp_path, "analysis.window: 1h\nsample.interval: 10ms\n")
    settings, _ = resolve(["--config.file", path])
    with pytest.raises(ConfigError) as err:
        sampler_module.Sampler(enabled_collectors(settings), settings)
    message = str(err.value)
    assert message.startswith(f"{path}: analysis.window 1h"), message
    assert str(sampler_module.MAX_RING_SAMPLES) in message and "sample" in message
    assert allocated == []


def test_ring_samples_of_defaults_and_of_a_long_window_fit():
    from gpuwait.cli import enabled_collectors
    from gpuwait.core.sampler import Sampler

    for flags in ([], ["--analysis.window=1h"], ["--analysis.window=5m", "--sample.interval=10ms"]):
        settings, _ = resolve(flags)
        sampler = Sampler(enabled_collectors(settings), settings)
        sampler.stop(timeout=0)


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    names = [chr(ord("a") + i) for i in range(levels + 1)]
    lines = [f"{names[0]}: &{names[0]} {{x: 1, y: 2}}"]
    for i in range(1, levels + 1):
        lines.append(f"{names[i]}: &{names[i]} {{" + ", ".join(f"k{j}: *{names[i - 1]}" for j in range(width)) + "}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    "text, mention",
    [(alias_bomb(), "more than 100000 nodes once its aliases are expanded"),
     ("a: [" + ",".join(["1"] * 100_001) + "]\n", "more than 100000 nodes"),
     ("a: &a {b: *a}\n", "refers to the node that contains it"),
     ("a: &a [1, *a]\n", "refers to the node that contains it"),
     ("a: " + "[" * 100_000 + "]" * 100_000 + "\n", "nested too deeply"),
     ("a: " + "{b: " * 3000 + "1" + "}" * 3000 + "\n", "nested too deeply")],
)
def test_hostile_yaml_refused_naming_file(tmp_path, monkeypatch, text, mention):
    from gpuwait.core import config

    # The bomb must be refused before the tree is flattened into keys, where it would expand.
    monkeypatch.setattr(config, "_flatten", lambda *a: pytest.fail("flattened a refused document"))
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_config_file(path)
    assert str(err.value).startswith(f"{path}: ") and mention in str(err.value), str(err.value)


def test_oversized_config_file_refused(tmp_path):
    path = write(tmp_path, "# padding\n" * 200_000)
    with pytest.raises(ConfigError, match="larger than"):
        load_config_file(path)


def test_shared_scalar_alias_still_works(tmp_path):
    path = write(tmp_path, "sample:\n  interval: &fast 200ms\nanalysis:\n  interval: *fast\n")
    assert load_config_file(path) == {"sample.interval": 0.2, "analysis.interval": 0.2}


def test_process_out_of_range_values_one_line(tmp_path):
    assert_one_line_error(run_exporter("--sample.interval=1e-9"), "--sample.interval", "at least 10ms")
    assert_one_line_error(run_exporter("--web.max-connections=1000000000000"), "--web.max-connections")
    path = write(tmp_path, "analysis.window: 1h\nsample.interval: 10ms\n")
    assert_one_line_error(run_exporter("--config.file", path), path, str(1_000_000))


def test_process_alias_bomb_one_line(tmp_path):
    path = write(tmp_path, alias_bomb())
    assert_one_line_error(run_exporter("--config.file", path), path, "aliases")


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "-inf", "1e9", "1e-9", "1e400", "true", "fast", "9" * 5000])
def test_replay_speed_out_of_range_flag_refused(value):
    with pytest.raises(ConfigError) as err:
        resolve([f"--replay.speed={value}"])
    message = str(err.value)
    assert message.startswith("flag --replay.speed: ") and "\n" not in message and len(message) < 200, message


@pytest.mark.parametrize("text", ["replay.speed: -1\n", "replay:\n  speed: .nan\n", "replay.speed: .inf\n",
                                  "replay.speed: 1.0e+9\n", "replay.speed: yes\n", "replay.speed: [1]\n"])
def test_replay_speed_out_of_range_file_value_names_file_and_key(tmp_path, text):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        resolve(["--config.file", path])
    assert str(err.value).startswith(f"{path}: key 'replay.speed': "), str(err.value)


@pytest.mark.parametrize("value, speed", [("0", 0.0), ("-0", 0.0), ("0.001", 0.001), ("1", 1.0), ("2.5", 2.5),
                                          ("1000000", 1e6)])
def test_replay_speed_accepted(value, speed):
    settings, _ = resolve([f"--replay.speed={value}"])
    assert settings["replay.speed"] == speed


def test_process_replay_speed_out_of_range_one_line():
    assert_one_line_error(run_exporter("--replay.speed=1e9"), "--replay.speed", "0 (as fast as possible)", "1e9")


@pytest.mark.parametrize(
    "text, key",
    [("analysis.window: 100ms\nsample.interval: 100ms\n", "analysis.window"),
     ("sample:\n  slow-interval: 50ms\n", "sample.slow-interval"),
     ("sample.interval: 31s\n", "sample.interval"),
     ("web.telemetry-path: /-/healthy\n", "web.telemetry-path"),
     ("record.file: a.jsonl\nreplay.file: b.jsonl\n", "record.file"),
     ("simulate.scenario: idle\nreplay.file: b.jsonl\n", "simulate.scenario")],
)
def test_inconsistent_file_values_name_file_and_key(tmp_path, text, key):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        resolve(["--config.file", path])
    message = str(err.value)
    assert message.startswith(f"{path}: key {key!r}: "), message
    assert "\n" not in message


def test_inconsistency_names_where_the_first_value_set_came_from(tmp_path):
    path = write(tmp_path, "analysis.window: 150ms\n")
    with pytest.raises(ConfigError) as err:
        resolve(["--config.file", path, "--sample.interval=100ms"])
    assert str(err.value).startswith(f"{path}: key 'analysis.window': "), str(err.value)
    with pytest.raises(ConfigError) as err:
        resolve(["--config.file", path, "--analysis.window=100ms", "--sample.interval=100ms"])
    assert str(err.value).startswith("flag --analysis.window: "), str(err.value)


def test_process_inconsistent_file_one_line(tmp_path):
    path = write(tmp_path, "sample:\n  slow-interval: 50ms\n")
    assert_one_line_error(run_exporter("--config.file", path), f"{path}: key 'sample.slow-interval'", "50ms")


@pytest.mark.parametrize("value, count", [(0, 0), (40, 40), ("40", 40), (" 7 ", 7), ("+3", 3), ("65535", 65535)])
def test_count_accepts_whole_numbers(value, count):
    from gpuwait.core.config import parse_count

    assert parse_count(value) == count


@pytest.mark.parametrize("value, mention", [("1.5", "whole number"), (1.5, "whole number"), (2.0, "whole number"),
                                            ("1e3", "whole number"), (True, "whole number"), ("", "whole number"),
                                            pytest.param("9" * 5000, "whole number", id="5000-digits"),
                                            ("-1", "0 or more")])
def test_count_refuses_what_is_not_a_whole_number(value, mention):
    from gpuwait.core.config import parse_count

    with pytest.raises(ValueError) as err:
        parse_count(value)
    assert mention in str(err.value) and len(str(err.value)) < 100, str(err.value)


def test_fractional_count_in_file_names_file_and_key(tmp_path):
    # YAML reads 1.5 as a float, which int() would have cut to 1 without a word.
    path = write(tmp_path, "web.max-requests: 1.5\n")
    with pytest.raises(ConfigError) as err:
        resolve(["--config.file", path])
    assert str(err.value) == f"{path}: key 'web.max-requests': not a whole number: 1.5"


def test_process_fractional_count_one_line():
    assert_one_line_error(run_exporter("--web.max-requests=1.5"), "--web.max-requests", "whole number", "'1.5'")


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_config_file_that_is_not_a_regular_file_refused_without_waiting(tmp_path, kind):
    import os
    import threading

    path = tmp_path / "gpuwait.yml"
    os.mkfifo(path) if kind == "fifo" else path.mkdir()
    outcome = []

    def load():
        try:
            load_config_file(str(path))
        except ConfigError as e:
            outcome.append(str(e))

    # A FIFO nobody writes would block open() for good: the load runs where it cannot hang the test.
    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive(), "waited on the file"
    assert outcome == [f"{path}: cannot read config file: not a regular file"]


def test_process_fifo_config_file_one_line(tmp_path):
    import os

    path = tmp_path / "gpuwait.yml"
    os.mkfifo(path)
    assert_one_line_error(run_exporter("--config.file", str(path)), str(path), "not a regular file")
