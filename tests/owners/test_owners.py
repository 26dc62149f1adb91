import os
import pathlib
import shutil
import subprocess
import sys
import time

import pytest
from conftest import HOST_TREE, text_fixture
from fuzz import examples, mutated, only_parse_errors, texts
from gpuwait.owners import procpid
from hypothesis import given
from hypothesis import strategies as st

from gpuwait.owners import tracker as owners
from gpuwait.core.errors import ParseError, SourceError
from gpuwait.owners.tracker import (
    DescendantFinder,
    OwnerCache,
    OwnerCpuCounter,
    OwnerTracker,
    ProcessInfo,
    descendants,
    owner_activity,
    read_owner,
    read_process,
)
from gpuwait.owners.procpid import (
    PidStat,
    parse_children,
    parse_io_read_bytes,
    parse_pid_stat,
    parse_ppid,
    parse_task_state,
    parse_uptime,
)
from gpuwait.core.source import HostPaths

TREE = HostPaths(str(HOST_TREE / "proc"), str(HOST_TREE / "sys"))
TRAINING_POD = "kubernetes:4312ade9-202f-48f0-beb7-fe4764012968"
HZ = 100

V2_A = "0::/system.slice/trainer-a.service\n"
V2_B = "0::/system.slice/trainer-b.service\n"


def stat_text(pid, comm="python3", state="S", ppid=1, utime=0, stime=0, threads=1, start=1000, cpu=0):
    """A /proc/<pid>/stat line as Linux 5.x prints it (52 fields)."""
    return (
        f"{pid} ({comm}) {state} {ppid} {pid} {pid} 0 -1 4194304 811 0 3 0 {utime} {stime} 0 0 20 0 {threads} 0 "
        f"{start} 2871345152 31022 18446744073709551615 94769432252416 94769432254653 140727234567568 0 0 0 0 "
        f"16781312 16386 0 0 0 17 {cpu} 0 0 0 0 0 94769432266128 94769432266800 94769440755712 "
        f"140727234571955 140727234572011 140727234572011 140727234576358 0\n"
    )


class ProcTree:
    """A fake procfs under tmp_path that tests can change between reads."""

    def __init__(self, root: pathlib.Path) -> None:
        self.root = root
        self.paths = HostPaths(str(root), str(root.parent / "sys"))
        root.mkdir(parents=True, exist_ok=True)

    def add(self, pid, *, cgroup=V2_A, threads=None, children=(), children_files=True, **stat):
        """threads: [(tid, state, cpu)], the main thread first; default one thread."""
        d = self.root / str(pid)
        threads = threads or [(pid, stat.get("state", "S"), stat.get("cpu", 0))]
        (d / "task").mkdir(parents=True, exist_ok=True)
        (d / "stat").write_text(stat_text(pid, threads=len(threads), **stat))
        (d / "cgroup").write_text(cgroup)
        for i, (tid, state, cpu) in enumerate(threads):
            td = d / "task" / str(tid)
            td.mkdir(exist_ok=True)
            fields = dict(stat, state=state, cpu=cpu)
            (td / "stat").write_text(stat_text(tid, threads=len(threads), **fields))
            if children_files:
                (td / "children").write_text("".join(f"{c} " for c in children) if i == 0 else "")

    def remove(self, pid):
        shutil.rmtree(self.root / str(pid))


@pytest.fixture
def tree(tmp_path):
    return ProcTree(tmp_path / "proc")


# -- /proc/<pid>/stat ---------------------------------------------------------------------


def test_stat_of_a_data_loader_worker():
    assert parse_pid_stat(text_fixture("procpid", "python_worker.txt")) == PidStat(
        pid=4243, comm="python3", state="D", ppid=4242, utime=9120, stime=2210, cutime=0, cstime=0,
        num_threads=1, starttime=1234890, processor=5,
    )


@pytest.mark.parametrize(
    "variant, pid, comm, state, ppid, processor",
    [
        ("sd_pam.txt", 1402, "(sd-pam)", "S", 1401, 11),
        ("web_content.txt", 8812, "Web Content", "S", 8700, 2),
        ("hostile_comm.txt", 31337, "x) R 1 (y) Z 9", "S", 2300, 7),
        ("kworker.txt", 87, "kworker/u64:2-events_unbound", "I", 2, 12),
        ("zombie.txt", 9904, "sh", "Z", 9900, 3),
        ("linux_2_6_32.txt", 2231, "java", "S", 1, 1),
    ],
)
def test_stat_command_names_and_states(variant, pid, comm, state, ppid, processor):
    s = parse_pid_stat(text_fixture("procpid", variant))
    assert (s.pid, s.comm, s.state, s.ppid, s.processor) == (pid, comm, state, ppid, processor)
    assert parse_ppid(text_fixture("procpid", variant)) == (pid, ppid)
    assert parse_task_state(text_fixture("procpid", variant)) == (state, processor)


