"""Flags and the YAML configuration file: one table of options, two ways to set them.

Every option is a flag in node_exporter style (``--sample.interval=100ms``) and a key of the
same name in ``--config.file`` (flat ``sample.interval: 100ms`` or nested
``sample: {interval: 100ms}``). Flags given on the command line win over the file.

An ``Option`` is declared once, as a module constant next to the code that reads it, and
code reads its value through that constant (``settings[SAMPLE_INTERVAL]``), so the value
has the option's type and a misspelt option is a NameError, not a silent None. The table of
every option is assembled by ``gpuwait.core.registry`` from the exporter's own options
(below) and each collector's ``OPTIONS``; declaring a name twice fails at start.
"""

from __future__ import annotations

import argparse
import os
import re
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, overload

import yaml

from gpuwait.core.errors import ConfigError

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}

#: No duration option means more than this; beyond it a value is a typo or an attack, and
#: a wait that long overflows the platform's timeout (threading raises OverflowError).
MAX_DURATION = 30 * 86400.0
#: The shortest interval any sampling or analysis loop may run at: below it a loop is all
#: overhead, and the window rings it sizes grow by the inverse.
MIN_INTERVAL = 0.01
#: The longest analysis window: the rings hold every sample of it.
MAX_WINDOW = 3600.0


def parse_duration(text: Any) -> float:
    """'100ms', '1m30s', '2.5s', or a plain number of seconds (a YAML number or '0.5') ->
    seconds (float, > 0)."""
    if isinstance(text, bool):
        raise ValueError(f"not a duration: {text!r}")
    if isinstance(text, str):
        try:
            text = float(text.strip())
        except ValueError:
            pass
    if isinstance(text, (int, float)):
        seconds = float(text)
        if seconds != seconds or seconds == float("inf"):
            raise ValueError(f"not a duration: {text!r}")
    else:
        s = str(text).strip()
        pos, seconds = 0, 0.0
        for m in _DURATION.finditer(s):
            if m.start() != pos:
                break
            seconds += float(m.group(1)) * _UNIT_SECONDS[m.group(2)]
            pos = m.end()
        if pos != len(s) or not s:
            raise ValueError(f"not a duration (use e.g. 100ms, 5s, 1m): {text!r}")
    if seconds <= 0:
        raise ValueError(f"duration must be positive: {text!r}")
    if seconds > MAX_DURATION:
        raise ValueError(f"duration must be at most {format_duration(MAX_DURATION)}: {text!r}")
    return seconds


def format_duration(seconds: float) -> str:
    """The inverse of parse_duration for help texts: 0.1 -> '100ms', 300 -> '5m'."""
    for unit, size in (("h", 3600.0), ("m", 60.0), ("s", 1.0), ("ms", 0.001)):
        count = seconds / size
        if count >= 1 and abs(count - round(count)) < 1e-9:
            return f"{round(count)}{unit}"
    return f"{seconds:g}s"


def parse_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    s = str(value).strip().lower()
    if s in ("true", "yes", "1", "on"):
        return True
    if s in ("false", "no", "0", "off"):
        return False
    raise ValueError(f"not a boolean: {value!r}")


def parse_regex(value: Any) -> re.Pattern[str]:
    try:
        return re.compile(str(value))
    except re.error as e:
        raise ValueError(f"bad regular expression {value!r}: {e}") from None


def parse_fraction(value: Any) -> float:
    f = float(value)
    if not 0.0 <= f <= 1.0:
        raise ValueError(f"must be between 0 and 1: {value!r}")
    return f


#: Slowest and fastest replay speed factors besides 0. At the minimum a minute of trace
#: already takes 17 hours, so anything slower is a typo; at the maximum a day of trace
#: replays in a tenth of a second, and anything faster is what 0 already means.
MIN_SPEED = 0.001
MAX_SPEED = 1e6


def parse_speed(value: Any) -> float:
    """0 (as fast as possible), or a factor from MIN_SPEED to MAX_SPEED."""
    if isinstance(value, bool):
        raise ValueError(f"not a number: {value!r}")
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"not a number: {_clip(value)}") from None
    if f != 0 and not MIN_SPEED <= f <= MAX_SPEED:
        raise ValueError(f"must be 0 (as fast as possible) or from {MIN_SPEED:g} to {MAX_SPEED:.0f}: {_clip(value)}")
    return f if f else 0.0  # -0 logs as "-0"


