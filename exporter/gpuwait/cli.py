"""``gpuwait-exporter``: parse flags and config, start the sampler and the HTTP endpoint."""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from collections.abc import Sequence

from prometheus_client import CollectorRegistry

from gpuwait import __version__
from gpuwait.collectors import CollectorSpec, registry
from gpuwait.config import COLLECTOR_DEFAULTS, Settings, resolve
from gpuwait.errors import ConfigError
from gpuwait.exposition.collector import GpuwaitCollector
from gpuwait.sampler import Sampler
from gpuwait.server import make_server, serve_in_thread

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


def main(argv: Sequence[str] | None = None) -> int:
    for collector in registry():
        COLLECTOR_DEFAULTS.setdefault(collector.name, collector.default_enabled)
    try:
        settings, args = resolve(argv)
    except ConfigError as e:
        print(f"gpuwait-exporter: error: {e}", file=sys.stderr)
        return 2
    if args.version:
        print(f"gpuwait-exporter {__version__}")
        return 0
    setup_logging(settings["log.level"])

    collectors = enabled_collectors(settings)
    try:
        sampler = Sampler(collectors, settings)
    except ConfigError as e:
        print(f"gpuwait-exporter: error: {e}", file=sys.stderr)
        return 2
    prom_registry = CollectorRegistry(auto_describe=False)
    prom_registry.register(GpuwaitCollector(sampler, collectors))
    try:
        server = make_server(
            settings["web.listen-address"], settings["web.telemetry-path"], prom_registry,
            healthy=sampler.alive, ready=sampler.ready,
        )
    except ConfigError as e:
        print(f"gpuwait-exporter: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"gpuwait-exporter: error: cannot listen on {settings['web.listen-address']}: {e.strerror or e}", file=sys.stderr)
        return 1

    stop = threading.Event()

    def request_stop(signum, _frame) -> None:
        log.info("received %s, shutting down", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)

    sampler.start()
    serve_in_thread(server)
    host, port = server.server_address[:2]
    log.info(
        "gpuwait %s listening on %s:%s%s; collectors: %s; sampling every %gs (slow tier %gs), window %gs",
        __version__, host or "*", port, settings["web.telemetry-path"],
        ", ".join(c.name for c in collectors) or "none",
        settings.sample_interval, settings.slow_interval, settings.analysis_window,
    )
    while not stop.wait(1.0):
        pass
    server.shutdown()
    server.server_close()
    sampler.stop()
    log.info("stopped")
    return 0
