"""PCI addresses, the PCIe tree and the GPU-NIC relation (A10)."""

from __future__ import annotations

import os
import shutil

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import HOST_TREE
from gpuwait.core.errors import ParseError
from gpuwait.core.source import HostPaths
from gpuwait.core.topology import (
    NODE,
    PHB,
    PIX,
    PXB,
    RELATIONS,
    SYS,
    classify,
    locate,
    normalize_pci_address,
    parse_node_list,
    parse_numa_node,
    pci_chain,
    pci_device_path,
    rdma_devices,
    read_numa_node,
    relation,
    single_numa_node,
)

FIXTURE = HostPaths(str(HOST_TREE / "proc"), str(HOST_TREE / "sys"))


# -- addresses ------------------------------------------------------------------------------

@pytest.mark.parametrize("given_address, expected", [
    ("00000000:17:00.0", "0000:17:00.0"),   # NVML pciBusId
    ("00000000:B1:00.0", "0000:b1:00.0"),   # NVML, upper-case hex
    ("0000:17:00.0", "0000:17:00.0"),       # sysfs
    ("17:00.0", "0000:17:00.0"),            # lspci without -D
    ("0000:3b:00.1\n", "0000:3b:00.1"),
    ("10000:e1:00.0", "10000:e1:00.0"),     # VMD domain
    ("00010000:E1:1F.7", "10000:e1:1f.7"),
])
def test_normalize_pci_address(given_address, expected):
    assert normalize_pci_address(given_address) == expected


@pytest.mark.parametrize("bad", ["", "17:00", "0000:17:00", "0000:17:00.8", "0000:17:20.0", "0000:117:00.0",
                                 "zz:00.0", "0000:17:00.0.1", "pci0000:17", "000000000:17:00.0", "0000:17:00."])
def test_normalize_rejects_what_is_not_an_address(bad):
    with pytest.raises(ParseError):
        normalize_pci_address(bad)


@given(st.integers(0, 0xFFFF), st.integers(0, 0xFF), st.integers(0, 0x1F), st.integers(0, 7), st.booleans())
def test_nvml_and_sysfs_spellings_meet(domain, bus, dev, fn, upper):
    nvml = f"{domain:08x}:{bus:02x}:{dev:02x}.{fn:x}"
    sysfs = f"{domain:04x}:{bus:02x}:{dev:02x}.{fn:x}"
    assert normalize_pci_address(nvml.upper() if upper else nvml) == sysfs
    assert normalize_pci_address(sysfs) == sysfs


@given(st.text(max_size=40))
def test_normalize_raises_only_parse_error(text):
    try:
        result = normalize_pci_address(text)
    except ParseError:
        return
    assert normalize_pci_address(result) == result


# -- the tree -------------------------------------------------------------------------------

def test_pci_chain_starts_at_the_host_bridge():
    path = "/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:01.0/0000:19:00.0"
    assert pci_chain(path) == ("pci0000:15", "0000:15:01.0", "0000:16:00.0", "0000:17:01.0", "0000:19:00.0")
    # a directory above the sysfs root that merely starts with "pci" is not a host bridge
    assert pci_chain("/tmp/pcitest/sys/devices/pci0000:00/0000:00:02.0")[0] == "pci0000:00"
    assert pci_chain("/sys/devices/virtual/infiniband/rxe0") == ()


def chain(*bdfs: str, bridge: str = "pci0000:15") -> tuple[str, ...]:
    return (bridge, *bdfs)


SWITCH_GPU = chain("0000:15:01.0", "0000:16:00.0", "0000:17:00.0", "0000:18:00.0")
SWITCH_NIC = chain("0000:15:01.0", "0000:16:00.0", "0000:17:01.0", "0000:19:00.0")


def test_two_downstream_ports_of_one_switch_are_pix():
    assert classify(SWITCH_GPU, 0, SWITCH_NIC, 0) == PIX