def _whole_number(value: Any) -> int:
    # A float is refused even when whole: int() would silently cut 1.5 to 1.
    if isinstance(value, bool) or isinstance(value, float):
        raise ValueError(f"not a whole number: {value!r}")
    text = str(value).strip()
    if not re.fullmatch(r"[+-]?\d{1,18}", text):
        raise ValueError(f"not a whole number of at most 18 digits: {_clip(value)}")
    return int(text)


def parse_count(value: Any) -> int:
    """A whole number, 0 or more."""
    n = _whole_number(value)
    if n < 0:
        raise ValueError(f"must be 0 or more: {value!r}")
    return n


def parse_positive_int(value: Any) -> int:
    n = _whole_number(value)
    if n < 1:
        raise ValueError(f"must be at least 1: {value!r}")
    return n


_SIZE = re.compile(r"(\d+)\s*(B|KiB|MiB|GiB|kB|KB|MB|GB)?")
_SIZE_UNITS = {None: 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "kB": 1000, "KB": 1000,
               "MB": 1000 ** 2, "GB": 1000 ** 3}


def _clip(value: Any, limit: int = 40) -> str:
    """repr of a value for an error line, cut so a hostile value cannot flood the log."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def parse_size(value: Any) -> int:
    """'4MiB', '512KiB', '8MB' or a plain number of bytes (IEC units are powers of 1024,
    SI units powers of 1000) -> bytes."""
    match = _SIZE.fullmatch(str(value).strip()) if not isinstance(value, bool) else None
    if match is None:
        raise ValueError(f"not a size (use e.g. 4MiB, 512KiB or a number of bytes): {value!r}")
    return int(match.group(1)) * _SIZE_UNITS[match.group(2)]


def parse_positive(value: Any) -> float:
    f = float(value)
    if not f > 0 or f == float("inf"):
        raise ValueError(f"must be a finite number > 0: {value!r}")
    return f


def parse_level(value: Any) -> str:
    s = str(value).lower()
    if s not in ("debug", "info", "warn", "error"):
        raise ValueError(f"log level must be debug, info, warn or error: {value!r}")
    return s


T = TypeVar("T")


@dataclass(frozen=True)
class Option(Generic[T]):
    name: str  # the flag without dashes, and the config key
    parse: Callable[[Any], T]
    default: T
    help: str
    metavar: str = ""
    #: Extra flag spellings, e.g. the short "--replay" for "--replay.file".
    aliases: tuple[str, ...] = ()
    #: Bounds of the parsed value (inclusive), beyond the parser's own; None: unbounded.
    minimum: float | None = None
    maximum: float | None = None

    def convert(self, raw: Any) -> T:
        """Parse a raw value and check it against the option's bounds; ValueError says why."""
        value = self.parse(raw)
        show = format_duration if self.parse is parse_duration else (lambda v: f"{v:g}")
        if self.minimum is not None and value < self.minimum:
            raise ValueError(f"must be at least {show(self.minimum)}: {_clip(raw)}")
        if self.maximum is not None and value > self.maximum:
            raise ValueError(f"must be at most {show(self.maximum)}: {_clip(raw)}")
        return value


WEB_LISTEN_ADDRESS = Option("web.listen-address", str, ":9975", "Address to serve metrics on.", "ADDR")
WEB_TELEMETRY_PATH = Option("web.telemetry-path", str, "/metrics", "Path under which metrics are served.", "PATH")
PATH_PROCFS = Option("path.procfs", str, "/proc", "procfs mount point (the host's /proc in a container).", "PATH")
PATH_SYSFS = Option("path.sysfs", str, "/sys", "sysfs mount point (the host's /sys in a container).", "PATH")
SAMPLE_INTERVAL = Option("sample.interval", parse_duration, 0.1, "Interval of the fast sampling tier (GPU utilization, CPU, PSI, disks, NICs, RDMA traffic).", "DURATION",
                         minimum=MIN_INTERVAL, maximum=MAX_WINDOW)
SLOW_INTERVAL = Option("sample.slow-interval", parse_duration, 5.0, "Interval of the slow tier (RDMA port details and error counters, NFS mount statistics).", "DURATION",
                       minimum=MIN_INTERVAL, maximum=MAX_WINDOW)
ANALYSIS_WINDOW = Option("analysis.window", parse_duration, 60.0, "Length of the window the exporter analyses its samples over.", "DURATION",
                         maximum=MAX_WINDOW)
ANALYSIS_INTERVAL = Option("analysis.interval", parse_duration, 1.0, "How often window statistics are recomputed (not per scrape).", "DURATION",
                           minimum=MIN_INTERVAL, maximum=MAX_WINDOW)
