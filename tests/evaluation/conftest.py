import pathlib
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from evaluation.exporter import installed_format  # noqa: E402
from evaluation.generate import generate  # noqa: E402
from evaluation.scenarios import select  # noqa: E402

#: seconds of trace for the short runs the tests make (the scored set runs 75 s and 165 s)
SHORT = 8.0


@pytest.fixture(scope="session")
def trace_format():
    return installed_format()


@pytest.fixture(scope="session")
def short_runs(tmp_path_factory, trace_format):
    """Short runs of a few scenarios, generated once: name -> (folder, truth)."""
    made = {}

    def run(name: str, seed: int = 1, duration: float = SHORT, onset: float | None = None, folder: str = "short"):
        key = (name, seed, duration, onset, folder)
        if key not in made:
            out = tmp_path_factory.mktemp(folder)
            scenario = select(name)[0]
            if scenario.kind == "onset" and onset is None:
                onset = duration / 2
            made[key] = (out, generate(scenario, str(out), seed, trace_format, duration=duration, onset=onset))
        return made[key]
    return run
