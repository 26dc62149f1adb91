"""The README says what the code does: every option, the commands CI runs, the links."""

from __future__ import annotations

import pathlib
import re

from gpuwait.core.registry import registry
from gpuwait.core.registry import OPTIONS, resolve
from support import REPO

ROOT = pathlib.Path(REPO)
README = (ROOT / "README.md").read_text()
CI_SCRIPT = (ROOT / ".ci" / "run").read_text()
TEST_COMMAND = "python3 -m pip install -e '.[test]' && python3 -m pytest"
RUN_COMMAND = "python3 -m pip install . && gpuwait-exporter"


def help_block() -> str:
    match = re.search(r"```text\n\$ gpuwait-exporter --help\n(.*?)```", README, re.S)
    assert match, "README has no '$ gpuwait-exporter --help' block"
    return match.group(1)


def test_every_option_documented():
    collectors = registry()  # importing the collectors registers their options
    missing = [o.name for o in OPTIONS if f"--{o.name}" not in README]
    missing += [f"collector.{c.name}" for c in collectors if f"--collector.{c.name}" not in README]
    assert not missing, f"README lacks {missing}; refresh it with: python3 tools/update_readme_help.py"


def test_help_block_has_no_stale_flags():
    registry()
    known = {o.name for o in OPTIONS} | {f"collector.{c.name}" for c in registry()} | {"config.file", "version", "help"}
    documented = set(re.findall(r"--([a-z][a-z0-9.\-]*[a-z0-9])", help_block()))
    stale = sorted(documented - known - _aliases())
    assert not stale, f"README documents flags that no longer exist: {stale}; run python3 tools/update_readme_help.py"


def _aliases() -> set[str]:
    return {alias for o in OPTIONS for alias in getattr(o, "aliases", ())}


def test_exactly_two_setup_commands_and_ci_runs_the_test_one():
    commands = re.findall(r"```sh\n(.*?)\n```", README, re.S)
    assert RUN_COMMAND in commands and TEST_COMMAND in commands
    assert sum(1 for line in CI_SCRIPT.splitlines() if line.strip() == TEST_COMMAND) == 1, (
        ".ci/run must run exactly the README's test command"
    )


def test_default_port_matches_config():
    settings, _ = resolve([])
    port = settings["web.listen-address"].rsplit(":", 1)[1]
    assert port == "9975"
    assert f"**{port}**" in README


def test_links_resolve():
    for target in re.findall(r"\]\(([^)#]+)\)", README):
        if "://" not in target:
            assert (ROOT / target).exists(), f"README links to missing {target}"


def test_verdict_vocabulary_matches_analysis():
    from gpuwait.core.facts import CAUSES

    rows = set(re.findall(r"^\| `([a-z_]+)` \|", README, re.M))
    assert set(CAUSES) <= rows, f"README's verdict table lacks {set(CAUSES) - rows}"
