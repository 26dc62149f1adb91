"""/proc/<pid>/cgroup, and who owns a process according to its cgroup path (A2, A12).

Each line is ``hierarchy-id:controller-list:path`` (cgroups(7)). cgroup v1 lists one line per
mounted hierarchy, v2 a single ``0::/path`` line, hybrid hosts both. The path is relative to
the reader's cgroup namespace root: a reader inside a container with its own namespace sees
other processes' paths as ``/../../kubepods-besteffort.slice/...``, so owners are recognised
by the shape of path segments anywhere in the path, never by a fixed prefix.

The container runtimes and Kubernetes name their cgroups differently by driver:

==========================  ===============================================================
Kubernetes, cgroupfs        /kubepods/burstable/pod<uid>/<64 hex>   (guaranteed: no QoS level)
Kubernetes, systemd         /kubepods.slice/kubepods-besteffort.slice/
                            kubepods-besteffort-pod<uid with _>.slice/cri-containerd-<id>.scope
                            (also docker-<id>.scope, crio-<id>.scope)
Slurm, cgroup/v1            /slurm/uid_1000/job_12345/step_0/task_0
Slurm, cgroup/v2            /system.slice/slurmstepd.scope/job_12345/step_0/user/task_0
Docker                      /docker/<64 hex>, /system.slice/docker-<64 hex>.scope
Podman                      /machine.slice/libpod-<64 hex>.scope, /libpod_parent/libpod-<id>
==========================  ===============================================================
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from gpuwait.core.errors import ParseError

#: v2 lines end with this when the cgroup was removed: a zombie's can be before it is reaped.
_DELETED_SUFFIX = " (deleted)"


@dataclass(frozen=True, slots=True)
class CgroupEntry:
    #: 0 for the v2 unified hierarchy, otherwise the v1 hierarchy number
    hierarchy: int
    #: v1 controllers of the hierarchy ("cpu", "cpuacct", "name=systemd"); empty for v2
    controllers: tuple[str, ...]
    path: str
    #: the cgroup was removed (v2 prints " (deleted)"); the path is still where the process was
    deleted: bool = False

    @property
    def unified(self) -> bool:
        return self.hierarchy == 0 and not self.controllers


def parse_cgroup(text: str) -> list[CgroupEntry]:
    entries: list[CgroupEntry] = []
    for lineno, line in enumerate(text.split("\n"), 1):
        if not line:
            continue
        # The path may itself contain ':' (cgroup names are free text), so split twice only.
        parts = line.split(":", 2)
        if len(parts) != 3:
            raise ParseError(f"line {lineno}: expected 'id:controllers:path', got {line!r}")
        hid, ctrl, path = parts
        if not (hid.isascii() and hid.isdigit()):
            raise ParseError(f"line {lineno}: hierarchy id {hid!r} is not a number")
        deleted = hid == "0" and path.endswith(_DELETED_SUFFIX)
        if deleted:
            path = path[: -len(_DELETED_SUFFIX)]
        if not path.startswith("/"):
            raise ParseError(f"line {lineno}: cgroup path {path!r} is not absolute")
        controllers = tuple(ctrl.split(",")) if ctrl else ()
        if any(not c for c in controllers):
            raise ParseError(f"line {lineno}: empty controller name in {ctrl!r}")
        entries.append(CgroupEntry(int(hid), controllers, path, deleted))
    if not entries:
        raise ParseError("no cgroup lines")
    return entries


# -- owners -------------------------------------------------------------------------------

KINDS = ("kubernetes", "slurm", "container", "systemd", "host")
#: When v1 hierarchies disagree, the most specific claim wins: Slurm and runc place a process
#: only in the hierarchies they manage, while the others (name=systemd, pids, the v2 line on
#: hybrid hosts) still show the daemon that forked it, e.g. slurmd.service.
_RANK = {"kubernetes": 4, "slurm": 3, "container": 2, "systemd": 1, "host": 0}

#: Label names of an owner's info series, in order; every owner has all of them. The pod's
#: namespace and name are owner_namespace and owner_pod: Prometheus attaches namespace and pod
#: of the exporter's own target under the Prometheus Operator, and those must never collide.
LABEL_NAMES = ("owner", "owner_kind", "owner_namespace", "owner_pod", "pod_uid", "container_id", "slurm_job", "slurm_uid", "unit")
#: Earlier names of those labels, as traces recorded before the rename carry them.
_EARLIER_LABEL_NAMES = {"owner_namespace": "namespace", "owner_pod": "pod"}


def info_label_values(labels: dict[str, str]) -> tuple[str, ...]:
    """The values of LABEL_NAMES from an owner's labels, in order; a label under its earlier
    name (a replayed older trace) counts, a missing one is ""."""
    return tuple(labels.get(name, labels.get(_EARLIER_LABEL_NAMES.get(name, name), "")) for name in LABEL_NAMES)


#: pod_uid -> (namespace, pod name), or None while unknown. Supplied by an integration that
#: knows the pods (kubelet or API watch); this module never looks them up itself.
PodResolver = Callable[[str], tuple[str, str] | None]


@dataclass(frozen=True, slots=True)
class Owner:
    """The unit of work a process belongs to: a pod, a Slurm job, a container, a systemd unit,
    or the host itself.

    ``id`` is the stable key (a label value) and alone decides equality: the containers of one
    pod and the steps of one Slurm job are one owner, because they are one job whose GPUs are
    compared with each other (A12). The other fields are details that may differ between
    processes of the same owner.

    ``id`` is ``kubernetes:<pod uid>``, ``slurm:<job id>``, ``container:<container id>``,
    ``systemd:<cgroup path of the unit>`` or ``host``.
    """

    kind: str
    id: str
    pod_uid: str | None = field(default=None, compare=False)
    namespace: str | None = field(default=None, compare=False)
    pod: str | None = field(default=None, compare=False)
    #: "guaranteed", "burstable" or "besteffort"; None where the path does not show it
    qos: str | None = field(default=None, compare=False)
    container_id: str | None = field(default=None, compare=False)
    #: "docker", "containerd", "cri-o", "podman", "lxc"; None for a bare id under cgroupfs
    runtime: str | None = field(default=None, compare=False)
    slurm_job: str | None = field(default=None, compare=False)
    #: only cgroup/v1 puts the job's uid in the path
    slurm_uid: str | None = field(default=None, compare=False)
    slurm_step: str | None = field(default=None, compare=False)
    unit: str | None = field(default=None, compare=False)
    #: the owner's own cgroup: the pod's (not one container's, so that every process of the
    #: pod gives the same path, where the kubelet sets the pod's CPU limit), the Slurm job's,
    #: the container's or the unit's; "/" for the host
    cgroup: str = field(default="/", compare=False)

    def labels(self) -> dict[str, str]:
        """Labels of this owner's info series, all of LABEL_NAMES, "" where not applicable.

        Only what is the same for every process of the owner: a pod's container id and a Slurm
        job's step are left out, so one owner always yields one info series.
        """
        return {
            "owner": self.id,
            "owner_kind": self.kind,
            "owner_namespace": self.namespace or "",
            "owner_pod": self.pod or "",
            "pod_uid": self.pod_uid or "",
            "container_id": (self.container_id or "") if self.kind == "container" else "",
            "slurm_job": self.slurm_job or "",
            "slurm_uid": self.slurm_uid or "",
            "unit": self.unit or "",
        }

    def with_pod(self, namespace: str, pod: str) -> Owner:
        return replace(self, namespace=namespace, pod=pod)


HOST = Owner(kind="host", id="host")


def owner_from_cgroup(entries: Iterable[CgroupEntry], resolve_pod: PodResolver | None = None) -> Owner:
    """The owner named by a process's cgroup lines; ``HOST`` when none names anything."""
    best = HOST
    seen: set[str] = set()
    # The v2 line first: on a tie (same kind from different hierarchies) it is the one that
    # systemd, the kubelet and Slurm's cgroup/v2 plugin all manage.
    for entry in sorted(entries, key=lambda e: not e.unified):
        if entry.path in seen:
            continue
        seen.add(entry.path)
        owner = owner_from_path(entry.path)
        if _RANK[owner.kind] > _RANK[best.kind]:
            best = owner
    if best.kind == "kubernetes" and resolve_pod is not None and best.pod_uid:
        return resolve_owner(best, resolve_pod)
    return best


