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
