"""Runs the phases one after another: for each, the workload first (until it runs steadily),
then the exporter, recording its own trace, for a settle time and the phase's read-out; then
every trace is replayed through ``gpuwait diagnose --trace --json``."""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TextIO

from gpuwait import __version__
from gpuwait.selfcheck import cgroup, readout
from gpuwait.selfcheck.children import (ChildError, Exporter, Workload, child_env, read_counters, tail,
                                        tree_cpu_seconds)
from gpuwait.selfcheck.phases import DEFAULT_PHASE_SECONDS, DEFAULT_WINDOW, Phase, Schedule, schedule, select
from gpuwait.selfcheck.report import AGREE, DISAGREE, ERROR, SKIPPED, PhaseResult, Report, render_text

WORKLOAD_COMMAND = (sys.executable, "-m", "gpuwait.selfcheck.workload")
#: The cpu_quota phase's limit: one core's worth of CPU time per period.
QUOTA_CORES = 1.0
#: Workers the cpu_quota phase runs under that limit: twice what the GPU step asks for (the
#: step is a quarter of one batch's CPU time, so four cores keep up), as far as the cores allow.
QUOTA_WORKERS = 8


class SetupError(Exception):
    """The self-check cannot go on (no PyTorch, no GPU, the exporter failed)."""


@dataclass
class Options:
    out: str
    gpu: int = 0
    window: float = DEFAULT_WINDOW
    phase_seconds: float = DEFAULT_PHASE_SECONDS
    phases: tuple[str, ...] = ()
    data_dir: str | None = None
    workload_command: tuple[str, ...] = WORKLOAD_COMMAND
    exporter_args: tuple[str, ...] = ()
    #: how long a workload may take to be ready (PyTorch import, CUDA context, data)
    setup_timeout: float = 180.0
    progress: TextIO = field(default=sys.stderr)


def default_out() -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"gpuwait-selfcheck-{socket.gethostname()}-{stamp}"