LOG_LEVEL = Option("log.level", parse_level, "info", "Only log messages with this severity or above: debug, info, warn, error.", "LEVEL")
RECORD_FILE = Option("record.file", str, "", "Record every Reading the sampler takes to this trace file (.gz compresses); see docs/trace-format.md.", "FILE")
REPLAY_FILE = Option("replay.file", str, "", "Replay a recorded trace through the analysis and exposition instead of sampling this host.", "FILE", aliases=("replay",))
REPLAY_SPEED = Option("replay.speed", parse_speed, 1.0, f"Replay speed factor, from {MIN_SPEED:g} to {MAX_SPEED:.0f}; 0 replays as fast as possible.", "FACTOR")
SIMULATE_SCENARIO = Option("simulate.scenario", str, "", "Serve a simulated node running this scenario instead of sampling this host (see docs/verdicts.md for the list).", "SCENARIO", aliases=("simulate",))
SIMULATE_PARAMS = Option("simulate.params", str, "", "Scenario parameters, e.g. period=2,duty=0.4,target_gpu=5,gpus=8,cores=32,noise=0.03,seed=1.", "KEY=VALUE,...")
WEB_CONFIG_FILE = Option(
    "web.config.file", str, "",
    "Path to a web configuration file (Prometheus exporter-toolkit format) enabling TLS, client certificates and basic authentication.",
    "FILE",
)
WEB_MAX_CONNECTIONS = Option(
    "web.max-connections", parse_positive_int, 64,
    "Most HTTP connections served at once; beyond it, connections still sending their request are cut first, and where none is, new ones get 503.",
    "N", minimum=1, maximum=65535,
)
WEB_MAX_REQUESTS = Option(
    "web.max-requests", parse_count, 40,
    "Most metrics requests answered at once; beyond it they get 503 (0: no limit), as node_exporter's flag of that name.",
    "N", maximum=65535,
)

#: The exporter's own options, before those of the collectors.
EXPORTER_OPTIONS: tuple[Option, ...] = (
    WEB_LISTEN_ADDRESS, WEB_TELEMETRY_PATH, PATH_PROCFS, PATH_SYSFS, SAMPLE_INTERVAL, SLOW_INTERVAL,
    ANALYSIS_WINDOW, ANALYSIS_INTERVAL, LOG_LEVEL, RECORD_FILE, REPLAY_FILE, REPLAY_SPEED,
    SIMULATE_SCENARIO, SIMULATE_PARAMS, WEB_CONFIG_FILE, WEB_MAX_CONNECTIONS, WEB_MAX_REQUESTS,
)
#: The key under which Settings keeps the --config.file given (not an option of the file).
CONFIG_FILE = "config.file"


def collector_toggle(name: str, default: bool) -> Option[bool]:
    """The ``collector.<name>`` option: --collector.<name> / --no-collector.<name>."""
    return Option(f"collector.{name}", parse_bool, default, f"Enable the {name} collector.")


@dataclass(frozen=True)
class OptionTable:
    """Every option the exporter knows: its own and its collectors', and a toggle per
    collector. Built once at start; a name declared twice fails there."""

    options: tuple[Option, ...]
    #: collector name -> enabled by default
    collectors: Mapping[str, bool]

    def __post_init__(self) -> None:
        seen: set[str] = set()
        for option in (*self.options, *self._toggles()):
            if option.name in seen or option.name == CONFIG_FILE:
                raise ValueError(f"option {option.name} declared twice")
            seen.add(option.name)

    def _toggles(self) -> list[Option]:
        return [collector_toggle(name, default) for name, default in self.collectors.items()]

    def all(self) -> dict[str, Option]:
        opts = {o.name: o for o in self.options}
        for toggle in self._toggles():
            opts[toggle.name] = toggle
        return opts


@dataclass(frozen=True)
class Settings:
    """The resolved configuration: every option by name, parsed. Read a value through its
    Option (``settings[SAMPLE_INTERVAL]``); an Option missing from ``values`` (settings
    built by hand) reads as its default. A string names an option for code that handles
    options generically (reload, tests); an unknown name is a KeyError that says so."""

    values: Mapping[str, Any]

    @overload
    def __getitem__(self, key: Option[T]) -> T: ...

    @overload
    def __getitem__(self, key: str) -> Any: ...

    def __getitem__(self, key):
        if isinstance(key, Option):
            return self.values.get(key.name, key.default)
        try:
            return self.values[key]
        except KeyError:
            raise KeyError(f"no option named {key!r}") from None

    def collector_enabled(self, name: str) -> bool:
        return bool(self.values.get(f"collector.{name}", False))

    @property
    def sample_interval(self) -> float:
        return self[SAMPLE_INTERVAL]

    @property
    def slow_interval(self) -> float:
        return self[SLOW_INTERVAL]

    @property
    def analysis_window(self) -> float:
        return self[ANALYSIS_WINDOW]