def test_stat_fields_after_an_awkward_name():
    s = parse_pid_stat(text_fixture("procpid", "web_content.txt"))
    assert (s.utime, s.stime, s.cutime, s.cstime, s.num_threads, s.starttime) == (102933, 20110, 15, 4, 31, 5532101)
    s = parse_pid_stat(text_fixture("procpid", "hostile_comm.txt"))
    assert (s.utime, s.stime, s.num_threads, s.starttime) == (12, 3, 1, 8812345)


def test_stat_without_the_processor_field():
    line = " ".join(stat_text(7, cpu=4).split()[:30])
    assert parse_pid_stat(line).processor is None
    assert parse_task_state(line) == ("S", None)
    assert parse_pid_stat(stat_text(7, cpu=4)).processor == 4


@pytest.mark.parametrize(
    "text",
    [
        "",
        "4242 python3 S 1",
        "4242 (python3 S 1 1 1",
        stat_text(1, state="Q"),
        stat_text(1).replace("(python3) S 1 ", "(python3) S +1 "),  # int() would take it
        stat_text(1).replace(" 1000 ", " 1_000 "),  # so would it this
        stat_text(1, utime=1).replace(" 811 0 3 0 1 ", " 811 0 3 0 \u0661 "),  # and an Arabic-Indic one
        " ".join(stat_text(1).split()[:21]),  # stops before starttime
        "x" + stat_text(1),
    ],
)
def test_malformed_stat_is_a_parse_error(text):
    with pytest.raises(ParseError):
        parse_pid_stat(text)
    if "(" not in text or "Q" in text or len(text.split()) < 22:
        with pytest.raises(ParseError):
            parse_task_state(text)


@given(
    comm=st.text(alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=40),
    state=st.sampled_from(sorted("RSDTtZXIP")),
    nums=st.lists(st.integers(0, 2**63), min_size=5, max_size=5),
)
def test_any_command_name_round_trips(comm, state, nums):
    utime, stime, threads, start, cpu = nums
    s = parse_pid_stat(stat_text(99, comm=comm, state=state, utime=utime, stime=stime, threads=threads, start=start, cpu=cpu))
    assert (s.pid, s.comm, s.state, s.utime, s.stime, s.num_threads, s.starttime, s.processor) == (
        99, comm, state, utime, stime, threads, start, cpu
    )
    assert parse_ppid(stat_text(99, comm=comm, state=state, ppid=nums[0])) == (99, nums[0])
    assert parse_task_state(stat_text(99, comm=comm, state=state, cpu=cpu)) == (state, cpu)


@given(st.text())
def test_fuzz_stat_parsers_raise_only_parse_error(text):
    for parse in (parse_pid_stat, parse_task_state, parse_ppid, parse_children, parse_uptime):
        try:
            parse(text)
        except ParseError:
            pass


def test_children_and_uptime():
    assert parse_children("4243 4244 ") == [4243, 4244]
    assert parse_children("") == []
    with pytest.raises(ParseError):
        parse_children("4243 -1")
    assert parse_uptime("759.52 1429.12\n") == 759.52
    with pytest.raises(ParseError):
        parse_uptime("nan 1\n")


# -- one process on the fixture host ------------------------------------------------------


def test_read_process_and_owner_from_the_fixture_host():
    info = read_process(TREE, 4242, HZ)
    assert info == ProcessInfo(
        pid=4242, ppid=4201, comm="python3", state="S", num_threads=3, cpu_seconds=(52311 + 8123) / HZ,
        start_seconds=12345.67, starttime=1234567, processor=17,
    )
    assert read_owner(TREE, 4242).id == TRAINING_POD
    assert read_owner(TREE, 5151).id == "slurm:12345"
    assert read_process(TREE, 99999) is None
    assert read_owner(TREE, 99999) is None


