"""Rewrite the ``gpuwait-exporter --help`` block of README.md from the real parser.

    python3 tools/update_readme_help.py

The block is the fenced text after the line ``$ gpuwait-exporter --help``; it is rendered
100 columns wide so the output does not depend on the terminal it was run in.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"
BLOCK = re.compile(r"(```text\n\$ gpuwait-exporter --help\n)(.*?)(```)", re.S)


def help_text() -> str:
    env = dict(os.environ, COLUMNS="100")
    out = subprocess.run([sys.executable, "-m", "gpuwait", "--help"], capture_output=True, text=True, env=env, check=True)
    return out.stdout


def main() -> int:
    text = README.read_text()
    if not BLOCK.search(text):
        print(f"{README}: no '$ gpuwait-exporter --help' block found", file=sys.stderr)
        return 1
    README.write_text(BLOCK.sub(lambda m: m.group(1) + help_text() + m.group(3), text, count=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
