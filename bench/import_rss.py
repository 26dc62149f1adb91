"""What the exporter's imports cost in resident memory, before it has sampled anything.

    python3 bench/import_rss.py [--python PYTHON]

A fresh interpreter imports, one after the other, the third-party libraries and gpuwait's own
packages, and reports the resident memory each step adds (VmRSS of /proc/self/status). The
order is the one ``import gpuwait.cli`` brings them in, so each step counts what the earlier
ones have not already loaded. Then it imports what the exporter loads only where it is used
(``ssl`` where TLS or users are configured, ``http.client`` for a kubelet, prometheus-client
for a format only the library writes), and reports which of those the exporter's own imports
had already loaded: none, when they are as they should be. Run it with the
interpreter the exporter runs on (``--python``): a site-packages ``.pth`` file that imports a
module at start-up shows in the first line.

Not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parent.parent

STEPS = (
    "yaml", "psutil", "gpuwait.core.config", "gpuwait.core.sampler", "gpuwait.collectors.cpu", "gpuwait.collectors.gpu",
    "gpuwait.analysis.verdict", "gpuwait.core.registry", "gpuwait.exposition.server", "gpuwait.cli",
)
#: Loaded only where used; after the steps above.
ON_USE = ("ssl", "hashlib", "http.client", "prometheus_client")

CHILD = """
import sys
def rss():
    with open("/proc/self/status") as f:
        return int(f.read().split("VmRSS:")[1].split()[0]) / 1024
steps, on_use = sys.argv[1].split(","), sys.argv[2].split(",")
print(f"{'interpreter at start':32s}{rss():8.1f}{'':8s}  ({len(sys.modules)} modules)")
for name in steps:
    before = rss()
    __import__(name)
    print(f"{name:32s}{rss():8.1f}{rss() - before:+8.1f}")
print(f"{'':32s}{'':8s}{'':8s}  ({len(sys.modules)} modules)")
print("loaded only where used:")
for name in on_use:
    before, loaded = rss(), name in sys.modules
    __import__(name)
    note = "  (already loaded by the steps above)" if loaded else ""
    print(f"{name:32s}{rss():8.1f}{rss() - before:+8.1f}{note}")
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", default=sys.executable)
    args = ap.parse_args()
    print(f"{'import':32s}{'RSS MB':>8s}{'added':>8s}")
    env_path = str(REPO / "exporter")
    return subprocess.run([args.python, "-c", CHILD, ",".join(STEPS), ",".join(ON_USE)], env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"},
                          check=False).returncode


if __name__ == "__main__":
    raise SystemExit(main())