def test_functions_of_one_device_are_pix():
    port0 = chain("0000:15:01.0", "0000:16:00.0", "0000:17:01.0", "0000:19:00.0")
    port1 = chain("0000:15:01.0", "0000:16:00.0", "0000:17:01.0", "0000:19:00.1")
    assert classify(port0, 0, port1, 0) == PIX
    on_root_port0 = chain("0000:15:01.0", "0000:16:00.0")
    on_root_port1 = chain("0000:15:01.0", "0000:16:00.1")
    assert classify(on_root_port0, 0, on_root_port1, 0) == PIX


def test_two_switch_levels_are_pxb():
    # root port -> switch A -> (switch B -> GPU) and (NIC): two switches between them
    gpu = chain("0000:15:01.0", "0000:16:00.0", "0000:17:00.0", "0000:18:00.0", "0000:19:00.0", "0000:1a:00.0")
    nic = chain("0000:15:01.0", "0000:16:00.0", "0000:17:01.0", "0000:1b:00.0")
    assert classify(gpu, 0, nic, 0) == PXB
    assert classify(nic, 0, gpu, 0) == PXB


def test_sharing_only_the_second_level_switch_is_pix():
    a = chain("0000:15:01.0", "0000:16:00.0", "0000:17:00.0", "0000:18:00.0", "0000:19:00.0", "0000:1a:00.0")
    b = chain("0000:15:01.0", "0000:16:00.0", "0000:17:00.0", "0000:18:00.0", "0000:19:01.0", "0000:1c:00.0")
    assert classify(a, 0, b, 0) == PIX


def test_different_root_ports_of_one_host_bridge_are_phb():
    gpu = chain("0000:15:01.0", "0000:16:00.0")
    nic = chain("0000:15:03.0", "0000:17:00.0")
    assert classify(gpu, 0, nic, 0) == PHB
    integrated = chain("0000:15:00.4")  # on the root bus itself
    assert classify(integrated, 0, nic, 0) == PHB


def test_host_bridges_of_one_numa_node_are_node():
    gpu = chain("0000:97:01.0", "0000:98:00.0", bridge="pci0000:97")
    nic = chain("0000:a7:01.0", "0000:a8:00.0", bridge="pci0000:a7")
    assert classify(gpu, 1, nic, 1) == NODE


def test_across_numa_nodes_is_sys():
    nic = chain("0000:a7:01.0", "0000:a8:00.0", bridge="pci0000:a7")
    assert classify(SWITCH_GPU, 0, nic, 1) == SYS


def test_unknown_numa_node_leaves_host_bridges_apart_undecided():
    nic = chain("0000:a7:01.0", "0000:a8:00.0", bridge="pci0000:a7")
    assert classify(SWITCH_GPU, -1, nic, 1) is None
    assert classify(SWITCH_GPU, -1, nic, -1) is None
    # on a one-node machine -1 can only mean that node
    assert classify(SWITCH_GPU, -1, nic, -1, single_numa_node=True) == NODE
    # below one host bridge the NUMA node does not matter
    assert classify(SWITCH_GPU, -1, SWITCH_NIC, -1) == PIX
    assert classify((), 0, SWITCH_NIC, 0) is None


BDF = st.builds(lambda b, d: f"0000:{b:02x}:{d:02x}.0", st.integers(0, 3), st.integers(0, 2))
CHAINS = st.tuples(st.sampled_from(["pci0000:00", "pci0000:80"]), st.lists(BDF, min_size=1, max_size=5)).map(
    lambda t: (t[0], *t[1]))


@given(CHAINS, st.integers(-1, 1), CHAINS, st.integers(-1, 1), st.booleans())
def test_classification_is_symmetric_and_in_the_vocabulary(a, numa_a, b, numa_b, single):
    forward = classify(a, numa_a, b, numa_b, single_numa_node=single)
    assert forward == classify(b, numa_b, a, numa_a, single_numa_node=single)
    assert forward is None or forward in RELATIONS
    if a[0] == b[0]:
        assert forward in (PIX, PXB, PHB)