def test_activity_of_a_training_job_and_a_slurm_task():
    report = owner_activity(TREE, [4242, 4243, 4244, 4250, 5151, 99999], ticks_per_second=HZ)
    assert report.errors == ()
    assert set(report.owners) == {TRAINING_POD, "slurm:12345"}
    pod = report.owners[TRAINING_POD]
    # threads: 4242 S, 4245 R, 4246 D | 4243 D | 4244 R, 4247 S | 4250 R
    assert (pod.processes, pod.threads, pod.running, pod.blocked, pod.sleeping, pod.other) == (4, 7, 3, 2, 2, 0)
    assert pod.cpu_seconds == pytest.approx((52311 + 8123 + 9120 + 2210 + 9875 + 1988 + 1503 + 96) / HZ)
    assert pod.cpus == {17, 3, 5, 6, 9}
    assert pod.running_cpus == {3, 6, 9}
    slurm = report.owners["slurm:12345"]
    assert (slurm.processes, slurm.threads, slurm.running, slurm.cpus) == (1, 1, 1, {40})
    assert set(report.owner_of) == {4242, 4243, 4244, 4250, 5151}
    assert report.processes[4243].state == "D"


@pytest.mark.parametrize("method", ["children", "scan"])
def test_descendants_on_the_fixture_host(method):
    found = descendants(TREE, [4242, 5151, 99999], method=method)
    assert found.method == method
    assert found.of == {4242: {4243, 4244, 4250}, 5151: frozenset()}
    assert found.errors == ()


def test_tracker_on_the_fixture_host_follows_the_gpu_process_to_its_workers():
    tracker = OwnerTracker(TREE, ticks_per_second=HZ)
    report = tracker.sample([4242, 5151])
    assert report.descendants[4242] == {4243, 4244, 4250}
    assert report.owners[TRAINING_POD].processes == 4
    assert report.cpu_seconds_total == {TRAINING_POD: 0.0, "slurm:12345": 0.0}


# -- the owner cache ----------------------------------------------------------------------


def test_cgroup_read_once_per_process(tree):
    tree.add(700, start=1000)
    tree.add(701, start=1100)
    cache = OwnerCache(tree.paths)
    for _ in range(5):
        report = owner_activity(tree.paths, [700, 701], cache=cache)
    assert set(report.owner_of) == {700, 701}
    assert cache.reads == 2


def test_pid_reuse_is_a_new_process(tree):
    tree.add(700, start=1000, cgroup=V2_A)
    cache = OwnerCache(tree.paths)
    assert owner_activity(tree.paths, [700], cache=cache).owner_of[700].unit == "trainer-a.service"
    # 700 exits and the pid comes back as another process, elsewhere
    tree.remove(700)
    tree.add(700, start=5000, cgroup=V2_B)
    assert owner_activity(tree.paths, [700], cache=cache).owner_of[700].unit == "trainer-b.service"
    assert cache.reads == 2
    # the old process's entry is recognised as dead
    assert len(cache) == 2
    assert cache.forget_dead() == 1
    assert len(cache) == 1


def test_revalidated_after_a_while_since_processes_can_move(tree):
    now = [0.0]
    tree.add(700)
    cache = OwnerCache(tree.paths, revalidate_after=30.0, clock=lambda: now[0])
    assert cache.owner(700, 1000).unit == "trainer-a.service"
    (tree.root / "700" / "cgroup").write_text(V2_B)
    now[0] = 29.0
    assert cache.owner(700, 1000).unit == "trainer-a.service"
    now[0] = 31.0
    assert cache.owner(700, 1000).unit == "trainer-b.service"
    assert cache.reads == 2


def test_cache_is_bounded_and_drops_dead_processes_first(tree):
    for pid in (700, 701, 702, 703):
        tree.add(pid, start=pid)
    cache = OwnerCache(tree.paths, max_entries=2)
    cache.owner(700, 700)
    cache.owner(701, 701)
    tree.remove(701)
    cache.owner(700, 700)  # 700 is the most recently used, but 701 is dead
    cache.owner(702, 702)
    assert len(cache) == 2
    assert cache.owner(700, 700) is not None and cache.reads == 3  # 700 was kept
    cache.owner(703, 703)  # nobody dead now: the least recently used (702) goes
    assert len(cache) == 2
    reads = cache.reads
    cache.owner(700, 700)
    assert cache.reads == reads
    cache.owner(702, 702)
    assert cache.reads == reads + 1


def test_resolver_learns_a_pod_after_its_processes_were_seen(tree):
    uid = "4312ade9-202f-48f0-beb7-fe4764012968"
    tree.add(700, cgroup=text_fixture("cgroup", "k8s_systemd_v2_guaranteed_containerd.txt"))
    known = {}
    cache = OwnerCache(tree.paths, resolve_pod=known.get)
    assert cache.owner(700, 1000).pod is None
    known[uid] = ("ml", "trainer-0")
    owner = cache.owner(700, 1000)
    assert (owner.namespace, owner.pod) == ("ml", "trainer-0")
    assert cache.reads == 1


