"""deploy/container/Containerfile, without a container engine: its own COPY and RUN steps
are carried out here, with the image's paths moved into a temporary folder, and the
result is started the way the image's ENTRYPOINT and the DaemonSet's arguments would start
it, then scraped.

What this cannot check: the python:3.11-slim base itself (its Python and libc), the copy
between the two stages, USER 65534 (the virtualenv here is built over this machine's
interpreter, which may sit under a home directory that user cannot enter; the exporter
running as 65534 is shown by tests/test_deploy_systemd.py), and the NVIDIA container
toolkit's injection of the device nodes and libnvidia-ml at container start.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import time
import urllib.request

import pytest
import yaml

from support import REPO, free_port, parse_exposition

CONTAINERFILE = pathlib.Path(REPO) / "deploy" / "container" / "Containerfile"
DAEMONSET = pathlib.Path(REPO) / "deploy" / "kubernetes" / "base" / "daemonset.yaml"

pytestmark = pytest.mark.integration


def instructions(text: str) -> list[tuple[str, str, str]]:
    """(stage, INSTRUCTION, arguments), continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n", " ", "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")))
    out, stage = [], ""
    for line in joined.splitlines():
        if not line.strip():
            continue
        word, _, rest = line.strip().partition(" ")
        word = word.upper()
        if word == "FROM":
            parts = rest.split()
            stage = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else f"stage{len({s for s, _, _ in out})}"
        out.append((stage, word, rest.strip()))
    return out


def test_containerfile_shape():
    steps = instructions(CONTAINERFILE.read_text())
    froms = [rest for _, word, rest in steps if word == "FROM"]
    assert len(froms) == 2 and all(f.split()[0].startswith("docker.io/library/python:3.11-slim") for f in froms)
    final = [(word, rest) for stage, word, rest in steps if stage == steps[-1][0]]
    assert ("USER", "65534:65534") in final
    assert ("ENTRYPOINT", '["gpuwait-exporter"]') in final
    assert ("EXPOSE", "9975") in final
    assert any(word == "COPY" and rest.startswith("--from=build /opt/gpuwait ") for word, rest in final)
    # Nothing is installed in the final stage: no compiler, no pip run there.
    assert not any(word == "RUN" for word, _ in final)


def test_image_install_steps_give_a_working_exporter(tmp_path):
    steps = instructions(CONTAINERFILE.read_text())
    build_stage = steps[0][0]
    prefix, src = tmp_path / "opt-gpuwait", tmp_path / "src"

    def relocate(text: str) -> str:
        text = text.replace("/opt/gpuwait", str(prefix)).replace("/src", str(src))
        return re.sub(r"(?<![\w/])python(?= -m)", shlex.quote(sys.executable), text)

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "PIP_REQUIRE"))}
    for stage, word, rest in steps:
        if stage != build_stage:
            break
        if word == "COPY":
            *sources, dest = rest.split()
            dest = relocate(dest)
            for source in sources:
                origin = pathlib.Path(REPO) / source
                target = pathlib.Path(dest) / origin.name if dest.endswith("/") else pathlib.Path(dest)
                target.parent.mkdir(parents=True, exist_ok=True)
                if origin.is_dir():
                    shutil.copytree(origin, target, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
                else:
                    shutil.copy2(origin, target)
        elif word == "RUN":
            r = subprocess.run(["sh", "-c", relocate(rest)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
            assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]

    final = [(word, rest) for stage, word, rest in steps if stage != build_stage and word != "FROM"]
    run_env = dict(env)
    for word, rest in final:
        if word == "ENV":
            for assignment in shlex.split(rest):
                key, _, value = assignment.partition("=")
                run_env[key] = relocate(value.replace("$PATH", run_env.get("PATH", "")))
    entrypoint = json.loads(next(rest for word, rest in final if word == "ENTRYPOINT"))
    executable = shutil.which(entrypoint[0], path=run_env["PATH"])
    assert executable == str(prefix / "bin" / "gpuwait-exporter")
    assert not (prefix / "bin" / "pip").exists()

    # The installed copy, not this checkout, and every module of it is there.
    r = subprocess.run([str(prefix / "bin" / "python"), "-c", (
        "import gpuwait, importlib, pkgutil, json\n"
        "names = [m.name for m in pkgutil.walk_packages(gpuwait.__path__, 'gpuwait.')]\n"
        "for n in names:\n"
        "    if not n.endswith('__main__'):  # importing it would start the exporter\n"
        "        importlib.import_module(n)\n"
        "print(json.dumps({'file': gpuwait.__file__, 'modules': names}))\n")],
        capture_output=True, text=True, env=run_env, cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    installed = json.loads(r.stdout)
    assert installed["file"].startswith(str(prefix))
    package = pathlib.Path(REPO) / "exporter"
    in_checkout = set()
    for path in (package / "gpuwait").rglob("*.py"):
        parts = path.relative_to(package).with_suffix("").parts
        in_checkout.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    missing = sorted(in_checkout - set(installed["modules"]) - {"gpuwait"})
    assert not missing, f"modules left out of the installed package: {missing}"

    # Started as the image starts it, with the DaemonSet's arguments (the host's /proc and
    # /sys are this machine's own here).
    daemonset = yaml.safe_load(DAEMONSET.read_text())
    args = daemonset["spec"]["template"]["spec"]["containers"][0]["args"]
    port = free_port()
    args = [a.replace("/host/proc", "/proc").replace("/host/sys", "/sys") for a in args if not a.startswith("--web.listen-address")]
    proc = subprocess.Popen([executable, *entrypoint[1:], *args, f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=run_env, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, proc.stdout.read().decode()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=5) as ready:
                    if ready.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "exporter from the image's install steps never became ready"
            time.sleep(0.1)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            samples = parse_exposition(r.read().decode())
        assert any(v == 1 for _, v in samples.get("gpuwait_source_up", [])), sorted(samples)
    finally:
        proc.terminate()
        proc.wait(20)
