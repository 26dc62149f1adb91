import os
import pathlib
import sys

import pytest
from hypothesis import HealthCheck, settings

#: Shared helpers (support.py, fixture_host.py, ...) are imported by name from every test
#: folder; the folders themselves hold no __init__.py, so this puts the helpers on the path.
SUPPORT = pathlib.Path(__file__).parent / "support"
if str(SUPPORT) not in sys.path:
    sys.path.insert(0, str(SUPPORT))

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
#: A whole host as procfs/sysfs trees, for sources and for the exporter process.
HOST_TREE = FIXTURES / "host"
#: A second host's sysfs, a hybrid cgroup v1 one, for the cgroup collector (the fixture host's is v2).
CGROUP_V1_TREE = FIXTURES / "host_cgroup_v1"
#: Captured pseudo-file texts, one folder per format, one file per kernel/layout variant.
TEXT_FIXTURES = FIXTURES / "text"

settings.register_profile("dev", max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


@pytest.fixture
def host_tree() -> pathlib.Path:
    return HOST_TREE


def text_fixture(fmt: str, name: str) -> str:
    return (TEXT_FIXTURES / fmt / name).read_text()


# -- the evaluation set (tests/evaluation) ---------------------------------------------------
# Here rather than in a conftest of its own: test modules import this one as ``conftest``,
# and a second module of that name would shadow it for the folders collected after it.

_REPO = pathlib.Path(__file__).resolve().parents[1]
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

from evaluation.exporter import installed_format  # noqa: E402
from evaluation.generate import generate  # noqa: E402
from evaluation.scenarios import select  # noqa: E402

#: seconds of trace for the short runs the tests make (the scored set runs 75 s and 165 s)
EVALUATION_SHORT = 8.0


@pytest.fixture(scope="session")
def trace_format():
    return installed_format()


@pytest.fixture(scope="session")
def short_runs(tmp_path_factory, trace_format):
    """Short runs of a few scenarios, generated once: name -> (folder, truth)."""
    made = {}

    def run(name: str, seed: int = 1, duration: float = EVALUATION_SHORT, onset: float | None = None, folder: str = "short"):
        key = (name, seed, duration, onset, folder)
        if key not in made:
            out = tmp_path_factory.mktemp(folder)
            scenario = select(name)[0]
            if scenario.kind == "onset" and onset is None:
                onset = duration / 2
            made[key] = (out, generate(scenario, str(out), seed, trace_format, duration=duration, onset=onset))
        return made[key]
    return run