# -- processes that vanish or cannot be read ----------------------------------------------


def test_process_gone_between_the_reads_is_absent_without_errors(tree):
    tree.add(700, start=1000)
    tree.add(701, start=1000)
    tree.add(702, start=1000, threads=[(702, "S", 0), (703, "R", 1)])
    tree.add(704, start=1000, threads=[(704, "S", 0), (705, "R", 1)])
    (tree.root / "701" / "cgroup").unlink()  # exited after its stat was read
    shutil.rmtree(tree.root / "702" / "task")  # exited before its threads were listed
    (tree.root / "704" / "task" / "705" / "stat").unlink()  # one thread ended
    report = owner_activity(tree.paths, [700, 701, 702, 704, 799])
    assert report.errors == ()
    assert set(report.owner_of) == {700, 704}
    (activity,) = report.owners.values()
    assert (activity.processes, activity.threads, activity.sleeping, activity.running) == (2, 2, 2, 0)


def test_gone_during_the_cgroup_read_is_not_cached_and_empty_file_is_gone(tree):
    tree.add(700)
    (tree.root / "700" / "cgroup").write_text("")
    cache = OwnerCache(tree.paths)
    assert cache.owner(700, 1000) is None
    assert len(cache) == 0


def deny_open(monkeypatch, denied: str) -> None:
    """Opening ``denied`` fails as it does for a file of another user's process."""
    real_open = os.open

    def open_unless_denied(path, *args, **kwargs):
        if path == denied:
            raise PermissionError(13, "Permission denied", path)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(owners.os, "open", open_unless_denied)


def test_permission_denied_is_a_counted_cause(tree, monkeypatch):
    tree.add(700)
    tree.add(701)
    # root reads through any file mode, so the denial is staged at the system call
    deny_open(monkeypatch, os.path.join(tree.paths.procfs, "700", "cgroup"))
    report = owner_activity(tree.paths, [700, 701])
    assert report.errors == (f"permission:{tree.paths.procfs}/<pid>/cgroup",)
    assert set(report.owner_of) == {701}
    with pytest.raises(SourceError) as e:
        read_owner(tree.paths, 700)
    assert e.value.cause == f"permission:{tree.paths.procfs}/<pid>/cgroup"


def test_garbage_is_a_parse_cause_and_the_rest_is_kept(tree):
    tree.add(700)
    tree.add(701)
    (tree.root / "700" / "stat").write_text("700 (python3 S\n")
    (tree.root / "701" / "cgroup").write_text("garbage\n")
    tree.add(702)
    report = owner_activity(tree.paths, [700, 701, 702])
    assert report.errors == (
        f"parse:{tree.paths.procfs}/<pid>/cgroup",
        f"parse:{tree.paths.procfs}/<pid>/stat",
    )
    assert set(report.owner_of) == {702}


# -- descendants --------------------------------------------------------------------------


def _family(tree, children_files=True):
    # 700 is the GPU process; 710 and 711 its workers, forked by two different threads;
    # 720 a decoder started by worker 710; 800 an unrelated process; 900 a child of 800.
    tree.add(700, ppid=1, threads=[(700, "S", 0), (705, "S", 1)], children=[710], children_files=children_files)
    if children_files:
        (tree.root / "700" / "task" / "705" / "children").write_text("711 ")
    tree.add(710, ppid=700, children=[720], children_files=children_files)
    tree.add(711, ppid=700, children_files=children_files)
    tree.add(720, ppid=710, children_files=children_files)
    tree.add(800, ppid=1, children=[900], children_files=children_files)
    tree.add(900, ppid=800, children_files=children_files)


@pytest.mark.parametrize("children_files", [True, False])
def test_descendants_both_ways_agree(tree, children_files):
    _family(tree, children_files)
    expected = {700: {710, 711, 720}, 710: {720}, 720: frozenset()}
    auto = descendants(tree.paths, [700, 710, 720, 799])
    assert auto.method == ("children" if children_files else "scan")
    assert auto.of == expected
    assert descendants(tree.paths, [700, 710, 720, 799], method="scan").of == expected
    if children_files:
        assert descendants(tree.paths, [700, 710, 720], method="children").of == expected


