"""The NVML test double in-process, with a clock the test moves."""

from __future__ import annotations

import importlib.util
import os
import sys
import threading

DOUBLE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nvml_double")
DOUBLE_PATH = os.path.join(DOUBLE_DIR, "pynvml.py")
HGX_MACHINE = os.path.join(DOUBLE_DIR, "hgx_h100.yaml")
MIXED_MACHINE = os.path.join(DOUBLE_DIR, "mixed_a100_mig.yaml")

_MODULE_NAME = "gpuwait_tests_nvml_double"


def load_double():
    """The double as its own module object (the name ``pynvml`` stays the real library's in
    the test process); loaded once, reconfigured per test with ``configure``."""
    module = sys.modules.get(_MODULE_NAME)
    if module is None:
        spec = importlib.util.spec_from_file_location(_MODULE_NAME, DOUBLE_PATH)
        module = importlib.util.module_from_spec(spec)
        sys.modules[_MODULE_NAME] = module
        spec.loader.exec_module(module)
    return module


class FakeClock:
    """Machine time for the double: moves only when the test says so."""

    def __init__(self, t: float = 0.0) -> None:
        self.t = t
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self.t

    def set(self, t: float) -> None:
        with self._lock:
            self.t = t

    def advance(self, dt: float) -> None:
        with self._lock:
            self.t += dt


def one_gpu(**gpu) -> dict:
    return {"count": 1, "gpus": {0: gpu}}


def double_env(machine: str) -> dict[str, str]:
    """Environment that makes the exporter process import the double as pynvml."""
    existing = os.environ.get("PYTHONPATH")
    path = DOUBLE_DIR + (os.pathsep + existing if existing else "")
    return {"PYTHONPATH": path, "GPUWAIT_NVML_DOUBLE": machine}
