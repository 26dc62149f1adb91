"""The evaluation's only contact with the exporter: what its trace reader accepts, its
diagnosis of a trace (``gpuwait diagnose --trace FILE --json``), and the verdict it exposes
after every analysis pass of a replay, for the onset scenarios.

Nothing here reads the exporter's analysis: the diagnosis comes from its command line, and
the per-pass verdicts from the same replay (trace reader, sampler, analysis at the trace's
own times) that ``diagnose --trace`` runs, read through the exposition a scrape would see.
The exporter's package layout has moved between releases (``gpuwait.sampler`` became
``gpuwait.core.sampler``), so each part is looked up where either layout keeps it.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import os
import pathlib
import subprocess
import sys
from dataclasses import dataclass

REPO = pathlib.Path(__file__).resolve().parent.parent

#: the sources of trace format version 1, which every reader accepts
VERSION_1_SOURCES = frozenset({"cpu", "pressure", "diskstats", "netdev", "nfs", "rdma_traffic", "rdma", "gpu",
                               "gpu_device", "workload"})


@dataclass(frozen=True)
class TraceFormat:
    """What a trace reader accepts: its format version and the sources it knows; and a hash
    of how the exporter files the gpu source's values into rows, which shapes the traces too."""

    version: int
    sources: frozenset[str]
    row_filing: str = ""

    @property
    def key(self) -> str:
        """A short name for cache folders: the version, the sources beyond version 1 and the
        row filing's hash."""
        extra = sorted(self.sources - VERSION_1_SOURCES)
        return f"v{self.version}" + "".join(f"+{s}" for s in extra) + (f"-rows{self.row_filing}" if self.row_filing else "")


VERSION_1 = TraceFormat(1, VERSION_1_SOURCES)


def _first(*candidates: tuple[str, str]):
    errors = []
    for module, name in candidates:
        try:
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError) as e:
            errors.append(f"{module}.{name}: {e}")
    raise ImportError("the installed gpuwait has none of " + "; ".join(errors))


def _registry():
    return _first(("gpuwait.core.registry", "registry"), ("gpuwait.collectors", "registry"))()


def _slot_rows():
    return _first(("gpuwait.collectors.gpu.window", "SlotRows"), ("gpuwait.stats.gpu", "SlotRows"))


def row_filer(step: float):
    """The gpu source's filing of timed values into window rows of ``step`` seconds (``add``
    a value under its time, ``flush`` the rows complete by a time): the trace format's
    ``rows`` of the gpu payload are what it hands out."""
    return _slot_rows()(step)


def installed_format() -> TraceFormat:
    """The format of the gpuwait trace reader importable here."""
    from gpuwait.cli import payload_types
    from gpuwait.trace.file import VERSION

    filing = hashlib.sha256(inspect.getsource(_slot_rows()).encode()).hexdigest()[:8]
    return TraceFormat(int(VERSION), frozenset(payload_types(list(_registry()))), filing)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(REPO / "exporter")] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def diagnose(trace: str, timeout: float = 900.0) -> dict:
    """``gpuwait diagnose --trace TRACE --json`` of this checkout's exporter, as its JSON;
    ``{"error": message}`` when it could not diagnose."""
    try:
        proc = subprocess.run([sys.executable, "-m", "gpuwait.tool", "diagnose", "--trace", trace, "--json"],
                              capture_output=True, text=True, env=_env(), timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"diagnose did not finish within {timeout:.0f} s"}
    # 0, 1 and 2 are diagnoses (ok, warning, critical); 3 is "could not diagnose"
    if proc.returncode not in (0, 1, 2):
        message = (proc.stderr.strip() or proc.stdout.strip() or f"exit status {proc.returncode}").splitlines()[-1]
        return {"error": message}
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError as e:
        return {"error": f"diagnose printed no JSON ({e})"}


def verdicts(diagnosis: dict) -> dict[int, str]:
    """GPU index -> verdict of a ``diagnose --json`` result."""
    return {int(g["gpu"]): g["verdict"] for g in diagnosis.get("gpus", []) if str(g.get("gpu", "")).isdigit()}


def verdict_series(trace: str) -> dict[int, list[tuple[float, str]]]:
    """Replays ``trace`` through the exporter's sampler and analysis as fast as it can, as
    ``diagnose --trace`` does, and returns GPU index -> [(trace time, verdict)] after every
    analysis pass. Raises ValueError when the trace cannot be read or replayed."""
    payload_types = _first(("gpuwait.cli", "payload_types"))
    resolve = _first(("gpuwait.core.registry", "resolve"), ("gpuwait.config", "resolve"))
    sampler_class = _first(("gpuwait.core.sampler", "Sampler"), ("gpuwait.sampler", "Sampler"))
    exposition = _first(("gpuwait.exposition.prometheus", "GpuwaitCollector"),
                        ("gpuwait.exposition.collector", "GpuwaitCollector"))
    from gpuwait.trace.file import TraceError, TraceReader
    from gpuwait.trace.replay import ReplayedSource, Replayer

    collectors = list(_registry())
    settings = resolve([])[0]
    try:
        reader = TraceReader(trace, payload_types(collectors))
    except (OSError, TraceError) as e:
        raise ValueError(f"cannot read {trace}: {e}") from None
    series: dict[int, list[tuple[float, str]]] = {}

    class Observed(sampler_class):
        """The exporter's sampler, with the verdict read out after each analysis pass."""

        def analyse_once(self, now=None, **kw):
            result = super().analyse_once(now=now, **kw)
            for family in scrape.collect():
                if family.name != "gpuwait_gpu_verdict":
                    continue
                for sample in family.samples:
                    gpu = sample.labels.get("gpu", "")
                    if sample.value == 1 and gpu.isdigit():
                        series.setdefault(int(gpu), []).append((float(now), sample.labels["cause"]))
            return result

    sampler = Observed(collectors, settings,
                       make_source=lambda spec, _s: ReplayedSource(spec.name, spec.tier or "fast"))
    scrape = exposition(sampler, [c for c in collectors if c.name == "verdict"])
    replayer = Replayer(sampler, reader, speed=0)
    replayer.run()
    reader.close()
    if replayer.error:
        raise ValueError(f"replay of {trace} stopped: {replayer.error}")
    return series


def analysis_window() -> float:
    """The exporter's default analysis window, in seconds."""
    resolve = _first(("gpuwait.core.registry", "resolve"), ("gpuwait.config", "resolve"))
    return float(resolve([])[0]["analysis.window"])