def test_descendant_scan_is_cached_and_bounded(tree):
    _family(tree, children_files=False)
    now = [0.0]
    finder = DescendantFinder(tree.paths, ttl=3.0, clock=lambda: now[0])
    assert finder.find([700]).of == {700: {710, 711, 720}}
    tree.add(730, ppid=700, children_files=False)
    now[0] = 2.0
    assert finder.find([700]).of == {700: {710, 711, 720}}
    assert finder.scans == 1
    now[0] = 3.5
    assert finder.find([700]).of == {700: {710, 711, 720, 730}}
    assert finder.scans == 2
    small = descendants(tree.paths, [700], method="scan", max_processes=2)
    assert small.truncated
    assert small.of[700] < {710, 711, 720, 730}


def test_descendant_scan_errors_last_as_long_as_the_scan(tree):
    _family(tree, children_files=False)
    (tree.root / "950").mkdir()
    (tree.root / "950" / "stat").write_text("950 (torn\n")
    now = [0.0]
    finder = DescendantFinder(tree.paths, ttl=3.0, method="scan", clock=lambda: now[0])
    cause = f"parse:{tree.paths.procfs}/<pid>/stat"
    assert finder.find([700]).errors == (cause,)
    now[0] = 1.0
    report = finder.find([700, 710])  # 700 from the cache, 710 walked in the cached scan
    assert report.errors == (cause,) and report.of[710] == {720}
    assert finder.find([700]).errors == (cause,)  # answered from the cache alone
    assert finder.scans == 1


def test_descendant_loop_from_pid_reuse_ends(tree):
    # a scan taken while pids were reused can show a cycle; it must not spin
    tree.add(700, ppid=701, children=[701])
    tree.add(701, ppid=700, children=[700])
    assert descendants(tree.paths, [700], method="scan").of == {700: {701}}
    assert descendants(tree.paths, [700], method="children").of == {700: {701}}


# -- CPU time as a counter ----------------------------------------------------------------


def test_cpu_counter_survives_workers_exiting_and_counts_new_ones_in_full(tree):
    (tree.root / "uptime").write_text("100.00 150.00\n")
    tree.add(700, utime=5000, start=1000, children=[710])  # started long before anyone watched
    tree.add(710, ppid=700, utime=300, start=2000)
    tracker = OwnerTracker(tree.paths, ticks_per_second=HZ)
    first = tracker.sample([700])
    assert first.cpu_seconds_total == {"systemd:/system.slice/trainer-a.service": 0.0}
    assert first.errors == ()
    # a second later: both ran one more second of CPU
    (tree.root / "uptime").write_text("101.00 151.00\n")
    tree.add(700, utime=5100, start=1000, children=[710])
    tree.add(710, ppid=700, utime=400, start=2000)
    assert tracker.sample([700]).cpu_seconds_total == {"systemd:/system.slice/trainer-a.service": 2.0}
    # the worker exits and a new one starts (epoch boundary); it ran 0.5 s since it started
    (tree.root / "uptime").write_text("102.00 152.00\n")
    tree.remove(710)
    tree.add(700, utime=5150, start=1000, children=[711])
    tree.add(711, ppid=700, utime=50, start=10150)
    tracker.finder = DescendantFinder(tree.paths, ttl=0.0)
    report = tracker.sample([700])
    assert report.descendants == {700: {711}}
    assert report.cpu_seconds_total == {"systemd:/system.slice/trainer-a.service": pytest.approx(3.0)}
    # the sum over live processes went down, the counter did not
    assert report.owners["systemd:/system.slice/trainer-a.service"].cpu_seconds == pytest.approx(52.0)


def test_cpu_counter_forgets_owners_gone_for_long():
    now = [0.0]
    counter = OwnerCpuCounter(forget_after=60.0, clock=lambda: now[0])
    tree_report = owner_activity(TREE, [5151], ticks_per_second=HZ)
    counter.update(tree_report, boot_seconds=None)
    assert counter.update(tree_report, boot_seconds=None) == {"slurm:12345": 0.0}
    now[0] = 61.0
    empty = owner_activity(TREE, [], ticks_per_second=HZ)
    assert counter.update(empty, boot_seconds=None) == {}
    assert counter._totals == {}


def test_tracker_counts_a_missing_uptime(tree):
    tree.add(700)
    report = OwnerTracker(tree.paths).sample([700])
    assert report.errors == (f"missing:{tree.paths.procfs}/uptime",)
    assert report.cpu_seconds_total == {"systemd:/system.slice/trainer-a.service": 0.0}


