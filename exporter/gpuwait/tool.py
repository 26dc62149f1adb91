"""The ``gpuwait`` command: tools around the exporter. ``gpuwait diagnose`` walks the
article's order of search for every GPU (docs/diagnose.md); ``gpuwait selfcheck`` runs the
exporter against this node's GPU under workloads of known cause (docs/selfcheck.md)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from gpuwait import diagnose as dg


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, usage_exit: int = dg.UNKNOWN, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.usage_exit = usage_exit

    def error(self, message: str) -> None:
        # A usage error exits with each command's "could not run" code: diagnose's 3 (its 2
        # means critical), selfcheck's 2.
        self.print_usage(sys.stderr)
        self.exit(self.usage_exit, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="gpuwait", description="Tools for gpuwait, the exporter that tells what a GPU waits for.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    d = sub.add_parser("diagnose", help="Explain what each GPU waits for, in the order of the method (A14).",
                       description="Walk the method's order for every GPU: impact or demand, computing or waiting,"
                                   " waiting on what, and the next checks for its scope. Exit code: 0 nothing"
                                   " wrong, 1 a GPU waits (warning), 2 a GPU waits and its owner's throughput"
                                   " dropped, or a GPU is down (critical), 3 could not diagnose.")
    source = d.add_mutually_exclusive_group(required=True)
    source.add_argument("--exporter", metavar="URL", help="a running gpuwait exporter, e.g. http://node1:9975")
    source.add_argument("--prometheus", metavar="URL", help="a Prometheus server that scrapes gpuwait exporters")
    source.add_argument("--trace", metavar="FILE", help="a trace recorded with --record.file, replayed through the analysis")
    source.add_argument("--simulate", metavar="SCENARIO", help="a simulated scenario run in virtual time (see docs/verdicts.md)")
    d.add_argument("--simulate-params", default="", metavar="K=V,...", help="parameters of the simulated scenario")
    d.add_argument("--instance", help="with --prometheus: the exporter's instance label (required when several are scraped)")
    d.add_argument("--owner", help="only the GPUs of this owner (e.g. kubernetes:<pod uid>, slurm:<job id>)")
    d.add_argument("--since", default="1h", metavar="RANGE",
                   help="with --prometheus: the range the owner's throughput baseline is averaged over (default 1h)")
    d.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS", help="HTTP timeout (default 10)")
    d.add_argument("--json", action="store_true", help="print the diagnosis as JSON")
    _add_selfcheck(sub)
    parser.commands = {"diagnose": d, "selfcheck": sub.choices["selfcheck"]}
    return parser


def _add_selfcheck(sub) -> None:
    from gpuwait.selfcheck import phases
    from gpuwait.selfcheck.report import SETUP_ERROR

    s = sub.add_parser("selfcheck", usage_exit=SETUP_ERROR,
                       help="Check the verdict on this node's GPU under workloads whose cause is known.",
                       description="Run the exporter against a real GPU while PyTorch workloads of known cause run one"
                                   " after another (compute, a starved DataLoader, a CPU quota, pageable copies,"
                                   " random reads, tiny kernels, an idle context), and compare each phase's verdict"
                                   " with its cause (docs/selfcheck.md). Needs pip install 'gpuwait[selfcheck]'."
                                   " Exit code: 0 every phase agrees, 1 a phase disagrees, 2 could not check.")
    s.add_argument("--gpu", type=int, default=0, metavar="N", help="the GPU's index, as nvidia-smi and the exporter's gpu label number it (default 0)")
    s.add_argument("--phase-seconds", type=float, default=phases.DEFAULT_PHASE_SECONDS, metavar="S",
                   help=f"seconds of each phase read out once the window holds only that phase (default {phases.DEFAULT_PHASE_SECONDS:g})")
    s.add_argument("--window", type=float, default=phases.DEFAULT_WINDOW, metavar="S",
                   help=f"the exporter's --analysis.window during the check, which is also each phase's settle time (default {phases.DEFAULT_WINDOW:g})")
    s.add_argument("--phase", action="append", choices=[p.name for p in phases.PHASES], metavar="NAME",
                   help="run only this phase (repeatable): " + ", ".join(p.name for p in phases.PHASES))
    s.add_argument("--out", metavar="DIR", help="where the report, the traces and the logs go (default ./gpuwait-selfcheck-HOST-TIME)")
    s.add_argument("--data-dir", metavar="DIR", help="where random_reads writes its 1 GiB file: the storage to check (default --out)")
    s.add_argument("--json", action="store_true", help="print the report as JSON")
    s.add_argument("--exporter-arg", action="append", default=[], metavar="FLAG",
                   help="one more flag for the exporter, e.g. --exporter-arg=--collector.nfs.ops=read (repeatable)")
    s.add_argument("--workload-command", metavar="CMD",
                   help="the phase driver to run instead of the PyTorch workloads (docs/selfcheck.md, 'Phase drivers')")


def run_selfcheck(args: argparse.Namespace) -> int:
    from gpuwait.selfcheck import runner
    from gpuwait.selfcheck.report import SETUP_ERROR, render_text

    try:
        options = runner.Options(
            out=args.out or runner.default_out(), gpu=args.gpu, window=args.window, phase_seconds=args.phase_seconds,
            phases=tuple(args.phase or ()), data_dir=args.data_dir, exporter_args=tuple(args.exporter_arg),
            workload_command=runner.parse_command(args.workload_command) if args.workload_command else runner.WORKLOAD_COMMAND)
        selfcheck = runner.Runner(options)
    except ValueError as e:
        print(f"gpuwait selfcheck: {e}", file=sys.stderr)
        return SETUP_ERROR
    report = selfcheck.run()
    if report.error:
        print(f"gpuwait selfcheck: {report.error}", file=sys.stderr)
    sys.stdout.write(report.to_json() + "\n" if args.json else render_text(report))
    return report.exit_code


def run_diagnose(args: argparse.Namespace) -> int:
    try:
        if args.exporter:
            metrics, source = dg.from_exporter(args.exporter, args.timeout), f"exporter {args.exporter}"
        elif args.prometheus:
            metrics = dg.from_prometheus(args.prometheus, args.instance, args.since, args.timeout)
            source = f"prometheus {args.prometheus}" + (f" instance {args.instance}" if args.instance else "")
        elif args.trace:
            metrics, source = dg.from_trace(args.trace), f"trace {args.trace}"
        else:
            metrics = dg.from_simulation(args.simulate, args.simulate_params)
            source = f"simulation {args.simulate}" + (f" ({args.simulate_params})" if args.simulate_params else "")
        report = dg.diagnose(metrics, source, args.owner)
    except dg.DiagnoseError as e:
        print(f"gpuwait diagnose: {e}", file=sys.stderr)
        return dg.UNKNOWN
    sys.stdout.write(report.to_json() + "\n" if args.json else dg.render_text(report))
    return report.severity


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        parser.commands[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command == "diagnose":
        return run_diagnose(args)
    if args.command == "selfcheck":
        return run_selfcheck(args)
    return dg.UNKNOWN


if __name__ == "__main__":
    sys.exit(main())
