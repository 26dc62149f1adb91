"""Run a command under the restrictions of deploy/systemd/gpuwait.service, as far as a
machine without a running systemd can apply them. Must start as root; used by
tests/test_deploy_systemd.py.

    python restricted_exec.py --syscalls FILE [--stage NAME=PATH ...] [--memory-deny-write-execute] -- CMD...

Applied, each the way systemd applies it:
- ProtectSystem=strict, ReadOnlyPaths=/proc /sys: every mount is remounted read-only in a
  private mount namespace (only the private /tmp and /var/tmp stay writable, and /dev).
- PrivateTmp=yes: fresh tmpfs on /tmp and /var/tmp.
- ProtectHome=yes: empty read-only tmpfs over /home, /root and /run/user.
- ProtectKernelLogs=yes: /dev/kmsg made inaccessible, syslog(2) refused (seccomp).
- User=, CapabilityBoundingSet=, NoNewPrivileges=yes: uid/gid 65534, no supplementary
  groups, empty bounding set, no_new_privs.
- SystemCallFilter=@system-service ~@privileged @resources with SystemCallErrorNumber=EPERM:
  the allowed names come from ``systemd-analyze syscall-filter`` (--syscalls FILE lists them).
- RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6: socket(2) for any other family fails.
- MemoryDenyWriteExecute=yes (only with --memory-deny-write-execute; the unit leaves it off):
  the same seccomp rules as systemd 252: no W+X mmap, no mprotect/pkey_mprotect to exec,
  no shmat with SHM_EXEC.
Not applied (needs systemd or cgroupfs): DevicePolicy=/DeviceAllow= (device cgroup),
ProtectKernelTunables/Modules beyond the read-only /proc and /sys and the seccomp groups,
ProtectClock's device rule, RestrictNamespaces, LockPersonality, RestrictRealtime.

``--stage NAME=PATH`` binds PATH read-only at /tmp/.stage/NAME before the view is locked
down, for what the command needs but would not see as user 65534 (an interpreter under
/root, a checkout under a private home). Paths in CMD and the environment may use
``{stage}`` for /tmp/.stage.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import re
import sys

STAGE = "/tmp/.stage"

CLONE_NEWNS = 0x00020000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 24, 38, 47, 4

SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_CMP_EQ, SCMP_CMP_MASKED_EQ = 4, 7
PROT_WRITE, PROT_EXEC, SHM_EXEC = 0x2, 0x4, 0o100000
AF_UNIX, AF_INET, AF_INET6 = 1, 2, 10

# Loaded before the file system view changes: the interpreter running this script may
# live in a home directory that is about to be hidden.
libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
libseccomp = ctypes.CDLL(ctypes.util.find_library("seccomp") or "libseccomp.so.2", use_errno=True)


def scmp_act_errno(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)


def check(result: int, what: str) -> int:
    if result < 0 or (result != 0 and what.startswith("mount")):
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda s: s.encode() if s is not None else None  # noqa: E731
    check(libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)), f"mount {target}")


def mount_points() -> list[tuple[str, int]]:
    """(mount point, MS_* flags it has now) from mountinfo, parents before children."""
    flag_bits = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "ro": MS_RDONLY}
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
            flags = 0
            for opt in fields[5].split(","):
                flags |= flag_bits.get(opt, 0)
            out.append((point, flags))
    return out


def lock_down_filesystem(stages: dict[str, str]) -> None:
    check(libc.unshare(CLONE_NEWNS), "unshare")
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    # Held open before /tmp is covered: a staged path may itself live under /tmp.
    held = {name: os.open(path, os.O_PATH) for name, path in stages.items()}

    for tmp in ("/tmp", "/var/tmp"):
        if os.path.isdir(tmp):
            mount("tmpfs", tmp, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    os.makedirs(STAGE, mode=0o755)
    for name, fd in held.items():
        target = os.path.join(STAGE, name)
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            os.makedirs(target, mode=0o755)
        else:
            open(target, "w").close()
        mount(f"/proc/self/fd/{fd}", target, None, MS_BIND | MS_REC)
        os.close(fd)

    kmsg_blocker = "/tmp/.kmsg-inaccessible"
    open(kmsg_blocker, "w").close()
    os.chmod(kmsg_blocker, 0)
    if os.path.exists("/dev/kmsg"):
        mount(kmsg_blocker, "/dev/kmsg", None, MS_BIND)

    for home in ("/home", "/root", "/run/user"):
        if os.path.isdir(home):
            mount("tmpfs", home, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY, "mode=0755")

    writable = ("/tmp", "/var/tmp", "/dev")
    for point, flags in mount_points():
        if any(point == w or point.startswith(w + "/") for w in writable) and not point.startswith(STAGE):
            continue
        if point in ("/home", "/root", "/run/user"):
            continue
        try:
            mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | flags)
        except OSError as e:
            if e.errno in (errno.ENOENT, errno.EACCES):
                continue  # covered by a later mount (e.g. under the new /root)
            raise


def drop_privileges(uid: int = 65534, gid: int = 65534) -> None:
    last_cap = int(open("/proc/sys/kernel/cap_last_cap").read())
    for cap in range(last_cap + 1):
        check(libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), f"drop capability {cap}")
    check(libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clear ambient capabilities")
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)  # leaving uid 0 clears the permitted and effective sets
    check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")


class ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64), ("datum_b", ctypes.c_uint64)]


def load_seccomp(allowed: list[str], memory_deny_write_execute: bool) -> None:
    seccomp = libseccomp
    seccomp.seccomp_init.restype = ctypes.c_void_p
    seccomp.seccomp_init.argtypes = [ctypes.c_uint32]
    seccomp.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint, ctypes.POINTER(ArgCmp)]
    seccomp.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    seccomp.seccomp_load.argtypes = [ctypes.c_void_p]

    ctx = seccomp.seccomp_init(scmp_act_errno(errno.EPERM))
    if not ctx:
        raise OSError("seccomp_init failed")

    def add(action: int, name: str, *conditions: tuple[int, int, int, int]) -> None:
        nr = seccomp.seccomp_syscall_resolve_name(name.encode())
        if nr < 0:
            return  # not a system call on this architecture
        array = (ArgCmp * max(1, len(conditions)))(*[ArgCmp(*c) for c in conditions])
        rc = seccomp.seccomp_rule_add_array(ctx, action, nr, len(conditions), array)
        if rc < 0:
            raise OSError(-rc, f"seccomp rule for {name}: {os.strerror(-rc)}")

    conditional = {"socket", "syslog"}
    if memory_deny_write_execute:
        conditional |= {"mmap", "mmap2", "mprotect", "pkey_mprotect", "shmat"}
    for name in allowed:
        if name not in conditional:
            add(SCMP_ACT_ALLOW, name)
    for family in (AF_UNIX, AF_INET, AF_INET6):
        add(SCMP_ACT_ALLOW, "socket", (0, SCMP_CMP_EQ, family, 0))
    if memory_deny_write_execute:
        both = PROT_WRITE | PROT_EXEC
        for name in ("mmap", "mmap2"):
            for allowed_bits in (0, PROT_WRITE, PROT_EXEC):
                add(SCMP_ACT_ALLOW, name, (2, SCMP_CMP_MASKED_EQ, both, allowed_bits))
        for name in ("mprotect", "pkey_mprotect"):
            add(SCMP_ACT_ALLOW, name, (2, SCMP_CMP_MASKED_EQ, PROT_EXEC, 0))
        add(SCMP_ACT_ALLOW, "shmat", (2, SCMP_CMP_MASKED_EQ, SHM_EXEC, 0))
    rc = seccomp.seccomp_load(ctx)
    if rc < 0:
        raise OSError(-rc, f"seccomp_load: {os.strerror(-rc)}")


def main(argv: list[str]) -> None:
    split = argv.index("--")
    options, command = argv[:split], argv[split + 1:]
    stages: dict[str, str] = {}
    syscalls_file = None
    mdwe = False
    i = 0
    while i < len(options):
        if options[i] == "--stage":
            name, _, path = options[i + 1].partition("=")
            stages[name] = path
            i += 2
        elif options[i] == "--syscalls":
            syscalls_file = options[i + 1]
            i += 2
        elif options[i] == "--memory-deny-write-execute":
            mdwe = True
            i += 1
        else:
            raise SystemExit(f"restricted_exec: unknown option {options[i]}")
    if os.geteuid() != 0:
        raise SystemExit("restricted_exec: must start as root to build the sandbox")
    with open(syscalls_file) as f:
        allowed = [line.strip() for line in f if line.strip()]

    lock_down_filesystem(stages)
    drop_privileges()
    os.chdir("/")
    env = {k: v.replace("{stage}", STAGE) for k, v in os.environ.items()}
    command = [c.replace("{stage}", STAGE) for c in command]
    load_seccomp(allowed, mdwe)
    os.execve(command[0], command, env)


if __name__ == "__main__":
    main(sys.argv[1:])
