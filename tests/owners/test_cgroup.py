import pytest
from conftest import text_fixture
from fuzz import examples, texts
from gpuwait.owners import cgroup
from hypothesis import given
from hypothesis import strategies as st

from gpuwait.core.errors import ParseError
from gpuwait.owners.cgroup import (
    HOST,
    LABEL_NAMES,
    CgroupEntry,
    Owner,
    owner_from_cgroup,
    owner_from_path,
    parse_cgroup,
)

POD_V1 = "d48336c5-45ad-4e78-b1a0-005736bbcfd9"
CTR_V1 = "d3ba3468136628bcec364146de2049d4d6395f7f0b948a824a6a254fa425f1db"
DOCKER_HYBRID = "e9c67d7bc17abbf41c536aa6d0a01e6347d0335d4bc6f37916963b0f22ba3ea4"


def owner_of(variant: str, resolve_pod=None) -> Owner:
    return owner_from_cgroup(parse_cgroup(text_fixture("cgroup", variant)), resolve_pod)


# -- the parser ---------------------------------------------------------------------------


def test_v1_lists_every_hierarchy_with_its_controllers():
    entries = parse_cgroup(text_fixture("cgroup", "k8s_cgroupfs_v1_burstable.txt"))
    path = f"/kubepods/burstable/pod{POD_V1}/{CTR_V1}"
    assert [(e.hierarchy, e.controllers) for e in entries] == [
        (11, ("cpuset",)),
        (10, ("memory",)),
        (9, ("devices",)),
        (8, ("perf_event",)),
        (7, ("net_prio", "net_cls")),
        (6, ("blkio",)),
        (5, ("pids",)),
        (4, ("hugetlb",)),
        (3, ("freezer",)),
        (2, ("cpuacct", "cpu")),
        (1, ("name=systemd",)),
    ]
    assert {e.path for e in entries} == {path}
    assert not any(e.unified or e.deleted for e in entries)


def test_v2_is_one_unified_line():
    entries = parse_cgroup(text_fixture("cgroup", "slurm_v2.txt"))
    assert entries == [CgroupEntry(0, (), "/system.slice/slurmstepd.scope/job_12345/step_0/user/task_0")]
    assert entries[0].unified


def test_hybrid_has_both_and_the_hierarchies_disagree():
    entries = parse_cgroup(text_fixture("cgroup", "hybrid_docker.txt"))
    assert len(entries) == 13
    assert entries[-1] == CgroupEntry(0, (), "/system.slice/containerd.service")
    assert entries[1] == CgroupEntry(11, ("rdma",), "/")
    assert entries[-2] == CgroupEntry(1, ("name=systemd",), f"/docker/{DOCKER_HYBRID}")


def test_root_and_relative_to_cgroup_namespace():
    assert parse_cgroup(text_fixture("cgroup", "root.txt")) == [CgroupEntry(0, (), "/")]
    (entry,) = parse_cgroup(text_fixture("cgroup", "k8s_v2_private_cgroupns.txt"))
    assert entry.path.startswith("/../../kubepods-besteffort.slice/")


def test_deleted_cgroup_of_a_zombie_and_colons_in_names():
    (entry,) = parse_cgroup("0::/system.slice/batch-7.scope (deleted)\n")
    assert entry == CgroupEntry(0, (), "/system.slice/batch-7.scope", deleted=True)
    # cgroup names are free text: the path is everything after the second colon
    (entry,) = parse_cgroup("0::/system.slice/run-r1:2.scope\n")
    assert entry.path == "/system.slice/run-r1:2.scope"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "\n\n",
        "0:/\n",  # one colon
        "x::/\n",
        "-1::/\n",
        "0::relative/path\n",
        "3:cpu,,memory:/\n",
        "\u0663::/\n",  # an Arabic-Indic digit, which int() would accept
    ],
)
def test_malformed_text_is_a_parse_error(text):
    with pytest.raises(ParseError):
        parse_cgroup(text)


