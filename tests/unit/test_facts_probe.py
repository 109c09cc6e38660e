"""Facts probes on whatever machine runs the tests (no GPU, no udevd needed), plus the parsers
and mapping tables on captured text."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

import hostctl.facts as facts_pkg
from hostctl.errors import InputError
from hostctl.facts import collect, load_snapshot
from hostctl.facts.disks import parse_blkid_export
from hostctl.facts.gpu import (
    NUMA_UNKNOWN,
    P2P_STATUS,
    TOPOLOGY_LEVELS,
    NvmlAdapter,
    cuda_version_text,
    kernel_module_flavour,
    probe_gpus,
    read_numa,
    sysfs_bus_id,
)
from hostctl.facts.memory import parse_swaps, probe_memory
from hostctl.facts.records import TOPOLOGY_ORDER, HostFacts, StateFacts
from hostctl.facts.mounts import mount_for, parse_mountinfo, probe_paths
from hostctl.facts.state import probe_state
from hostctl.facts.topology import kernel_args, probe_iommu
from hostctl.cpulists import parse_cpulist
from need import need, need_module, needs

# ---------------------------------------------------------------- collect() on this machine


@pytest.fixture(scope="module")
def host() -> HostFacts:
    return collect()


def test_collect_returns_complete_facts(host):
    assert host.hostname and host.collected_at
    assert host.kernel.release == os.uname().release
    assert host.memory.mem_total_bytes > 0
    assert host.numa.cpu_count == os.cpu_count()
    assert host.numa.nodes and all(node.cpus for node in host.numa.nodes)
    assert any(m.target == "/" for m in host.mounts)
    assert host.notes == [], host.notes  # no probe broke
    # every absent part says why
    for part in (host.gpus, host.disks, host.engine):
        assert part.available or part.reason
    if host.disks.available:
        assert host.disks.source_reason or host.disks.source == "udev"


def test_collect_round_trips_through_json(host):
    text = host.model_dump_json(indent=2)
    assert json.loads(text)["schema"] == "hostctl.facts/v1"
    assert HostFacts.model_validate_json(text, strict=True) == host


def test_collect_is_fast():
    start = time.perf_counter()
    collect()
    assert time.perf_counter() - start < 3.0  # ~0.1-0.2 s on a dev VM; the bound only catches a hang


@needs(not (os.path.exists("/dev/nvidia0") or os.path.exists("/proc/driver/nvidia")),
       "this host has an NVIDIA driver (tests/gpu covers the GPU's facts)")
def test_gpu_absence_is_stated_with_a_reason(host):
    assert host.gpus.available is False
    assert host.gpus.devices == [] and host.gpus.pairs == []
    assert "NVIDIA" in host.gpus.reason or "NVML" in host.gpus.reason or "pynvml" in host.gpus.reason


def test_a_broken_probe_becomes_a_note(monkeypatch):
    def broken(*_args):
        raise RuntimeError("boom")

    monkeypatch.setattr(facts_pkg, "probe_engine", broken)
    monkeypatch.setattr(facts_pkg, "probe_numa", broken)
    facts = collect()
    assert facts.engine.available is False and "boom" in facts.engine.reason
    assert facts.numa.cpu_count == (os.cpu_count() or 1)
    assert any("engine probe failed" in n for n in facts.notes)
    assert any("NUMA probe failed" in n for n in facts.notes)


def test_root_disk_is_marked(host):
    root = next(m for m in reversed(host.mounts) if m.target == "/")
    need(root.source.startswith("/dev/"), f"/ is on {root.source} ({root.fs_type}), not a block device")
    assert any(d.is_root_disk for d in host.disks.devices), [d.name for d in host.disks.devices]


# ---------------------------------------------------------------- paths


def test_probe_paths_lists_regular_files_sorted(tmp_path):
    (tmp_path / "b").write_bytes(b"12345")
    (tmp_path / "a").write_bytes(b"")
    (tmp_path / "dir").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "b")  # stores link into model caches: follow
    listed, plain, missing = probe_paths([(str(tmp_path), True), (str(tmp_path), False), (str(tmp_path / "x" / "y"), True)])
    assert listed.exists and listed.files == [("a", 0), ("b", 5), ("link", 5)]
    assert listed.total_bytes and listed.free_bytes is not None and listed.mount_target and listed.fs_type
    assert plain.files is None
    assert missing.exists is False and missing.files == [] and missing.mount_target == listed.mount_target


# ---------------------------------------------------------------- parsers on captured text

MOUNTINFO = """\
22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw,errors=remount-ro
60 27 259:5 / /mnt/ssd\\0401 rw,noatime shared:30 master:2 - ext4 /dev/nvme1n1p2 rw
61 27 0:45 /@home /home rw,relatime shared:31 - btrfs /dev/sda1 rw,space_cache=v2,subvolid=257
62 27 259:2 /var/lib/docker /var/lib/docker rw,relatime - ext4 /dev/nvme0n1p2 rw
63 27 0:50 / /mnt/ssd\\0401/tmp rw - tmpfs tmpfs rw
garbage line
"""


def test_parse_mountinfo():
    lines = parse_mountinfo(MOUNTINFO)
    assert [m.entry.target for m in lines] == ["/proc", "/", "/mnt/ssd 1", "/home", "/var/lib/docker", "/mnt/ssd 1/tmp"]
    ssd = lines[2]
    assert ssd.dev == "259:5" and ssd.root == "/"
    assert (ssd.entry.source, ssd.entry.fs_type, ssd.entry.options) == ("/dev/nvme1n1p2", "ext4", "rw,noatime")
    assert lines[3].root == "/@home" and lines[3].dev == "0:45" and lines[3].entry.fs_type == "btrfs"


def test_mount_for_takes_longest_and_topmost():
    mounts = [m.entry for m in parse_mountinfo(MOUNTINFO)]
    assert mount_for("/mnt/ssd 1/store", mounts).source == "/dev/nvme1n1p2"
    assert mount_for("/mnt/ssd 1/tmp/x", mounts).fs_type == "tmpfs"
    assert mount_for("/mnt/ssd 10", mounts).target == "/"  # a prefix of the name is not a parent
    assert mount_for("/home", mounts).fs_type == "btrfs"
    stacked = mounts + [mounts[1].model_copy(update={"source": "overlay", "fs_type": "overlay"})]
    assert mount_for("/etc", stacked).fs_type == "overlay"


def test_parse_swaps():
    text = (
        "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"
        "/dev/nvme1n1p1                          partition\t135266300\t1024\t\t10\n"
        "/swap\\040file                           file\t\t1048572\t\t0\t\t-2\n"
    )
    a, b = parse_swaps(text)
    assert (a.path, a.kind, a.size_bytes, a.used_bytes, a.priority) == ("/dev/nvme1n1p1", "partition", 135266300 * 1024, 1024 * 1024, 10)
    assert (b.path, b.kind, b.priority) == ("/swap file", "file", -2)


def test_memory_totals_are_the_kernels():
    meminfo = {ln.split(":")[0]: int(ln.split()[1]) * 1024 for ln in open("/proc/meminfo") if ln.split()[2:3] == ["kB"]}
    mem = probe_memory(swaps=[])
    assert (mem.mem_total_bytes, mem.swap_total_bytes) == (meminfo["MemTotal"], meminfo["SwapTotal"])
    assert 0 < mem.mem_available_bytes <= mem.mem_total_bytes and 0 <= mem.swap_free_bytes <= mem.swap_total_bytes


def test_parse_blkid_export():
    text = (
        "DEVNAME=/dev/loop0\nPTUUID=e2f5\nPTTYPE=gpt\n\n"
        "DEVNAME=/dev/loop0p1\nLABEL=my\\ lab\nUUID=3277\nTYPE=ext4\nPART_ENTRY_NAME=hostctl\\ test\n"
        "PART_ENTRY_TYPE=0fc63daf-8483-4772-8e79-3d69d8477de4\n"
    )
    tags = parse_blkid_export(text)
    assert tags["/dev/loop0"]["PTTYPE"] == "gpt"
    p1 = tags["/dev/loop0p1"]
    assert (p1["LABEL"], p1["PART_ENTRY_NAME"], p1["TYPE"]) == ("my lab", "hostctl test", "ext4")


def test_parse_cpulist():
    assert parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_cpulist("") == []


def test_iommu_flags_from_kernel_arguments_only():
    cmdline = "BOOT_IMAGE=/vmlinuz intel_iommu=on iommu=pt iommu.strict=0 amd_iommu quiet -- iommu=off"
    assert kernel_args(cmdline)[-1] == "quiet"
    assert probe_iommu(cmdline).cmdline_flags == {"intel_iommu": "on", "iommu": "pt", "iommu.strict": "0", "amd_iommu": ""}


# ---------------------------------------------------------------- GPU mapping (no GPU needed)


def test_topology_and_p2p_tables_are_nvmls():
    """hostctl's tables against pynvml's own constants, not a copy of them."""
    pynvml = need_module("pynvml")  # the numbers are NVML's, not ours
    # nvmlGpuTopologyLevel_t, named as nvidia-smi topo -m prints them
    nvml_levels = {pynvml.NVML_TOPOLOGY_INTERNAL: "SELF", pynvml.NVML_TOPOLOGY_SINGLE: "PIX",
                   pynvml.NVML_TOPOLOGY_MULTIPLE: "PXB", pynvml.NVML_TOPOLOGY_HOSTBRIDGE: "PHB",
                   pynvml.NVML_TOPOLOGY_NODE: "NODE", pynvml.NVML_TOPOLOGY_SYSTEM: "SYS"}
    assert TOPOLOGY_LEVELS == nvml_levels
    assert set(TOPOLOGY_LEVELS.values()) == set(TOPOLOGY_ORDER) - {"NVLINK"}
    # nvmlGpuP2PStatus_t: every NVML_P2P_STATUS_* value, by its name (pynvml also keeps NVML's
    # misspelt CHIPSET_NOT_SUPPORED, with the same value)
    nvml_status = {getattr(pynvml, n): n.removeprefix("NVML_P2P_STATUS_").lower()
                   for n in sorted(dir(pynvml)) if n.startswith("NVML_P2P_STATUS_") and not n.endswith("SUPPORED")}
    assert P2P_STATUS == nvml_status


def test_small_conversions():
    assert sysfs_bus_id("00000000:C1:00.0") == "0000:c1:00.0"
    assert sysfs_bus_id("0000:01:00.0") == "0000:01:00.0"
    assert cuda_version_text(12080) == "12.8"
    assert cuda_version_text(13000) == "13.0"
    open_line = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build\nGCC version: 12\n"
    prop_line = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024\n"
    assert kernel_module_flavour(open_line) == "open"
    assert kernel_module_flavour(prop_line) == "proprietary"
    assert kernel_module_flavour(None) is None


def _fake_sysfs(root: Path, bus: str, node: str, cpus: str | None) -> None:
    dev = root / bus
    dev.mkdir(parents=True)
    (dev / "numa_node").write_text(node + "\n")
    if cpus is not None:
        (dev / "local_cpulist").write_text(cpus + "\n")


def test_read_numa(tmp_path):
    _fake_sysfs(tmp_path, "0000:01:00.0", "-1", "0-7")
    _fake_sysfs(tmp_path, "0000:41:00.0", "1", "8-15")
    assert read_numa("0000:01:00.0", tmp_path) == (None, NUMA_UNKNOWN, list(range(8)))
    assert read_numa("0000:41:00.0", tmp_path) == (1, None, list(range(8, 16)))
    node, reason, cpus = read_numa("0000:99:00.0", tmp_path)
    assert node is None and "numa_node" in reason and cpus is None


class FakeNvmlError(Exception):
    pass


class FakeNvml(NvmlAdapter):
    """Two PCIe GPUs under one host bridge, as on the pro6000x2 desktop, with BAR1 unreadable."""

    errors = (FakeNvmlError,)

    def __init__(self):
        super().__init__()
        self.shut = False

    def init(self):
        pass

    def shutdown(self):
        self.shut = True

    def driver_version(self):
        return "580.65.06"

    def cuda_driver_version(self):
        return 13000

    def nvml_version(self):
        return "13.580.65.06"

    def device_count(self):
        return 2

    def handle(self, index):
        return index

    def name(self, h):
        return "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"

    def uuid(self, h):
        return f"GPU-{h}"

    def pci_bus_id(self, h):
        return ["00000000:01:00.0", "00000000:02:00.0"][h]

    def memory_total(self, h):
        return 96 * 1024**3

    def power_limit_mw(self, h):
        return 300000

    def power_default_mw(self, h):
        return 600000

    def power_constraints_mw(self, h):
        return 150000, 600000

    def power_enforced_mw(self, h):
        return 300000

    def persistence_mode(self, h):
        return True

    def pcie_gen_current(self, h):
        return 1  # idle links train down

    def pcie_gen_max(self, h):
        return 5

    def pcie_width_current(self, h):
        return 8

    def pcie_width_max(self, h):
        return 8

    def bar1_total(self, h):
        raise FakeNvmlError("Not Supported")

    def topology_common_ancestor(self, h1, h2):
        return 30

    def nvlink_active(self, h, link):
        raise FakeNvmlError("Not Supported")

    def nvlink_remote_bus_id(self, h, link):
        raise AssertionError("no active links")

    def p2p_status(self, h1, h2, caps_index):
        return {0: 0, 1: 1}[caps_index]


def test_probe_gpus_with_a_fake_adapter(tmp_path):
    _fake_sysfs(tmp_path, "0000:01:00.0", "-1", "0-23")
    fake = FakeNvml()
    gpus = probe_gpus(fake, pci_root=tmp_path, version_file=tmp_path / "absent")
    assert fake.shut
    assert gpus.available and gpus.reason is None
    assert (gpus.driver_version, gpus.cuda_driver_version, gpus.kernel_module) == ("580.65.06", "13.0", None)
    g0, g1 = gpus.devices
    assert g0.pci_bus_id == "0000:01:00.0" and g1.pci_bus_id == "0000:02:00.0"
    assert (g0.power.limit_w, g0.power.default_w, g0.power.min_w, g0.power.max_w, g0.power.enforced_w) == (300, 600, 150, 600, 300)
    assert (g0.pcie.gen_current, g0.pcie.gen_max, g0.pcie.width_max) == (1, 5, 8)
    assert g0.bar1_total_bytes is None  # one getter failing leaves one field empty
    assert (g0.numa_node, g0.numa_reason, g0.local_cpus) == (None, NUMA_UNKNOWN, list(range(24)))
    assert g1.numa_node is None and g1.local_cpus is None
    (pair,) = gpus.pairs
    assert (pair.a, pair.b, pair.topology, pair.nvlink) == (0, 1, "PHB", False)
    assert (pair.p2p_read, pair.p2p_write) == ("ok", "chipset_not_supported")
    assert gpus.pair(1, 0) is pair


# ---------------------------------------------------------------- state and snapshots


def test_state_absent_valid_and_invalid(tmp_path):
    assert probe_state(tmp_path / "none") == (StateFacts(), [])
    (tmp_path / "p2p.json").write_text(json.dumps({"verdict": "ok", "measured_at": "2026-01-01T00:00:00Z", "busbw_gbps": 21.5}))
    state, notes = probe_state(tmp_path)
    assert state.p2p.verdict == "ok" and state.p2p.busbw_gbps == 21.5 and notes == []
    (tmp_path / "p2p.json").write_text(json.dumps({"verdict": "maybe", "measured_at": "x"}))
    state, notes = probe_state(tmp_path)
    assert state.p2p is None and "verdict" in notes[0]
    (tmp_path / "p2p.json").write_text("{")
    state, notes = probe_state(tmp_path)
    assert state.p2p is None and "not valid JSON" in notes[0]


def test_load_snapshot_round_trip(tmp_path, host):
    path = tmp_path / "snap.json"
    path.write_text(host.model_dump_json(indent=2))
    assert load_snapshot(path) == host


def test_load_snapshot_errors_are_readable(tmp_path, host):
    with pytest.raises(InputError, match="does not exist"):
        load_snapshot(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": ')
    with pytest.raises(InputError, match=r"not valid JSON.*line 1"):
        load_snapshot(bad)
    data = json.loads(host.model_dump_json(indent=2))
    bad.write_text(json.dumps({**data, "schema": "hostctl.facts/v0"}))
    with pytest.raises(InputError, match="hostctl.facts/v0"):
        load_snapshot(bad)
    data["memory"]["mem_total_bytes"] = "lots"
    data["gpus"]["devices"] = [{"index": 0, "name": "x"}]
    bad.write_text(json.dumps(data))
    with pytest.raises(InputError) as err:
        load_snapshot(bad)
    rendered = err.value.render()
    assert "gpus.devices[0].uuid: Field required" in rendered
    assert "memory.mem_total_bytes" in rendered