def resolve_owner(owner: Owner, resolve_pod: PodResolver) -> Owner:
    """Fill in namespace and pod name where the resolver knows the pod uid."""
    if owner.kind != "kubernetes" or not owner.pod_uid:
        return owner
    names = resolve_pod(owner.pod_uid)
    return owner.with_pod(*names) if names else owner


def owner_from_path(path: str) -> Owner:
    # Leading ".." segments are the way up from the reader's cgroup namespace root.
    segments = [s for s in path.split("/") if s and s != ".." and s != "."]
    return (
        _kubernetes(segments)
        or _slurm(segments)
        or _container(segments)
        or _systemd(segments)
        or HOST
    )


# -- Kubernetes ---------------------------------------------------------------------------


def _kubernetes(segments: list[str]) -> Owner | None:
    for i, seg in enumerate(segments):
        found = _pod_segment(seg, segments[i - 1] if i else None)
        if found is None:
            continue
        uid, qos = found
        container_id = runtime = None
        if i + 1 < len(segments):
            container = _container_segment(segments[i + 1])
            if container is not None:
                runtime, container_id = container
        return Owner(
            kind="kubernetes",
            id=f"kubernetes:{uid}",
            pod_uid=uid,
            qos=qos,
            container_id=container_id,
            runtime=runtime,
            cgroup="/" + "/".join(segments[: i + 1]),
        )
    return None