@given(st.text())
def test_fuzz_parser_raises_only_parse_error(text):
    try:
        entries = parse_cgroup(text)
    except ParseError:
        return
    assert entries and all(e.path.startswith("/") for e in entries)
    owner = owner_from_cgroup(entries)
    assert owner.kind in ("kubernetes", "slurm", "container", "systemd", "host")
    assert set(owner.labels()) == set(LABEL_NAMES)


_segment = st.one_of(
    st.sampled_from(
        [
            "..", "kubepods", "kubepods.slice", "burstable", "besteffort", "kubepods-pod.slice",
            f"pod{POD_V1}", "kubepods-burstable-pod" + POD_V1.replace("-", "_") + ".slice",
            CTR_V1, f"cri-containerd-{CTR_V1}.scope", f"crio-conmon-{CTR_V1}.scope", "docker", "lxc",
            "lxc.payload.", "slurm", "slurm_node1", "slurmstepd.scope", "uid_", "uid_x", "job_",
            "job_12", "job_1x", "step_", "step_batch", "user.slice", "session-3.scope", "a.service",
        ]
    ),
    st.text(alphabet="abcdef0123456789-_.:podjb", max_size=70),
)


@given(st.lists(st.tuples(st.integers(0, 20), st.lists(_segment, max_size=8)), min_size=1, max_size=14))
def test_fuzz_realistic_shapes_raise_nothing(lines):
    text = "".join(f"{h}:{'cpu' if h else ''}:/{'/'.join(segs)}\n" for h, segs in lines)
    owner = owner_from_cgroup(parse_cgroup(text))
    labels = owner.labels()
    assert tuple(labels) == LABEL_NAMES
    assert labels["owner"] == owner.id and owner.id


# -- owners of the fixture variants -------------------------------------------------------


def test_kubernetes_cgroupfs_v1_burstable():
    o = owner_of("k8s_cgroupfs_v1_burstable.txt")
    assert (o.kind, o.id, o.pod_uid, o.qos, o.container_id, o.runtime) == (
        "kubernetes", f"kubernetes:{POD_V1}", POD_V1, "burstable", CTR_V1, None
    )
    assert o.cgroup == f"/kubepods/burstable/pod{POD_V1}"  # the pod's, not the container's


def test_kubernetes_systemd_v1_besteffort_under_docker():
    o = owner_of("k8s_systemd_v1_besteffort.txt")
    assert (o.kind, o.pod_uid, o.qos, o.runtime) == (
        "kubernetes", "0f256eff-d9d4-402f-abb6-12da5094bf50", "besteffort", "docker"
    )
    assert o.container_id == "5d87727a0628ce60e7244b81b84d5608e5c62871449d08942aacb527f12463cc"


def test_kubernetes_systemd_v2_guaranteed_containerd():
    o = owner_of("k8s_systemd_v2_guaranteed_containerd.txt")
    assert (o.kind, o.id, o.qos, o.runtime) == (
        "kubernetes", "kubernetes:4312ade9-202f-48f0-beb7-fe4764012968", "guaranteed", "containerd"
    )
    assert o.container_id == "5599b9703f1a53fd260fdd2966bce88dcf9e74e63894eec94a1379e18e17765a"


def test_kubernetes_cri_o():
    o = owner_of("k8s_crio_v2_burstable.txt")
    assert (o.kind, o.pod_uid, o.qos, o.runtime) == (
        "kubernetes", "ed10a5c6-6a91-49e7-b76a-4fa50256f70b", "burstable", "cri-o"
    )
    assert o.container_id == "e9c67d7bc17abbf41c536aa6d0a01e6347d0335d4bc6f37916963b0f22ba3ea4"


def test_kubernetes_seen_from_a_private_cgroup_namespace():
    o = owner_of("k8s_v2_private_cgroupns.txt")
    assert (o.kind, o.pod_uid, o.qos, o.runtime) == (
        "kubernetes", "6ab97f10-441d-40f8-806d-717f5b732b14", "besteffort", "containerd"
    )


