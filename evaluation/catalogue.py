"""The scenario catalogue of docs/evaluation.md, written from the scenarios themselves so
that the page cannot drift from them:

    python3 -m evaluation.catalogue          # prints the catalogue (Markdown)
    python3 -m evaluation.catalogue --write  # replaces it in docs/evaluation.md

The catalogue sits between BEGIN and END markers in the page; the rest is written by hand.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

from evaluation.scenarios import all_scenarios
from evaluation.sources import CITATIONS

PAGE = pathlib.Path(__file__).resolve().parent.parent / "docs" / "evaluation.md"
BEGIN = "<!-- BEGIN scenario catalogue: python3 -m evaluation.catalogue --write -->"
END = "<!-- END scenario catalogue -->"


def _gpus(indices: list[int]) -> str:
    if len(indices) == 1:
        return f"GPU {indices[0]}"
    if indices == list(range(indices[0], indices[-1] + 1)):
        return f"GPUs {indices[0]}-{indices[-1]}"
    return "GPUs " + ", ".join(str(i) for i in indices)


def _truths(table) -> list[str]:
    groups: dict[int, list[int]] = {}
    first: dict[int, object] = {}
    for gpu, truth in sorted(table.items()):
        key = id(truth)
        groups.setdefault(key, []).append(gpu)
        first.setdefault(key, truth)
    lines = []
    for key, gpus in groups.items():
        t = first[key]
        cites = ", ".join(f"[{c}]" for c in t.cites)
        stalled = " The collective is stalled (`collective_stalled`)." if t.collective_stalled else ""
        lines.append(f"  - {_gpus(gpus)}: **`{t.expected}`**. {t.reason}{stalled} {cites}")
    return lines


def catalogue() -> str:
    scenarios = all_scenarios()
    out = [BEGIN, ""]
    for kind, heading in (("steady", "Steady scenarios"), ("onset", "Onset scenarios")):
        chosen = [s for s in scenarios.values() if s.kind == kind]
        out += [f"### {heading} ({len(chosen)})", ""]
        family = None
        for s in chosen:
            if kind == "steady" and s.family != family:
                family = s.family
                out += [f"#### {family}", ""]
            built = s.build(1)
            claims = f" ({', '.join(s.claims)})" if s.claims else ""
            out.append(f"**`{s.name}`**{claims}: {s.title}." + (f" {s.story}" if s.story else ""))
            if kind == "onset":
                out.append(f"Onset at {s.onset:.0f} s of {s.duration:.0f} s.")
                out += ["- before the onset:"] + _truths(built.before) + ["- after it:"] + _truths(built.truth)
            else:
                out += _truths(built.truth)
            out.append("")
    out += ["### Citations", ""]
    out += [f"- [{key}] {text}" for key, text in CITATIONS.items()]
    out += ["", END]
    return "\n".join(out) + "\n"


def replaced(page: str, text: str) -> str:
    start, end = page.find(BEGIN), page.find(END)
    if start < 0 or end < start:
        raise ValueError(f"{PAGE}: the catalogue markers are missing")
    return page[:start] + text + page[end + len(END) + 1:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m evaluation.catalogue", description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="replace the catalogue in docs/evaluation.md")
    args = parser.parse_args(argv)
    text = catalogue()
    if args.write:
        PAGE.write_text(replaced(PAGE.read_text(), text))
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