def parse_command(text: str) -> tuple[str, ...]:
    argv = tuple(shlex.split(text))
    if not argv:
        raise ValueError("--workload-command is empty")
    return argv


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class Runner:
    def __init__(self, options: Options) -> None:
        self.o = options
        self.schedule: Schedule = schedule(options.window, options.phase_seconds, select(options.phases))
        self.out = os.path.abspath(options.out)
        self.env = child_env()
        self.workload_env = child_env({"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": str(options.gpu)})
        self.gpu: dict[str, object] = {"index": options.gpu}
        self.key: readout.GpuKey | None = None
        self.exporter_failed = False

    def say(self, text: str) -> None:
        print(f"gpuwait selfcheck: {text}", file=self.o.progress, flush=True)

    def path(self, stem: str, suffix: str) -> str:
        return os.path.join(self.out, f"{stem}.{suffix}")

    # -- the whole run ----------------------------------------------------------------------
    def run(self) -> Report:
        started = time.monotonic()
        os.makedirs(self.out, exist_ok=True)
        s = self.schedule
        report = Report(socket.gethostname(), datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), __version__,
                        self.gpu, {"window_seconds": s.window, "phase_seconds": s.phase_seconds,
                                   "verdict_interval_seconds": s.verdict_interval, "settle_seconds": s.settle,
                                   "exporter_args": self.exporter_args("TRACE"), "out": self.out,
                                   "workload_command": list(self.o.workload_command)}, [])
        self.say(f"{len(s.phases)} phases, each {s.settle:g} s of settling and {s.phase_seconds:g} s read out,"
                 f" about {s.estimate() / 60:.1f} min with setup; output in {self.out}")
        try:
            self.probe()
            for number, phase in enumerate(s.phases, 1):
                result = self.run_phase(number, phase)
                report.phases.append(result)
                if self.exporter_failed:
                    # The exporter would fail the same way for every phase left.
                    for later in s.phases[number:]:
                        report.phases.append(self._result(later, ERROR, "not run: the exporter failed in an earlier phase"))
                    break
            self.replay_all(report.phases)
        except SetupError as e:
            report.error = str(e)
        report.seconds = time.monotonic() - started
        with open(os.path.join(self.out, "report.json"), "w") as f:
            f.write(report.to_json() + "\n")
        with open(os.path.join(self.out, "report.txt"), "w") as f:
            f.write(render_text(report))
        return report

    def probe(self) -> None:
        workload = Workload([*self.o.workload_command, "probe"], self.path("probe", "log"), self.workload_env)
        try:
            event = workload.next_event(self.o.setup_timeout)
        except ChildError as e:
            raise SetupError(f"the workload's probe failed: {e}") from None
        finally:
            workload.stop()
        if event.get("event") == "error":
            raise SetupError(event.get("error", "the workload's probe failed"))
        if event.get("event") != "probe":
            raise SetupError(f"the workload's probe answered {event}")
        self.gpu.update({k: event.get(k) for k in ("device", "uuid", "torch", "cuda", "capability", "memory_bytes")})
        self.say(f"GPU {self.o.gpu}: {event.get('device')} {event.get('uuid') or ''} (PyTorch {event.get('torch')})")

    def exporter_args(self, trace: str) -> list[str]:
        s = self.schedule
        return [f"--record.file={trace}", f"--analysis.window={s.window:g}s",
                f"--verdict.interval={s.verdict_interval:g}s", *self.o.exporter_args]

    def workload_args(self, phase: Phase, stem: str) -> list[str]:
        if phase.name == "few_workers":
            return ["--workers", "1"]
        if phase.name == "cpu_quota":
            return ["--workers", str(max(2, min(QUOTA_WORKERS, _cores() - 2)))]
        if phase.name == "random_reads":
            directory = os.path.abspath(self.o.data_dir or self.out)
            return ["--data-file", os.path.join(directory, f"{stem}.{os.getpid()}.data")]
        return []

    # -- one phase ---------------------------------------------------------------------------
    def _result(self, phase: Phase, status: str, reason: str = "") -> PhaseResult:
        return PhaseResult(phase.name, phase.title, phase.expected, list(phase.accepted), status, reason,
                           evidence_keys=list(phase.evidence), truth_keys=list(phase.truth))

    def run_phase(self, number: int, phase: Phase) -> PhaseResult:
        started = time.monotonic()
        stem = f"{number:02d}-{phase.name}"
        self.say(f"[{number}/{len(self.schedule.phases)}] {phase.name}: {phase.title}")
        result = self._result(phase, ERROR)
        quota = None
        if phase.cpu_quota:
            try:
                quota = cgroup.QuotaGroup.create(QUOTA_CORES, f"gpuwait-selfcheck-{os.getpid()}")
            except cgroup.Unavailable as e:
                result.status, result.reason = SKIPPED, f"skipped: no CPU quota can be set here: {e}"
                self.say(f"  {result.reason}")
                return result
        trace = self.path(stem, "trace.jsonl.gz")
        files = {"trace": trace, "exporter_log": self.path(stem, "exporter.log"),
                 "workload_log": self.path(stem, "workload.log"), "counters": self.path(stem, "counters.json")}
        argv = [*self.o.workload_command, "run", phase.name, "--counters", files["counters"],
                *self.workload_args(phase, stem)]
        workload = exporter = None
        try:
            try:
                workload = Workload(argv, files["workload_log"], self.workload_env, quota.enter if quota else None)
            except ChildError as e:
                if quota is None:
                    raise
                result.status, result.reason = SKIPPED, f"skipped: the workload could not enter {quota.path}: {e}"
                return result
            event = workload.next_event(self.o.setup_timeout)
            if event.get("event") == "skip":
                result.status, result.reason = SKIPPED, f"skipped: {event.get('reason')}"
                return result
            if event.get("event") != "ready":
                result.reason = f"the workload could not be set up: {event.get('error', event)}"
                return result
            result.setup = dict(event.get("setup") or {})
            self.say(f"  workload ready (pid {event.get('pid')}){': ' + _brief(result.setup) if result.setup else ''}")
            exporter = Exporter(self.exporter_args(trace), files["exporter_log"], self.env).start()
            result.files = {k: v for k, v in files.items() if k != "counters"}
            key = self.wait_for_gpu(exporter, event.get("uuid"), files["exporter_log"])
            s = self.schedule
            settled_at = exporter.ready_at + s.settle
            self.say(f"  exporter ready; settling {s.settle:g} s, then reading {s.phase_seconds:g} s")
            # Reads while the window fills serve only the owner's CPU counter, which the
            # exporter refreshes on its slow tier; the verdict is read once it has settled.
            earlier, scrapes = [], []
            counters_before = cpu_before = None
            quota_before: dict[str, int] = {}
            end = settled_at + s.phase_seconds
            while True:
                now = time.monotonic()
                if now >= settled_at and counters_before is None:
                    counters_before, cpu_before = read_counters(files["counters"]), tree_cpu_seconds(workload.pid)
                    quota_before = quota.stat() if quota else {}
                (scrapes if now >= settled_at else earlier).append(readout.read(exporter.scrape(), key, now))
                if now >= end:
                    break
                self._wait_until(min(now + 1.0, end if now >= settled_at else settled_at), workload, exporter)
            counters_after, cpu_after = read_counters(files["counters"]), tree_cpu_seconds(workload.pid)
            if quota:
                after = quota.stat()
                result.quota = {"path": quota.path, "cpu.max_cores": quota.cores,
                                **{k: v - quota_before.get(k, 0) for k, v in after.items()}}
            settled = readout.settle(scrapes, earlier)
            result.verdict, result.held, result.verdicts = settled.verdict, settled.held, settled.verdicts
            result.waits, result.evidence = settled.waits, settled.evidence
            result.measured = readout.measured(counters_before, counters_after, cpu_before, cpu_after)
            result.status = AGREE if settled.verdict in phase.accepted else DISAGREE
            if settled.evidence.get("gpu_processes") == 0:
                result.reason = ("the exporter saw no compute process on the GPU, so it cannot know the GPU's owner"
                                 " (in a container without the host's PID namespace NVML's pids are not visible)")
            self.say(f"  verdict {settled.verdict} (held {settled.held:.0%} of {len(scrapes)} reads):"
                     f" {result.status} (expected {'/'.join(phase.accepted)})")
        except ChildError as e:
            result.reason = str(e)
            self.exporter_failed = e.who == "exporter"
            self.say(f"  error: {result.reason.splitlines()[0]}")
        finally:
            if exporter is not None:
                exporter.stop()
            if workload is not None:
                workload.stop()
            if quota is not None:
                try:
                    quota.remove()
                except OSError as e:
                    result.reason = (result.reason + "; " if result.reason else "") + f"could not remove {quota.path}: {e}"
            data_file = next((a for a in argv if a.endswith(".data")), None)
            if data_file and os.path.exists(data_file):
                os.unlink(data_file)
            result.seconds = time.monotonic() - started
        return result

    def wait_for_gpu(self, exporter: Exporter, uuid: str | None, log: str) -> readout.GpuKey:
        """The exporter's labels for the workload's GPU. The exporter is ready once every source
        was read, so a GPU it can see is listed at once; NVML that fails to initialise shows as
        gpuwait_gpu_backend_up 0, and a slow driver gets a few seconds more."""
        started = time.monotonic()
        while True:
            metrics = exporter.scrape()
            key = readout.find_gpu(metrics, uuid, self.o.gpu)
            if key is not None:
                self.key = key
                self.gpu["exporter_index"] = key.gpu
                self.gpu.setdefault("uuid", key.uuid)
                return key
            waited = time.monotonic() - started
            backend = [v for _, v in metrics.get("gpuwait_gpu_backend_up", [])]
            if backend == [0.0] and waited > 3.0:
                raise ChildError("exporter", f"the exporter cannot talk to the NVIDIA driver (gpuwait_gpu_backend_up 0);"
                                             f" its log {log}:\n{tail(log)}")
            if waited > 20.0:
                mig = (" (a MIG instance: NVML gives no utilization under MIG, so there is no verdict to check;"
                       " run the check on a whole GPU)") if (uuid or "").startswith("MIG-") else ""
                raise ChildError("exporter", f"the exporter does not see the workload's GPU {uuid or self.o.gpu}{mig};"
                                             f" it sees: {', '.join(readout.known_gpus(metrics)) or 'no GPU'}")
            time.sleep(0.5)

    @staticmethod
    def _wait_until(t: float, workload: Workload, exporter: Exporter) -> None:
        while True:
            if not workload.alive():
                raise ChildError("workload", f"the workload exited with code {workload.proc.returncode} during the phase:\n{tail(workload.log_path)}")
            if not exporter.alive():
                raise ChildError("exporter", f"the exporter exited with code {exporter.proc.returncode} during the phase:\n{tail(exporter.log_path)}")
            left = t - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, 0.5))

    # -- replays -----------------------------------------------------------------------------
    def replay(self, result: PhaseResult) -> None:
        trace = result.files.get("trace")
        if not trace or not os.path.exists(trace):
            return
        out = self.path(os.path.basename(trace).removesuffix(".trace.jsonl.gz"), "diagnose.json")
        try:
            done = subprocess.run([sys.executable, "-m", "gpuwait.tool", "diagnose", "--trace", trace, "--json"],
                                  capture_output=True, text=True, env=self.env, timeout=600)
        except subprocess.TimeoutExpired:
            result.replay_error = "gpuwait diagnose --trace did not finish in 600 s"
            return
        if done.returncode not in (0, 1, 2):
            result.replay_error = f"gpuwait diagnose --trace failed ({done.returncode}): {done.stderr.strip()}"
            return
        with open(out, "w") as f:
            f.write(done.stdout)
        result.files["diagnosis"] = out
        replayed = readout.replayed(done.stdout, self.key, self.gpu.get("uuid"), self.o.gpu)
        result.replayed_verdict, result.replayed_evidence, result.replay_error = replayed.verdict, replayed.evidence, replayed.error

    def replay_all(self, results: list[PhaseResult]) -> None:
        todo = [r for r in results if r.files.get("trace")]
        if not todo:
            return
        self.say(f"replaying {len(todo)} traces through gpuwait diagnose --trace")
        with ThreadPoolExecutor(max_workers=max(1, min(4, _cores() // 2))) as pool:
            list(pool.map(self.replay, todo))


def _brief(setup: dict) -> str:
    parts = []
    for k, v in setup.items():
        if isinstance(v, float):
            v = f"{v:.3g}"
        parts.append(f"{k}={v}")
    return ", ".join(parts)


def run(options: Options) -> Report:
    return Runner(options).run()