def test_plain_docker_both_drivers():
    o = owner_of("docker_cgroupfs_v1.txt")
    cid = "56292879efb93443c9dbb769ddec7e52f3d9e41a1db446bc02bd9e4d19154ca8"
    assert (o.kind, o.id, o.container_id, o.runtime) == ("container", f"container:{cid}", cid, "docker")
    o = owner_of("docker_systemd_v2.txt")
    cid = "12fa5fa3728af0b7731ebabfdd7f3286393d36a60933af186ea33f7f0fc1381f"
    assert (o.kind, o.id, o.container_id, o.runtime) == ("container", f"container:{cid}", cid, "docker")


def test_hybrid_picks_the_container_over_the_shims_unified_cgroup():
    o = owner_of("hybrid_docker.txt")
    assert (o.kind, o.container_id, o.runtime) == ("container", DOCKER_HYBRID, "docker")


@pytest.mark.parametrize("variant", ["podman_rootful_v2.txt", "podman_rootless_v2.txt"])
def test_podman(variant):
    o = owner_of(variant)
    cid = "df8acd4cce7e065bd3774e6cba07a048a74c1f9511f7cf69b615a40dcd48baa8"
    assert (o.kind, o.id, o.runtime) == ("container", f"container:{cid}", "podman")


def test_slurm_v1_wins_over_slurmd_in_the_other_hierarchies():
    o = owner_of("slurm_v1.txt")
    assert (o.kind, o.id, o.slurm_job, o.slurm_uid, o.slurm_step) == ("slurm", "slurm:12345", "12345", "1000", "0")
    assert o.cgroup == "/slurm/uid_1000/job_12345"


def test_slurm_v2():
    o = owner_of("slurm_v2.txt")
    assert (o.kind, o.id, o.slurm_job, o.slurm_uid, o.slurm_step) == ("slurm", "slurm:12345", "12345", None, "0")


def test_systemd_service_and_user_session():
    o = owner_of("systemd_service.txt")
    assert (o.kind, o.id, o.unit) == (
        "systemd", "systemd:/system.slice/inference-server.service", "inference-server.service"
    )
    o = owner_of("user_session.txt")
    assert (o.kind, o.id, o.unit) == ("systemd", "systemd:/user.slice/user-1000.slice/session-3.scope", "session-3.scope")


def test_root_is_the_host():
    assert owner_of("root.txt") == HOST
    assert owner_of("root.txt").labels()["owner_kind"] == "host"


# -- shapes seen in the wild that need no fixture file of their own -----------------------