# -- this machine's /proc -----------------------------------------------------------------

CHILD = """
import subprocess, sys, threading, time
spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
print(spinner.pid, flush=True)
sys.stdin.read()  # blocks on the pipe until the test closes it
"""


def _wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    return predicate()


def test_real_proc_finds_a_blocked_child_and_a_busy_grandchild():
    paths = HostPaths()
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    grandchild = None
    try:
        grandchild = int(child.stdout.readline())
        for method in ("scan", "auto"):
            found = descendants(paths, [os.getpid()], method=method)
            assert {child.pid, grandchild} <= found.of[os.getpid()], method
        assert descendants(paths, [child.pid]).of == {child.pid: {grandchild}}

        # the child's main thread sleeps in read(2) on the pipe, its other thread in sleep
        assert _wait_for(lambda: read_process(paths, child.pid).state == "S")
        info = read_process(paths, child.pid)
        assert (info.ppid, info.num_threads) == (os.getpid(), 2)
        assert _wait_for(lambda: (read_process(paths, grandchild).cpu_seconds > 0.05))
        busy = read_process(paths, grandchild)
        assert busy.state == "R" and busy.ppid == child.pid

        report = owner_activity(paths, [child.pid, grandchild])
        assert report.errors == ()
        # a forked process starts in its parent's cgroup
        (activity,) = report.owners.values()
        assert activity.owner == read_owner(paths, os.getpid())
        assert (activity.processes, activity.threads) == (2, 3)
        assert activity.running >= 1 and activity.sleeping >= 1
        assert activity.running + activity.sleeping + activity.blocked + activity.other == 3
        assert busy.processor in activity.cpus
        assert activity.cpu_seconds >= busy.cpu_seconds
    finally:
        if grandchild is not None:
            try:
                os.kill(grandchild, 9)
            except ProcessLookupError:
                pass
        child.kill()
        child.wait(timeout=10)
    # once reaped, the child is simply gone
    assert read_process(paths, child.pid) is None or read_process(paths, child.pid).starttime != info.starttime
    assert owner_activity(paths, [child.pid]).errors == ()

# -- the shared parser fuzz (tests/support/fuzz.py) ------------------------------------------


@examples
@given(texts("procpid"))
def test_pid_stat(text):
    only_parse_errors(procpid.parse_pid_stat, text)


@examples
@given(st.one_of(st.text(), mutated("procpid")))
def test_pid_status_fields(text):
    for fn in (procpid.parse_task_state, procpid.parse_ppid, procpid.parse_children, procpid.parse_uptime):
        only_parse_errors(fn, text)


IO_TEXT = ("rchar: 88000000\nwchar: 1200\nsyscr: 900\nsyscw: 12\nread_bytes: {}\nwrite_bytes: 4096\n"
           "cancelled_write_bytes: 0\n")


def test_an_owners_storage_reads_are_summed_over_its_processes(tree, monkeypatch):
    for pid, read in ((700, 5_000_000), (701, 250_000), (702, None)):
        tree.add(pid)
        if read is not None:
            (tree.root / str(pid) / "io").write_text(IO_TEXT.format(read))
    report = owner_activity(tree.paths, [700, 701, 702])
    # 702's kernel offers no io file (no task IO accounting): it counts, without its reads.
    assert report.errors == ()
    (owner,) = report.owners.values()
    assert owner.processes == 3 and owner.read_bytes == 5_250_000.0
    # Another user's process: its io file needs ptrace rights, its stat does not.
    deny_open(monkeypatch, os.path.join(tree.paths.procfs, "700", "io"))
    report = owner_activity(tree.paths, [700, 701, 702])
    assert report.errors == (f"permission:{tree.paths.procfs}/<pid>/io",)
    (owner,) = report.owners.values()
    assert owner.processes == 3 and owner.read_bytes == 250_000.0


def test_an_io_file_without_read_bytes_is_a_parse_cause_and_the_process_still_counts(tree):
    tree.add(700)
    (tree.root / "700" / "io").write_text("rchar: 1\n")
    report = owner_activity(tree.paths, [700])
    assert report.errors == (f"parse:{tree.paths.procfs}/<pid>/io",)
    (owner,) = report.owners.values()
    assert owner.processes == 1 and owner.read_bytes is None
    with pytest.raises(ParseError):
        parse_io_read_bytes("read_bytes: -3\n")
    assert parse_io_read_bytes(IO_TEXT.format(123)) == 123
