"""``gpuwait-exporter``: parse flags and config, start the sampler and the HTTP endpoint."""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from collections.abc import Sequence

from gpuwait import __version__
from gpuwait.core.allocator import limit_arenas
from gpuwait.core.config import (
    ANALYSIS_INTERVAL,
    LOG_LEVEL,
    RECORD_FILE,
    REPLAY_FILE,
    REPLAY_SPEED,
    SIMULATE_SCENARIO,
    WEB_CONFIG_FILE,
    WEB_LISTEN_ADDRESS,
    WEB_MAX_CONNECTIONS,
    WEB_MAX_REQUESTS,
    WEB_TELEMETRY_PATH,
    Settings,
)
from gpuwait.core.errors import ConfigError
from gpuwait.core.plugin import CollectorSpec
from gpuwait.core.registry import registry, resolve
from gpuwait.core.sampler import Sampler
from gpuwait.exposition.prometheus import GpuwaitCollector
from gpuwait.exposition.server import make_server, serve_in_thread
from gpuwait.simulate.run import live_sampler, scenario_from_settings
from gpuwait.trace.file import TraceError, TraceReader, TraceWriter
from gpuwait.trace.replay import ReplayedSource, Replayer

log = logging.getLogger("gpuwait")

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING, "error": logging.ERROR}