@pytest.mark.parametrize(
    "path, kind, key, fields",
    [
        # guaranteed pod under the cgroupfs driver: no QoS level
        (f"/kubepods/pod{POD_V1}/{CTR_V1}", "kubernetes", POD_V1, {"qos": "guaranteed", "container_id": CTR_V1}),
        # static pod: the uid is the manifest's 32-hex-digit hash
        (
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod5e0d8ad1a8e8b2a9a6f5a6d3b0e1f2c3.slice/"
            f"cri-containerd-{CTR_V1}.scope",
            "kubernetes", "5e0d8ad1a8e8b2a9a6f5a6d3b0e1f2c3", {"qos": "burstable"},
        ),
        # kind: the kubelet runs inside a node container, under its own slice
        (
            "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
            f"kubelet-kubepods-besteffort-pod{POD_V1.replace('-', '_')}.slice/cri-containerd-{CTR_V1}.scope",
            "kubernetes", POD_V1, {"qos": "besteffort", "runtime": "containerd"},
        ),
        # cri-o's monitor lives in the pod but is not the container
        (
            f"/kubepods.slice/kubepods-pod{POD_V1.replace('-', '_')}.slice/crio-conmon-{CTR_V1}.scope",
            "kubernetes", POD_V1, {"container_id": None, "cgroup": f"/kubepods.slice/kubepods-pod{POD_V1.replace('-', '_')}.slice"},
        ),
        # cri-o under the cgroupfs driver: crio-<id> without .scope
        (f"/kubepods/besteffort/pod{POD_V1}/crio-{CTR_V1}", "kubernetes", POD_V1, {"runtime": "cri-o", "container_id": CTR_V1}),
        # a process in the pod's own cgroup, no container below it
        (f"/kubepods/burstable/pod{POD_V1}", "kubernetes", POD_V1, {"container_id": None}),
        # Slurm batch step under cgroup/v1, and several slurmd on one host
        ("/slurm/uid_2001/job_88/step_batch/task_0", "slurm", "88", {"slurm_uid": "2001", "slurm_step": "batch"}),
        ("/system.slice/gpu07_slurmstepd.scope/job_90/step_extern/user/task_special", "slurm", "90", {"slurm_step": "extern"}),
        ("/slurm_gpu07/uid_0/job_91/step_0", "slurm", "91", {"slurm_uid": "0"}),
        # slurmstepd's own cgroup holds no job
        ("/system.slice/slurmstepd.scope/system", "systemd", "/system.slice/slurmstepd.scope", {"unit": "slurmstepd.scope"}),
        # a container of any runtime seen without its pod (reader's namespace cuts the pod off)
        (f"/../cri-containerd-{CTR_V1}.scope", "container", CTR_V1, {"runtime": "containerd"}),
        (f"/system.slice/nerdctl-{CTR_V1}.scope", "container", CTR_V1, {"runtime": "containerd"}),
        (f"/libpod_parent/libpod-{CTR_V1}", "container", CTR_V1, {"runtime": "podman"}),
        # docker in docker: the outer container is the one the host knows
        (f"/docker/{CTR_V1}/docker/{DOCKER_HYBRID}", "container", CTR_V1, {"runtime": "docker"}),
        ("/lxc.payload.trainer", "container", "trainer", {"runtime": "lxc"}),
        ("/lxc/trainer/sub", "container", "trainer", {"runtime": "lxc", "cgroup": "/lxc/trainer"}),
        # podman's monitor is a plain scope, not the container
        (f"/machine.slice/libpod-conmon-{CTR_V1}.scope", "systemd", f"/machine.slice/libpod-conmon-{CTR_V1}.scope", {}),
        # a unit of a user's own manager, named by its path since unit names repeat across users
        (
            "/user.slice/user-1000.slice/user@1000.service/app.slice/jupyter.service",
            "systemd", "/user.slice/user-1000.slice/user@1000.service/app.slice/jupyter.service", {"unit": "jupyter.service"},
        ),
        # a service that made sub-cgroups of its own (Delegate=yes)
        ("/system.slice/trainer.service/workers/3", "systemd", "/system.slice/trainer.service", {"unit": "trainer.service"}),
        ("/init.scope", "systemd", "/init.scope", {"unit": "init.scope"}),
        # a slice with no unit, and the root as seen from inside a namespace
        ("/user.slice", "host", None, {}),
        ("/../../..", "host", None, {}),
        # look-alikes that are not owners
        ("/kubepods/burstable/podnot-a-uid/abc", "host", None, {}),
        ("/jobs/job_12/step_0", "host", None, {}),
        ("/system.slice/docker-cleanup.timer", "host", None, {}),
    ],
)
def test_owner_from_path(path, kind, key, fields):
    o = owner_from_path(path)
    assert o.kind == kind
    if key is not None:
        assert o.id == f"{kind}:{key}"
    for name, value in fields.items():
        assert getattr(o, name) == value, name


