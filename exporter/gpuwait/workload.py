"""``gpuwait.workload``: the name jobs import the workload timing client by. The client is
``gpuwait.client``; this module re-exports its public names."""

from gpuwait.client import *  # noqa: F401,F403
from gpuwait.client import __all__  # noqa: F401