def _pod_segment(seg: str, parent: str | None) -> tuple[str, str | None] | None:
    """(pod uid, QoS class) if ``seg`` is a pod's cgroup under either kubelet driver."""
    if seg.endswith(".slice"):
        # systemd driver: kubepods[-<qos>]-pod<uid, '-' written as '_'>.slice; the prefix may be
        # longer when the kubelet itself runs in a slice (kind: kubelet-kubepods-...).
        stem = seg[: -len(".slice")]
        at = stem.rfind("-pod")
        if at < 0:
            return None
        prefix = stem[:at]
        uid = stem[at + 4 :].replace("_", "-")
        if not _is_pod_uid(uid):
            return None
        if prefix.endswith("kubepods"):
            return uid, "guaranteed"
        for qos in ("burstable", "besteffort"):
            if prefix.endswith("kubepods-" + qos):
                return uid, qos
        return None
    # cgroupfs driver: pod<uid> under kubepods/ (guaranteed) or kubepods/<qos>/.
    if seg.startswith("pod") and _is_pod_uid(seg[3:]):
        if parent in ("burstable", "besteffort"):
            qos = parent
        elif parent is not None and parent.startswith("kubepods"):
            qos = "guaranteed"
        else:
            qos = None  # the parent is above the reader's cgroup namespace root
        return seg[3:], qos
    return None


def _is_pod_uid(uid: str) -> bool:
    # API pods have a UUID; static pods have the 32-hex-digit hash of their manifest.
    if len(uid) == 36:
        return (
            uid[8] == uid[13] == uid[18] == uid[23] == "-"
            and _is_hex(uid[:8] + uid[9:13] + uid[14:18] + uid[19:23] + uid[24:])
        )
    return len(uid) == 32 and _is_hex(uid)


def _is_hex(s: str) -> bool:
    return bool(s) and all(c in "0123456789abcdef" for c in s)


# -- containers ---------------------------------------------------------------------------