def test_one_pod_is_one_owner_whatever_the_container():
    a = owner_from_path(f"/kubepods/burstable/pod{POD_V1}/{CTR_V1}")
    b = owner_from_path(f"/kubepods/burstable/pod{POD_V1}/{DOCKER_HYBRID}")
    assert a == b and hash(a) == hash(b) and a.container_id != b.container_id
    assert a.labels() == b.labels()
    assert a.labels()["container_id"] == ""
    assert a != owner_from_path(f"/kubepods/burstable/pod{'0' * 8}-{POD_V1[9:]}/{CTR_V1}")


def test_labels_are_always_the_same_names():
    for variant in ("k8s_cgroupfs_v1_burstable.txt", "slurm_v1.txt", "docker_systemd_v2.txt", "user_session.txt", "root.txt"):
        assert tuple(owner_of(variant).labels()) == LABEL_NAMES
    assert owner_of("slurm_v1.txt").labels() == {
        "owner": "slurm:12345", "owner_kind": "slurm", "owner_namespace": "", "owner_pod": "", "pod_uid": "",
        "container_id": "", "slurm_job": "12345", "slurm_uid": "1000", "unit": "",
    }
    cid = "12fa5fa3728af0b7731ebabfdd7f3286393d36a60933af186ea33f7f0fc1381f"
    assert owner_of("docker_systemd_v2.txt").labels()["container_id"] == cid


def test_pod_resolver_names_the_pod_and_is_asked_only_for_pods():
    asked = []

    def resolve(uid):
        asked.append(uid)
        return ("ml-team", "trainer-0") if uid == POD_V1 else None

    o = owner_of("k8s_cgroupfs_v1_burstable.txt", resolve)
    assert (o.namespace, o.pod) == ("ml-team", "trainer-0")
    assert o.labels()["owner_namespace"] == "ml-team" and o.labels()["owner_pod"] == "trainer-0"
    assert o == owner_of("k8s_cgroupfs_v1_burstable.txt")  # names are details, not identity
    unknown = owner_of("k8s_crio_v2_burstable.txt", resolve)
    assert (unknown.namespace, unknown.pod) == (None, None)
    owner_of("slurm_v2.txt", resolve)
    assert asked == [POD_V1, "ed10a5c6-6a91-49e7-b76a-4fa50256f70b"]


# -- the shared parser fuzz (tests/support/fuzz.py) ------------------------------------------


@examples
@given(texts("cgroup"))
def test_cgroup_and_its_owner(text):
    try:
        entries = cgroup.parse_cgroup(text)
    except ParseError:
        return
    owner = cgroup.owner_from_cgroup(entries, resolve_pod=lambda uid: ("default", "pod"))
    assert owner.kind and owner.id


@examples
@given(st.one_of(st.text(), st.lists(st.sampled_from(["kubepods", "kubepods.slice", "besteffort", "burstable",
       "pod4312ade9-202f-48f0-beb7-fe4764012968", "kubepods-pod4312ade9_202f_48f0_beb7_fe4764012968.slice",
       "cri-containerd-0123456789abcdef.scope", "docker-0123abcd.scope", "slurm", "uid_1000", "job_12345",
       "step_0", "system.slice", "user.slice", "..", ".", "", "x.service", "libpod-01ab.scope"])).map("/".join)))
def test_owner_from_any_path(path):
    owner = cgroup.owner_from_path(path)
    assert owner.kind and owner.id


def test_info_labels_of_a_trace_recorded_before_the_owner_label_rename():
    from gpuwait.owners.cgroup import LABEL_NAMES, info_label_values

    old = {"owner": "kubernetes:u", "owner_kind": "kubernetes", "namespace": "ml", "pod": "w-0", "pod_uid": "u"}
    values = dict(zip(LABEL_NAMES, info_label_values(old)))
    assert values["owner_namespace"] == "ml" and values["owner_pod"] == "w-0" and values["unit"] == ""
    new = {**old, "owner_namespace": "prod", "owner_pod": "w-1"}
    assert dict(zip(LABEL_NAMES, info_label_values(new)))["owner_pod"] == "w-1"