class LogfmtFormatter(logging.Formatter):
    """key=value lines, like the Go exporters, so the same log pipelines parse both."""

    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"
        msg = record.getMessage().replace("\\", "\\\\").replace('"', '\\"')
        line = f'ts={ts} level={record.levelname.lower().replace("warning", "warn")} logger={record.name} msg="{msg}"'
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def setup_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(LogfmtFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(_LEVELS[level])


def enabled_collectors(settings: Settings) -> list[CollectorSpec]:
    return [c for c in registry() if settings.collector_enabled(c.name)]


def payload_types(collectors: list[CollectorSpec]) -> dict[str, type]:
    return {s.name: s.payload for c in collectors for s in c.sources if s.payload is not None}


def _replay_sampler(collectors: list[CollectorSpec], settings: Settings) -> tuple[Sampler, Replayer]:
    """A sampler whose sources are fed from a trace instead of this host's files."""
    reader = TraceReader(settings[REPLAY_FILE], payload_types(registry()))
    sampler = Sampler(collectors, settings, make_source=lambda spec, _s: ReplayedSource(spec.name, spec.tier or "fast"))
    log.info("replaying %s (recorded on %s at %s) at speed %g", settings[REPLAY_FILE], reader.header.host or "?", reader.header.created or "?", settings[REPLAY_SPEED])
    return sampler, Replayer(sampler, reader, settings[REPLAY_SPEED])


def _simulated_sampler(collectors: list[CollectorSpec], settings: Settings) -> Sampler:
    try:
        scenario = scenario_from_settings(settings)
    except KeyError as e:
        raise ConfigError(f"simulate.scenario: {e.args[0]}") from None
    except ValueError as e:
        raise ConfigError(f"simulate.params: {e}") from None
    log.info("simulating scenario %s: %s (the verdict should read %s)", scenario.name, scenario.description, scenario.expected)
    return live_sampler(scenario, collectors, settings)


def _recorder(sampler: Sampler, settings: Settings) -> TraceWriter:
    try:
        writer = TraceWriter(settings[RECORD_FILE], meta={
            "sample_interval": settings.sample_interval, "slow_interval": settings.slow_interval,
            "analysis_window": settings.analysis_window, "analysis_interval": settings[ANALYSIS_INTERVAL],
        }, origin=time.monotonic())
    except OSError as e:
        raise ConfigError(f"record.file: cannot write {settings[RECORD_FILE]}: {e.strerror or e}") from None
    sampler.observers.append(writer.write)
    return writer


def reloadable(name: str) -> bool:
    """Options a running exporter takes from a reloaded configuration: the log level, and
    the thresholds the analysis and the scrape read from the settings each time they run.
    The others shape what is built at start (threads, rings, sources, the listener)."""
    return name == LOG_LEVEL.name or name.startswith("verdict.") or name.endswith("-threshold")


def reload_settings(argv: Sequence[str] | None, sampler: Sampler) -> None:
    """On SIGHUP: resolve flags and --config.file again and apply what can change live. A
    configuration that does not resolve leaves the running one as it is."""
    log.info("reloading the configuration")
    try:
        fresh, _ = resolve(argv)
    except ConfigError as e:
        log.error("reload failed, keeping the running configuration: %s", e)
        return
    current = sampler.settings
    changed = sorted(k for k, v in fresh.values.items() if current.values.get(k) != v)
    applied = [k for k in changed if reloadable(k)]
    deferred = [k for k in changed if not reloadable(k)]
    sampler.settings = Settings({**current.values, **{k: fresh[k] for k in applied}})
    if LOG_LEVEL.name in applied:
        logging.getLogger().setLevel(_LEVELS[fresh[LOG_LEVEL]])
    log.info("configuration reloaded; applied: %s", ", ".join(applied) or "no change")
    if deferred:
        log.warning("configuration reloaded; these changes need a restart and are not applied: %s", ", ".join(deferred))


def main(argv: Sequence[str] | None = None) -> int:
    try:
        settings, args = resolve(argv)
    except ConfigError as e:
        print(f"gpuwait-exporter: error: {e}", file=sys.stderr)
        return 2
    if args.version:
        print(f"gpuwait-exporter {__version__}")
        return 0
    setup_logging(settings[LOG_LEVEL])

    collectors = enabled_collectors(settings)
    replayer = None
    recorder = None
    try:
        if settings[REPLAY_FILE]:
            sampler, replayer = _replay_sampler(collectors, settings)
        elif settings[SIMULATE_SCENARIO]:
            sampler = _simulated_sampler(collectors, settings)
            if settings[RECORD_FILE]:
                recorder = _recorder(sampler, settings)
        else:
            limit_arenas()  # before the sampler's threads: see gpuwait.core.allocator
            sampler = Sampler(collectors, settings)
            if settings[RECORD_FILE]:
                recorder = _recorder(sampler, settings)
    except (ConfigError, TraceError) as e:
        print(f"gpuwait-exporter: error: {e}", file=sys.stderr)
        return 2
    if replayer:
        def ready() -> list[str]:
            if replayer.error is not None:
                # A replay cut short serves a partial trace: its figures must not pass for the whole.
                return [f"replay stopped: {replayer.error}"]
            return [] if replayer.readings > 0 or replayer.finished.is_set() else ["replay has delivered no reading yet"]
    else:
        ready = sampler.not_ready
    try:
        server = make_server(
            settings[WEB_LISTEN_ADDRESS], settings[WEB_TELEMETRY_PATH], GpuwaitCollector(sampler, collectors),
            healthy=(lambda: True) if replayer else sampler.alive, ready=ready,
            web_config_file=settings[WEB_CONFIG_FILE], max_connections=settings[WEB_MAX_CONNECTIONS],
            max_requests=settings[WEB_MAX_REQUESTS],
        )
    except ConfigError as e:
        print(f"gpuwait-exporter: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"gpuwait-exporter: error: cannot listen on {settings[WEB_LISTEN_ADDRESS]}: {e.strerror or e}", file=sys.stderr)
        return 1

    stop = threading.Event()

    def request_stop(signum, _frame) -> None:
        log.info("received %s, shutting down", signal.Signals(signum).name)
        stop.set()

    reload_requested = threading.Event()

    def request_reload(_signum, _frame) -> None:
        reload_requested.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGHUP, request_reload)

    if replayer:
        threading.Thread(target=replayer.run, args=(stop,), name="replay", daemon=True).start()
    else:
        sampler.start()
    serve_in_thread(server)
    host, port = server.server_address[:2]
    log.info(
        "gpuwait %s listening on %s:%s%s; collectors: %s; sampling every %gs (slow tier %gs), window %gs",
        __version__, host or "*", port, settings[WEB_TELEMETRY_PATH],
        ", ".join(c.name for c in collectors) or "none",
        settings.sample_interval, settings.slow_interval, settings.analysis_window,
    )
    # A reload runs off the main thread: parsing a large config file takes seconds, and
    # SIGTERM must not wait for it. One runs at a time; a SIGHUP meanwhile starts the next.
    reloading: threading.Thread | None = None
    while not stop.wait(0.5):
        if reload_requested.is_set() and (reloading is None or not reloading.is_alive()):
            reload_requested.clear()
            reloading = threading.Thread(target=reload_settings, args=(argv, sampler), name="reload", daemon=True)
            reloading.start()
    server.shutdown()
    server.server_close()
    if not replayer:
        sampler.stop()
    if recorder:
        recorder.close()
    log.info("stopped")
    return 0
