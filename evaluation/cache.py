"""Where generated traces are kept between runs: one folder per hash of the evaluation code,
the seed and the trace format, so a change to the model or the scenarios (or a reader that
knows other sources) regenerates, and an unchanged set is generated once.

The root is ``$GPUWAIT_EVALUATION_CACHE``, else ``gpuwait-evaluation`` in the temporary
directory."""

from __future__ import annotations

import hashlib
import os
import pathlib
import tempfile

PACKAGE = pathlib.Path(__file__).resolve().parent
#: modules that read traces or drive the exporter but do not shape what is generated
NOT_GENERATING = {"cache.py", "score.py", "exporter.py", "onsets.py", "catalogue.py"}


def code_hash() -> str:
    h = hashlib.sha256()
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if str(rel) in NOT_GENERATING:
            continue
        h.update(str(rel).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def root() -> str:
    return os.environ.get("GPUWAIT_EVALUATION_CACHE") or os.path.join(tempfile.gettempdir(), "gpuwait-evaluation")


def cache_dir(seed: int, format_key: str) -> str:
    return os.path.join(root(), f"{code_hash()}-seed{seed}-{format_key}")


def missing(out: str, names: list[str]) -> list[str]:
    """The scenarios whose trace or truth is not in ``out`` yet. The truth is written last,
    so a run cut short leaves no truth and is generated again."""
    return [n for n in names
            if not (os.path.exists(os.path.join(out, f"{n}.jsonl.gz")) and os.path.exists(os.path.join(out, f"{n}.truth.json")))]