#: systemd-driver scope prefixes (also cgroupfs names for cri-o and podman) -> runtime
_SCOPE_PREFIXES = (
    ("cri-containerd-", "containerd"),
    ("docker-", "docker"),
    ("crio-", "cri-o"),
    ("libpod-", "podman"),
    ("nerdctl-", "containerd"),
)


def _container_segment(seg: str) -> tuple[str | None, str] | None:
    """(runtime, container id) if ``seg`` is a container's own cgroup."""
    if len(seg) == 64 and _is_hex(seg):
        return None, seg  # cgroupfs driver: the bare id, whichever runtime
    name = seg[: -len(".scope")] if seg.endswith(".scope") else seg
    for prefix, runtime in _SCOPE_PREFIXES:
        if name.startswith(prefix):
            # crio-conmon-<id> and libpod-conmon-<id> hold the runtime's monitor, not the
            # container; the hex test rejects them.
            cid = name[len(prefix) :]
            if len(cid) == 64 and _is_hex(cid):
                return runtime, cid
            return None
    return None


def _container(segments: list[str]) -> Owner | None:
    for i, seg in enumerate(segments):
        end = i + 1
        found = _container_segment(seg)
        if found is not None:
            runtime, cid = found
            if runtime is None and i and segments[i - 1] == "docker":
                runtime = "docker"
        elif seg.startswith("lxc.payload.") and len(seg) > len("lxc.payload."):
            runtime, cid = "lxc", seg[len("lxc.payload.") :]
        elif seg == "lxc" and end < len(segments):
            # LXC before 4.0 under cgroup v1: /lxc/<name>
            runtime, cid = "lxc", segments[end]
            end += 1
        else:
            continue
        return Owner(
            kind="container",
            id=f"container:{cid}",
            container_id=cid,
            runtime=runtime,
            cgroup="/" + "/".join(segments[:end]),
        )
    return None


# -- Slurm --------------------------------------------------------------------------------


def _is_slurm_root(seg: str) -> bool:
    # cgroup/v1: "slurm", or "slurm_<node>" with several slurmd per host; cgroup/v2:
    # "slurmstepd.scope", or "<node>_slurmstepd.scope".
    return seg == "slurm" or seg.startswith("slurm_") or seg.endswith("slurmstepd.scope")


def _slurm(segments: list[str]) -> Owner | None:
    for i, seg in enumerate(segments):
        if not _is_slurm_root(seg):
            continue
        uid = job = step = None
        end = i
        for j in range(i + 1, len(segments)):
            s = segments[j]
            if s.startswith("uid_") and uid is None and job is None:
                uid = s[4:]
            elif s.startswith("job_") and job is None:
                job = s[4:]
                end = j
            elif s.startswith("step_") and job is not None and step is None:
                step = s[5:]
        if not job or not (job.isascii() and job.isdigit()):
            continue
        if uid is not None and not (uid.isascii() and uid.isdigit()):
            uid = None
        return Owner(
            kind="slurm",
            id=f"slurm:{job}",
            slurm_job=job,
            slurm_uid=uid,
            slurm_step=step or None,
            cgroup="/" + "/".join(segments[: end + 1]),
        )
    return None


# -- systemd ------------------------------------------------------------------------------


def _systemd(segments: list[str]) -> Owner | None:
    """The innermost systemd service or scope.

    A login session (user-1000.slice/session-3.scope) is a systemd owner, not the host: the
    scope is what systemd accounts the session's processes to, so the label leads straight to
    `systemctl status session-3.scope` / `loginctl session-status 3`, and two users training
    on different GPUs of one machine stay two owners instead of merging into "host". Units of
    a user's own manager (user@1000.service/app.slice/jupyter.service) are named by their full
    path in ``id``, because their unit names are unique only per user.
    """
    for i in range(len(segments) - 1, -1, -1):
        seg = segments[i]
        if seg.endswith(".service") or seg.endswith(".scope"):
            cgroup = "/" + "/".join(segments[: i + 1])
            return Owner(kind="systemd", id=f"systemd:{cgroup}", unit=seg, cgroup=cgroup)
    return None
