import os
import pathlib

import pytest
from hypothesis import HealthCheck, settings

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
#: A whole host as procfs/sysfs trees, for sources and for the exporter process.
HOST_TREE = FIXTURES / "host"
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