# -- small files ----------------------------------------------------------------------------

@pytest.mark.parametrize("text, node", [("0\n", 0), ("1\n", 1), ("-1\n", -1), ("7", 7)])
def test_parse_numa_node(text, node):
    assert parse_numa_node(text) == node


@pytest.mark.parametrize("text", ["", "node0", "1.0", "--1", "99999999"])
def test_parse_numa_node_rejects(text):
    with pytest.raises(ParseError):
        parse_numa_node(text)


@pytest.mark.parametrize("text, nodes", [("0\n", (0,)), ("0-1\n", (0, 1)), ("0,2-3", (0, 2, 3)), ("\n", ())])
def test_parse_node_list(text, nodes):
    assert parse_node_list(text) == nodes


@given(st.text(max_size=20))
def test_small_file_parsers_raise_only_parse_error(text):
    for parse in (parse_numa_node, parse_node_list):
        try:
            parse(text)
        except ParseError:
            pass


# -- the fixture host -----------------------------------------------------------------------

def test_gpu_nic_relations_on_the_fixture_host():
    gpu_switch = locate(FIXTURE, "00000000:18:00.0")
    gpu_alone = locate(FIXTURE, "00000000:98:00.0")
    nics = {d.device: d for d in rdma_devices(FIXTURE)}
    assert sorted(nics) == ["mlx5_0", "mlx5_1"]
    ib, roce = nics["mlx5_0"], nics["mlx5_1"]
    assert (ib.pci_address, ib.numa_node) == ("0000:19:00.0", 0)
    assert (roce.pci_address, roce.numa_node) == ("0000:a8:00.0", 1)
    assert ib.sysfs_pci_path.endswith("/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:01.0/0000:19:00.0")
    assert gpu_switch.numa_node == 0 and gpu_alone.numa_node == 1

    assert relation(gpu_switch, ib) == PIX
    assert relation(gpu_switch, roce) == SYS
    assert relation(gpu_alone, roce) == NODE
    assert relation(gpu_alone, ib) == SYS
    assert relation(ib, locate(FIXTURE, "0000:19:00.0")) == PIX  # the device itself


def test_readers_on_a_relocated_tree(tmp_path):
    shutil.copytree(HOST_TREE / "sys", tmp_path / "sys", symlinks=True)
    paths = HostPaths(str(tmp_path / "proc"), str(tmp_path / "sys"))
    path = pci_device_path(paths, "0000:19:00.0")
    assert path == os.path.realpath(tmp_path / "sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:01.0/0000:19:00.0")
    assert pci_device_path(paths, "0000:ff:00.0") is None
    assert pci_device_path(paths, "not an address") is None
    # numa_node missing or garbled: unknown, never an exception
    (tmp_path / "sys/bus/pci/devices/0000:19:00.0/numa_node").write_text("garbage\n")
    assert read_numa_node(path) == -1
    os.remove(tmp_path / "sys/bus/pci/devices/0000:19:00.0/numa_node")
    assert read_numa_node(path) == -1
    assert [d.numa_node for d in rdma_devices(paths)] == [-1, 1]


def test_virtual_rdma_device_has_no_pci_function(tmp_path):
    (tmp_path / "sys/class/infiniband/rxe0/ports/1").mkdir(parents=True)
    paths = HostPaths(str(tmp_path / "proc"), str(tmp_path / "sys"))
    (dev,) = rdma_devices(paths)
    assert dev == ("rxe0", "", -1, "")
    assert rdma_devices(HostPaths(str(tmp_path / "proc"), str(tmp_path / "nothing"))) == []


def test_single_numa_node(tmp_path):
    paths = HostPaths(str(tmp_path / "proc"), str(tmp_path / "sys"))
    assert single_numa_node(paths) is False
    online = tmp_path / "sys/devices/system/node/online"
    online.parent.mkdir(parents=True)
    online.write_text("0\n")
    assert single_numa_node(paths) is True
    online.write_text("0-1\n")
    assert single_numa_node(paths) is False