def _flatten(tree: Mapping, prefix: str, path: str) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if not isinstance(key, str):
            raise ConfigError(f"{path}: key {key!r} is not a string")
        full = f"{prefix}.{key}" if prefix else key
        if isinstance(value, Mapping):
            flat.update(_flatten(value, full, path))
        else:
            flat[full] = value
    return flat


#: A configuration is a few dozen keys; a file beyond this is not one, and reading it whole
#: (on every SIGHUP, too) would cost its size in memory.
MAX_CONFIG_BYTES = 1 << 20
#: Most nodes the document may have once every alias is expanded. Aliases are shared when
#: parsed but copied out when the tree is flattened into keys, so a few lines of nested
#: aliases ("billion laughs") would otherwise expand to gigabytes.
MAX_CONFIG_NODES = 100_000


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses a document whose aliases expand beyond MAX_CONFIG_NODES
    nodes, or refer to themselves, before anything is built from it."""

    def compose_document(self):
        node = super().compose_document()
        _check_expanded_size(node)
        return node


class _AliasBomb(yaml.YAMLError):
    pass


def _check_expanded_size(root: yaml.Node) -> None:
    # Iterative, with the expanded size of each shared node counted once, so the check
    # itself costs the size of the document, not of its expansion.
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in sizes:
            continue
        children = _children(node)
        if children_done:
            open_nodes.discard(id(node))
            size = 1 + sum(sizes[id(child)] for child in children)
            if size > MAX_CONFIG_NODES:
                raise _AliasBomb(f"more than {MAX_CONFIG_NODES} nodes once its aliases are expanded")
            sizes[id(node)] = size
            continue
        if id(node) in open_nodes:
            raise _AliasBomb("an alias refers to the node that contains it")
        open_nodes.add(id(node))
        stack.append((node, True))
        for child in children:
            if id(child) in open_nodes:
                raise _AliasBomb("an alias refers to the node that contains it")
            if id(child) not in sizes:
                stack.append((child, False))


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def load_config_file(path: str, table: OptionTable) -> dict[str, Any]:
    """Parse a config file into {option name: parsed value}; ConfigError names file and key."""
    try:
        # Opening a FIFO for reading waits for a writer, which would hang the start or every
        # later reload with nothing in the log: it is opened without waiting, then judged.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ConfigError(f"{path}: cannot read config file: not a regular file")
            os.set_blocking(fd, True)
            with os.fdopen(fd, "rb", closefd=False) as f:
                raw = f.read(MAX_CONFIG_BYTES + 1)
        finally:
            os.close(fd)
    except OSError as e:
        raise ConfigError(f"{path}: cannot read config file: {e.strerror or e}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path}: config file larger than {MAX_CONFIG_BYTES} bytes")
    try:
        tree = yaml.load(raw.decode("utf-8"), Loader=_BoundedLoader)
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text (byte {e.start})") from None
    except _AliasBomb as e:
        raise ConfigError(f"{path}: refused: {e}") from None
    except RecursionError:
        raise ConfigError(f"{path}: refused: nested too deeply") from None
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        line = f" line {where.line + 1}" if where is not None else ""
        raise ConfigError(f"{path}:{line} not valid YAML: {getattr(e, 'problem', e)}") from None
    if tree is None:
        return {}
    if not isinstance(tree, Mapping):
        raise ConfigError(f"{path}: top level must be a mapping of option names to values")
    options = table.all()
    parsed: dict[str, Any] = {}
    try:
        flat = _flatten(tree, "", path)
    except RecursionError:
        raise ConfigError(f"{path}: refused: nested too deeply") from None
    for key, value in flat.items():
        option = options.get(key)
        if option is None or key == CONFIG_FILE:
            raise ConfigError(f"{path}: unknown key {key!r}")
        try:
            parsed[key] = option.convert(value)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"{path}: key {key!r}: {e}") from None
    return parsed


_METAVARS = {parse_duration: "DURATION", parse_fraction: "RATIO", parse_bool: "BOOL", parse_regex: "REGEX"}


class _ArgumentParser(argparse.ArgumentParser):
    def error(self, message: str):  # one clear line, exit status 2
        raise ConfigError(message)


def build_parser(table: OptionTable, prog: str = "gpuwait-exporter") -> argparse.ArgumentParser:
    parser = _ArgumentParser(
        prog=prog,
        description="Prometheus exporter that tells what each GPU is waiting for.",
        allow_abbrev=False,
    )
    parser.add_argument(f"--{CONFIG_FILE}", dest=CONFIG_FILE, metavar="FILE", help="YAML file setting any of these options; flags override it.")
    parser.add_argument("--version", action="store_true", help="Print the version and exit.")
    for option in table.options:
        default = option.default
        if isinstance(default, re.Pattern):
            default = default.pattern
        elif option.parse is parse_duration:
            default = format_duration(default)
        parser.add_argument(
            f"--{option.name}", *(f"--{alias}" for alias in option.aliases), dest=option.name,
            metavar=option.metavar or _METAVARS.get(option.parse, "VALUE"),
            default=None, help=f"{option.help} (default: {default})".replace("%", "%%"),
        )
    for name, default in sorted(table.collectors.items()):
        group = parser.add_mutually_exclusive_group()
        group.add_argument(f"--collector.{name}", dest=f"collector.{name}", action="store_const", const=True, default=None,
                           help=f"Enable the {name} collector (default: {'enabled' if default else 'disabled'}).")
        group.add_argument(f"--no-collector.{name}", dest=f"collector.{name}", action="store_const", const=False, default=None,
                           help=argparse.SUPPRESS)
    return parser


def resolve(argv: Sequence[str] | None, table: OptionTable) -> tuple[Settings, argparse.Namespace]:
    """Defaults, then the config file, then flags. Raises ConfigError with one clear line."""
    parser = build_parser(table)
    args = parser.parse_args(argv)
    options = table.all()
    values = {name: option.default for name, option in options.items()}
    config_path = getattr(args, CONFIG_FILE)
    #: Where each value that is not a default came from, as the prefix of its errors.
    origins: dict[str, str] = {}
    if config_path:
        from_file = load_config_file(config_path, table)
        values.update(from_file)
        origins.update((name, f"{config_path}: key {name!r}") for name in from_file)
    for name, option in options.items():
        given = getattr(args, name, None)
        if given is None:
            continue
        try:
            values[name] = given if isinstance(given, bool) else option.convert(given)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"flag --{name}: {e}") from None
        origins[name] = f"flag --{name}"
    values[CONFIG_FILE] = config_path
    settings = Settings(values)
    _check_consistency(settings, origins)
    return settings, args


def _check_consistency(settings: Settings, origins: Mapping[str, str] | None = None) -> None:
    """Refuse options that contradict each other. The error starts with where the first of
    the named options that was set came from (``FILE: key 'name'`` or ``flag --name``), as
    the errors of single values do; one left at its default is named alone."""
    origins = origins or {}

    def refuse(names: Sequence[str], message: str) -> ConfigError:
        where = next((origins[name] for name in names if name in origins), names[0])
        return ConfigError(f"{where}: {message}")

    window, sample, slow = settings.analysis_window, settings.sample_interval, settings.slow_interval
    if window < 2 * sample:
        raise refuse((ANALYSIS_WINDOW.name, SAMPLE_INTERVAL.name),
                     f"analysis.window ({format_duration(window)}) must hold at least two samples of "
                     f"sample.interval ({format_duration(sample)})")
    if slow < sample:
        raise refuse((SLOW_INTERVAL.name, SAMPLE_INTERVAL.name),
                     f"sample.slow-interval ({format_duration(slow)}) must not be shorter than "
                     f"sample.interval ({format_duration(sample)})")
    if settings[RECORD_FILE] and settings[REPLAY_FILE]:
        raise refuse((RECORD_FILE.name, REPLAY_FILE.name), "record.file and replay.file cannot be used together")
    if settings[SIMULATE_SCENARIO] and settings[REPLAY_FILE]:
        raise refuse((SIMULATE_SCENARIO.name, REPLAY_FILE.name), "simulate.scenario and replay.file cannot be used together")
    path = settings[WEB_TELEMETRY_PATH]
    if not path.startswith("/") or path in ("/", "/-/healthy", "/-/ready"):
        raise refuse((WEB_TELEMETRY_PATH.name,),
                     f"web.telemetry-path must be an absolute path other than /, /-/healthy, /-/ready: {_clip(path)}")
