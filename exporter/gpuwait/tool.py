"""The ``gpuwait`` command: tools around the exporter. ``gpuwait diagnose`` walks the
article's order of search for every GPU (docs/diagnose.md)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from gpuwait import diagnose as dg


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:
        # Usage errors share the "could not diagnose" code, not 2 (which means critical).
        self.print_usage(sys.stderr)
        self.exit(dg.UNKNOWN, f"{self.prog}: error: {message}\n")


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
    return parser


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
    args = build_parser().parse_args(argv)
    if args.command == "diagnose":
        return run_diagnose(args)
    return dg.UNKNOWN


if __name__ == "__main__":
    sys.exit(main())
