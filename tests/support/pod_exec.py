"""Run a command as the gpuwait DaemonSet's container runs: in a mount namespace of its own,
with the host's /proc and /sys bound read-only at <view>/host/proc and <view>/host/sys, as a
given user holding exactly the given capabilities, with no_new_privs (allowPrivilegeEscalation:
false). Must run as root, already inside the new mount namespace; used by
tests/integration/test_pod_host_view.py:

    unshare --mount --propagation private -- python pod_exec.py --view DIR --user UID
        [--caps CAP,...] [--stage NAME=PATH ...] -- CMD...

DIR gets a tmpfs of its own, seen only in this namespace (the container's root file system,
so to speak); CMD and the environment may say {view} for it. ``--stage NAME=PATH`` binds PATH
read-only at <view>/stage/NAME, for what the command needs but the user could not reach (an
interpreter under /root). The user and capability change is setpriv's (util-linux): the
capabilities go into the bounding, inheritable and ambient sets, so they survive the exec as
a non-root user.
"""

from __future__ import annotations

import os
import sys

from restricted_exec import MS_BIND, MS_NODEV, MS_NOSUID, MS_RDONLY, MS_REC, MS_REMOUNT, mount


def bind_read_only(source: str, target: str) -> None:
    os.makedirs(target, exist_ok=True)
    # Recursive, as the kubelet binds a hostPath volume; read-only as the manifest asks.
    mount(source, target, None, MS_BIND | MS_REC)
    mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY)


def main(argv: list[str]) -> None:
    split = argv.index("--")
    options, command = argv[:split], argv[split + 1:]
    view, user, caps, stages = None, None, "", {}
    for flag, value in zip(options[::2], options[1::2]):
        if flag == "--view":
            view = value
        elif flag == "--user":
            user = int(value)
        elif flag == "--caps":
            caps = value
        elif flag == "--stage":
            name, _, path = value.partition("=")
            stages[name] = path
        else:
            raise SystemExit(f"unknown option {flag}")
    if view is None or user is None:
        raise SystemExit("--view and --user are required")
    mount("tmpfs", view, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
    bind_read_only("/proc", os.path.join(view, "host", "proc"))
    bind_read_only("/sys", os.path.join(view, "host", "sys"))
    for name, path in stages.items():
        bind_read_only(path, os.path.join(view, "stage", name))
    sets = "-all" + "".join(f",+{cap}" for cap in caps.split(",") if cap)
    setpriv = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", f"--inh-caps={sets}",
               f"--ambient-caps={sets}", f"--bounding-set={sets}", "--no-new-privs", "--"]
    env = {k: v.replace("{view}", view) for k, v in os.environ.items()}
    os.chdir("/")
    os.execvpe("setpriv", setpriv + [arg.replace("{view}", view) for arg in command], env)


if __name__ == "__main__":
    main(sys.argv[1:])
