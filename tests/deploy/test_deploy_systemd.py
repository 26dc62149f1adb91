"""deploy/systemd: the unit passes systemd's own checks, install.sh lays out what the unit
expects, and the exporter works under the unit's restrictions (applied by
tests/restricted_exec.py as far as a machine without a running systemd allows)."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import site
import stat
import subprocess
import sys
import urllib.request

import pytest
import yaml

from gpuwait.core.registry import registry
from gpuwait.core.registry import COLLECTOR_DEFAULTS, load_config_file
from gpuwait.exposition.webconfig import load_web_config
from support import REPO, ExporterProcess, parse_exposition

SYSTEMD = pathlib.Path(REPO) / "deploy" / "systemd"
UNIT = SYSTEMD / "gpuwait.service"
HARNESS = pathlib.Path(__file__).parent.parent / "support" / "restricted_exec.py"


def run(cmd, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kw)


@pytest.fixture
def staged_root(tmp_path) -> pathlib.Path:
    """install.sh staged under a root that also holds systemd's own units (the targets the
    unit is ordered after) and a stand-in executable where the virtualenv would be."""
    root = tmp_path / "root"
    r = run(["sh", str(SYSTEMD / "install.sh"), "--destdir", str(root), "--no-venv"])
    assert r.returncode == 0, r.stderr
    for units in ("/usr/lib/systemd/system", "/lib/systemd/system"):
        if os.path.isdir(units):
            shutil.copytree(units, root / units.lstrip("/"), symlinks=True, dirs_exist_ok=True)
            break
    exe = root / "opt/gpuwait/bin/gpuwait-exporter"
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\nexec python3 -m gpuwait \"$@\"\n")
    exe.chmod(0o755)
    return root


def verify(root: pathlib.Path, unit: str) -> subprocess.CompletedProcess:
    return run(["systemd-analyze", "verify", f"--root={root}", unit])


def test_unit_passes_systemd_analyze_verify(staged_root):
    r = verify(staged_root, "/etc/systemd/system/gpuwait.service")
    # verify exits 0 on unknown keys and bad values too, printing a warning: both must be silent.
    assert r.returncode == 0 and r.stdout.strip() == "" and r.stderr.strip() == "", r.stdout + r.stderr


def test_verify_would_catch_a_broken_unit(staged_root):
    broken = (staged_root / "etc/systemd/system/gpuwait.service").read_text()
    broken = broken.replace("ProtectSystem=strict", "ProtectSytem=strict").replace("DevicePolicy=closed", "DevicePolicy=shut")
    (staged_root / "etc/systemd/system/broken.service").write_text(broken)
    r = verify(staged_root, "/etc/systemd/system/broken.service")
    assert "ProtectSytem" in r.stderr and "shut" in r.stderr


def test_unit_exposure_is_rated_ok(staged_root):
    r = run(["systemd-analyze", "security", "--offline=true", "--threshold=25", f"--root={staged_root}",
             "/etc/systemd/system/gpuwait.service"])
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr
    assert "Overall exposure level for gpuwait.service" in r.stdout and "OK" in r.stdout.splitlines()[-1]


def unit_settings(section: str = "Service") -> dict[str, list[str]]:
    """Every assignment in a section, in order; systemd accumulates repeated keys."""
    settings: dict[str, list[str]] = {}
    current = None
    for line in UNIT.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        if current == section:
            settings.setdefault(key.strip(), []).append(value.strip())
    return settings


def test_unit_hardening_is_what_the_exporter_needs():
    s = unit_settings()
    one = {k: v[-1] for k, v in s.items()}
    assert one["User"] == "gpuwait" and one["Restart"] == "always"
    assert one["ProtectSystem"] == "strict" and one["ProtectHome"] == "yes" and one["PrivateTmp"] == "yes"
    assert one["NoNewPrivileges"] == "yes" and one["CapabilityBoundingSet"] == ""
    assert set(one["ReadOnlyPaths"].split()) == {"/proc", "/sys", "-/var/lib/gpuwait/nccl"}
    # NVML's device nodes, and nothing but them besides what DevicePolicy=closed implies.
    assert one["PrivateDevices"] == "no" and one["DevicePolicy"] == "closed"
    assert sorted(s["DeviceAllow"]) == ["char-nvidia-caps r", "char-nvidia-frontend rw"]
    assert set(one["RestrictAddressFamilies"].split()) == {"AF_UNIX", "AF_INET", "AF_INET6"}
    # Owner attribution reads other users' /proc/<pid>: nothing may hide them.
    assert one["ProtectProc"] == "default" and one["ProcSubset"] == "all" and one["PrivateUsers"] == "no"
    assert s["SystemCallFilter"] == ["@system-service", "~@privileged @resources"]
    assert "MemoryDenyWriteExecute" not in s  # see the unit's comment
    exec_start = one["ExecStart"].split()
    assert exec_start[0] == "/opt/gpuwait/bin/gpuwait-exporter"
    assert "--config.file=/etc/gpuwait/config.yml" in exec_start and "--web.config.file=/etc/gpuwait/web-config.yml" in exec_start


def test_install_layout_and_kept_configuration(tmp_path):
    # A checkout with rules of its own (alerts/ may still be empty in this one), and a
    # promtool test file beside them that must not land among the rules.
    checkout = tmp_path / "checkout"
    shutil.copytree(SYSTEMD, checkout / "deploy" / "systemd")
    (checkout / "docs").mkdir()
    shutil.copy2(pathlib.Path(REPO) / "docs" / "deploy.md", checkout / "docs" / "deploy.md")
    (checkout / "alerts").mkdir()
    (checkout / "alerts" / "gpuwait.yml").write_text("groups:\n  - name: g\n    rules: []\n")
    (checkout / "alerts" / "more.yaml").write_text("groups: []\n")
    (checkout / "alerts" / "gpuwait_test.yml").write_text("rule_files: [gpuwait.yml]\ntests: []\n")

    root = tmp_path / "root"
    install = ["sh", str(checkout / "deploy" / "systemd" / "install.sh"), "--destdir", str(root), "--no-venv", "--prefix", "/srv/gpuwait"]
    r = run(install)
    assert r.returncode == 0, r.stderr
    unit = (root / "etc/systemd/system/gpuwait.service").read_text()
    assert "ExecStart=/srv/gpuwait/bin/gpuwait-exporter " in unit and "/opt/gpuwait" not in unit
    for name in ("config.yml", "web-config.yml"):
        mode = stat.S_IMODE((root / "etc/gpuwait" / name).stat().st_mode)
        assert mode == 0o640, (name, oct(mode))
        assert (root / "etc/gpuwait" / name).read_text() == (SYSTEMD / name).read_text()
    assert (root / "usr/lib/sysusers.d/gpuwait.conf").read_text() == (SYSTEMD / "gpuwait.sysusers").read_text()
    assert (root / "usr/lib/tmpfiles.d/gpuwait.conf").read_text() == (SYSTEMD / "gpuwait.tmpfiles").read_text()
    assert (root / "srv/gpuwait/share/doc/deploy.md").is_file()
    assert sorted(p.name for p in (root / "srv/gpuwait/share/rules").iterdir()) == ["gpuwait.yml", "more.yaml"]

    (root / "etc/gpuwait/config.yml").write_text("log.level: debug\n")
    r = run(install)
    assert r.returncode == 0 and "keeping existing" in r.stdout
    assert (root / "etc/gpuwait/config.yml").read_text() == "log.level: debug\n"

    assert run(["sh", str(SYSTEMD / "install.sh"), "--prefix", "relative/path", "--destdir", str(root)]).returncode == 2


def test_sysusers_entry_creates_a_locked_system_user(tmp_path):
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    r = run(["systemd-sysusers", f"--root={root}", str(SYSTEMD / "gpuwait.sysusers")])
    assert r.returncode == 0, r.stderr
    entry = next(line for line in (root / "etc/passwd").read_text().splitlines() if line.startswith("gpuwait:"))
    name, _, uid, gid, _, home, shell = entry.split(":")
    assert int(uid) < 1000 and home == "/nonexistent" and shell == "/usr/sbin/nologin"
    assert any(line.startswith(f"gpuwait:x:{gid}:") for line in (root / "etc/group").read_text().splitlines())


def test_tmpfiles_entry_creates_the_directories_jobs_write_into(tmp_path):
    # Every user's jobs may create files there, and only remove their own (sticky, as /tmp);
    # the example configuration reads the NCCL one.
    root = tmp_path / "root"
    root.mkdir()
    r = run(["systemd-tmpfiles", f"--root={root}", "--create", str(SYSTEMD / "gpuwait.tmpfiles")])
    assert r.returncode == 0, r.stderr
    for path in ("run/gpuwait/workload", "var/lib/gpuwait/nccl"):
        info = (root / path).stat()
        assert stat.S_ISDIR(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o1777, (path, oct(info.st_mode))
        assert info.st_uid == 0
    config = yaml.safe_load((SYSTEMD / "config.yml").read_text())
    assert config["collector.nccl.dump-dir"] == "/var/lib/gpuwait/nccl"
    unit = (SYSTEMD / "gpuwait.service").read_text()
    assert "-/var/lib/gpuwait/nccl" in unit and "ReadWritePaths=-/run/gpuwait/workload" in unit


def test_example_configuration_files_load():
    for collector in registry():
        COLLECTOR_DEFAULTS.setdefault(collector.name, collector.default_enabled)
    assert load_config_file(str(SYSTEMD / "config.yml"))["web.listen-address"] == ":9975"
    assert not load_web_config(str(SYSTEMD / "web-config.yml")).tls


# -- the exporter under the unit's restrictions --------------------------------------------

def _expand(group: str) -> set[str]:
    out = run(["systemd-analyze", "syscall-filter", group])
    assert out.returncode == 0, out.stderr
    names: set[str] = set()
    for line in out.stdout.splitlines()[1:]:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        names |= _expand(line) if line.startswith("@") else {line}
    return names


@pytest.fixture(scope="module")
def allowed_syscalls(tmp_path_factory) -> str:
    """SystemCallFilter=@system-service then ~@privileged @resources, as system call names."""
    path = tmp_path_factory.mktemp("seccomp") / "allowed.txt"
    names = _expand("@system-service") - _expand("@privileged") - _expand("@resources")
    assert {"read", "openat", "ioctl", "mmap", "socket"} <= names and "setuid" not in names
    path.write_text("\n".join(sorted(names)) + "\n")
    return str(path)


def restricted_command(syscalls: str, python_args: list[str], mdwe: bool = False) -> tuple[list[str], dict[str, str]]:
    """What the harness needs to run this interpreter, the installed dependencies and this
    checkout as user 65534, with /root (where an interpreter may live) hidden."""
    stages = {"py": sys.base_prefix, "repo": REPO}
    paths = []
    for i, directory in enumerate(d for d in site.getsitepackages() if os.path.isdir(d)):
        stages[f"sp{i}"] = directory
        paths.append(f"{{stage}}/sp{i}")
    cmd = [sys.executable, str(HARNESS), "--syscalls", syscalls]
    for name, path in stages.items():
        cmd += ["--stage", f"{name}={path}"]
    if mdwe:
        cmd.append("--memory-deny-write-execute")
    python = f"{{stage}}/py/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    cmd += ["--", python, *python_args]
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": ":".join(["{stage}/repo/exporter", *paths]),
        "LD_LIBRARY_PATH": "{stage}/py/lib",  # an interpreter built --enable-shared finds its libpython
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    return cmd, env


PROBE = r"""
import json, os, socket
result = {"uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups()}
def attempt(name, fn):
    try:
        fn()
        result[name] = "allowed"
    except OSError as e:
        result[name] = e.errno
attempt("write_etc", lambda: open("/etc/gpuwait-probe", "w"))
attempt("write_checkout", lambda: open(os.environ["CHECKOUT"] + "/gpuwait-probe", "w"))
attempt("write_proc_sys", lambda: open("/proc/sys/kernel/domainname", "w"))
attempt("write_sys", lambda: open("/sys/kernel/profiling", "w"))
attempt("write_tmp", lambda: open("/tmp/gpuwait-probe", "w").write("x"))
attempt("netlink_socket", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW))
attempt("packet_socket", lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW))
attempt("unix_socket", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close())
attempt("inet6_socket", lambda: socket.socket(socket.AF_INET6, socket.SOCK_STREAM).close())
attempt("setuid_root", lambda: os.setuid(0))
attempt("read_kmsg", lambda: open("/dev/kmsg", "rb").read(1))
attempt("set_affinity", lambda: os.sched_setaffinity(0, {0}))
result["home"] = os.listdir("/root") if os.path.isdir("/root") else None
result["capabilities"] = [l.split()[1] for l in open("/proc/self/status") if l.startswith(("CapEff", "CapBnd", "CapPrm"))]
result["no_new_privs"] = [l.split()[1] for l in open("/proc/self/status") if l.startswith("NoNewPrivs")][0]
print(json.dumps(result))
"""


def test_harness_really_applies_the_restrictions(allowed_syscalls):
    """Without this, the exporter test below could pass under a harness that applies nothing."""
    import errno

    cmd, env = restricted_command(allowed_syscalls, ["-c", PROBE])
    env["CHECKOUT"] = "{stage}/repo"
    r = run(cmd, env=env)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert (got["uid"], got["gid"], got["groups"]) == (65534, 65534, [])
    assert got["capabilities"] == ["0000000000000000"] * 3 and got["no_new_privs"] == "1"
    assert got["write_etc"] == errno.EROFS and got["write_checkout"] == errno.EROFS
    assert got["write_proc_sys"] == errno.EROFS and got["write_sys"] in (errno.EROFS, errno.EACCES)
    assert got["write_tmp"] == "allowed"  # PrivateTmp: its own, empty /tmp
    assert got["netlink_socket"] == errno.EPERM and got["packet_socket"] == errno.EPERM
    assert got["unix_socket"] == "allowed" and got["inet6_socket"] == "allowed"
    assert got["setuid_root"] == errno.EPERM and got["set_affinity"] == errno.EPERM
    assert got["read_kmsg"] == errno.EACCES
    assert got["home"] == []


class RestrictedExporter(ExporterProcess):
    def __init__(self, syscalls: str, args, mdwe: bool = False) -> None:
        super().__init__(args)
        self.syscalls = syscalls
        self.mdwe = mdwe

    def command(self) -> tuple[list[str], dict[str, str], str]:
        cmd, env = restricted_command(
            self.syscalls, ["-m", "gpuwait", f"--web.listen-address=127.0.0.1:{self.port}", *self.args], self.mdwe)
        return cmd, env, "/"


def source_health(exp: ExporterProcess) -> dict[str, tuple[float, bool]]:
    """{source: (up, had errors)} once every source has been read."""
    def complete(samples):
        up = {lbl["source"]: v for lbl, v in samples.get("gpuwait_source_up", [])}
        reads = {lbl["source"]: v for lbl, v in samples.get("gpuwait_source_reads_total", [])}
        if up and all(reads.get(s, 0) >= 1 for s in up):
            errors = {lbl["source"]: v for lbl, v in samples.get("gpuwait_source_errors_total", [])}
            return {s: (up[s], errors.get(s, 0) > 0) for s in up}
        return None
    return exp.wait_for(complete, timeout=30)


@pytest.mark.integration
@pytest.mark.parametrize("mdwe", [False, True], ids=["as-the-unit", "with-memory-deny-write-execute"])
def test_exporter_under_the_unit_restrictions_sees_what_it_sees_unrestricted(allowed_syscalls, mdwe):
    # A read-only root, no capabilities, uid 65534 and the system call filter must not blind
    # any source: each one is as up, and as error-free, as in an unrestricted run here.
    args = ["--sample.slow-interval=1s"]
    with ExporterProcess(args) as free:
        expected = source_health(free)
    with RestrictedExporter(allowed_syscalls, args, mdwe=mdwe) as jailed:
        got = source_health(jailed)
        body = urllib.request.urlopen(jailed.url + "/metrics", timeout=10).read().decode()
        log = jailed.log()
    assert got == expected, log
    assert parse_exposition(body)
    assert "Traceback" not in log and "Permission denied" not in log, log
