"""Regenerate the golden outputs of ``gpuwait diagnose`` (tests/golden/diagnose/), one per
simulated scenario, plus variants whose loops report their timing (gpuwait.client):

    python3 tools/update_diagnose_golden.py

Each file is exactly what ``gpuwait diagnose --simulate <scenario> [--simulate-params ...]``
prints; tests/diagnose/test_diagnose.py compares them byte for byte.
"""

from __future__ import annotations

import contextlib
import io
import pathlib
import sys

GOLDEN = pathlib.Path(__file__).resolve().parent.parent / "tests" / "golden" / "diagnose"
#: Scenarios re-run with instrumented loops: the data-wait share as evidence (A8), a loop's
#: own progress as demand (A13).
WORKLOAD_VARIANTS = ("data_pipeline", "storage", "low_load_inference", "straggler")


def cases() -> list[tuple[str, list[str]]]:
    from gpuwait.simulate.model import SCENARIOS

    out = [(name, ["diagnose", "--simulate", name]) for name in sorted(SCENARIOS)]
    out += [(f"{name}+workload", ["diagnose", "--simulate", name, "--simulate-params", "workload=1"])
            for name in WORKLOAD_VARIANTS]
    return out


def render(argv: list[str]) -> tuple[str, int]:
    from gpuwait.tool import main

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = main(argv)
    return buffer.getvalue(), code


def main() -> None:
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for stem, argv in cases():
        text, code = render(argv)
        (GOLDEN / f"{stem}.txt").write_text(text)
        print(f"{stem}: exit {code}", file=sys.stderr)


if __name__ == "__main__":
    main()
