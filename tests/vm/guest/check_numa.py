"""The NUMA guest (two nodes: CPU 0 + half the memory on node 0, CPU 1 + the other half on
node 1): the placement plan binds the runtime to the node of the device it serves on, and a
process started the way the runtime is started really runs there.

The device: the guest has no GPU, so hostctl's NVML adapter is replaced (the same small
interface the unit tests fake) by one that reports a single GPU at the PCI address of a real
device: an NVMe controller QEMU put behind a PCI expander bridge on node 1 (`pxb,numa_node=1`),
or, for the control, one behind a bridge on node 0, or one on the root bus (no _PXM: the
kernel says -1). Everything after the adapter is real: `read_numa` reads that device's
numa_node and local_cpulist from the guest's sysfs, `collect()` reads the two nodes, and the
planner, renderer, cgroup and numactl do what they do on a real host. This keeps the product
code GPU-based (no second "node of a PCI device" path to maintain) while the node it reads
comes from real firmware tables.

The process: the rendered compose file's `cpuset` becomes the cgroup's cpuset.cpus (what
Docker writes for it), and the runtime images' entrypoint itself (runtime/entrypoint/
hostctl-entrypoint, shipped in the wheel) runs the payload with HOSTCTL_NUMA_NODE from the
rendered runtime.env: it execs numactl --cpunodebind/--membind. Mems_allowed_list reflects a
cgroup's cpuset.mems, which Compose cannot set; so one check runs exactly what the runtime
gets (CPU set in the cgroup, memory bound by numactl's policy: pages checked in numa_maps),
and one also writes cpuset.mems (as `docker run --cpuset-mems` would).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

from hostctl.config import load_config
from hostctl.facts import collect
from hostctl.facts.gpu import NvmlAdapter, probe_gpus, read_numa
from hostctl.facts.topology import probe_numa
from hostctl.paths import resource_root
from hostctl.plan import build_plan
from hostctl.plan.placement import MEMBIND_ENV
from hostctl.service.render import render_files

from conftest import OUT, TESTS

NODE1_SERIAL, NODE0_SERIAL = "HCVMNUMA1", "HCVMNUMA0"  # behind pxb numa_node=1 / numa_node=0
ROOTBUS_SERIAL = "HCVMROOTBUS"  # on the root PCI bus: no proximity domain
PROFILE = TESTS / "numa.toml"
CGROUP = Path("/sys/fs/cgroup")
ENTRYPOINT = resource_root() / "runtime/entrypoint/hostctl-entrypoint"
BUFFER_MIB = 64

# Runs inside the bound process: touch a buffer, then report where the kernel let it run and
# where the buffer's pages are.
PAYLOAD = r"""
import json, re
buf = bytearray(%d * 1024 * 1024)
for i in range(0, len(buf), 4096):
    buf[i] = 1
status = dict(l.split(":", 1) for l in open("/proc/self/status") if ":" in l)
pages, policies = {}, set()
for line in open("/proc/self/numa_maps"):
    f = line.split()
    if "anon=" not in line or "file=" in line:  # anonymous memory only: page cache may sit anywhere
        continue
    policies.add(f[1])
    for m in re.finditer(r" N(\d+)=(\d+)", line):
        pages[m.group(1)] = pages.get(m.group(1), 0) + int(m.group(2))
print(json.dumps({"cpus": status["Cpus_allowed_list"].strip(), "mems": status["Mems_allowed_list"].strip(),
                  "pages": pages, "policies": sorted(policies)}))
""" % BUFFER_MIB


def pci_address(serial: str) -> str:
    for ctrl in Path("/sys/class/nvme").iterdir():
        if (ctrl / "serial").read_text().strip() == serial:
            return Path(os.path.realpath(ctrl / "device")).name
    raise AssertionError(f"no NVMe controller with serial {serial}")


class OneGpuAt(NvmlAdapter):
    """NVML as it would answer on a host with one GPU at `bus_id`; nothing else is faked."""

    class Unsupported(Exception):
        pass

    errors = (Unsupported,)

    def __init__(self, bus_id: str):
        super().__init__()
        domain, rest = bus_id.split(":", 1)
        self.nvml_bus = f"{int(domain, 16):08x}:{rest}"  # NVML writes the domain with 8 digits

    def init(self): pass
    def shutdown(self): pass
    def driver_version(self): return "580.65.06"
    def cuda_driver_version(self): return 13000
    def nvml_version(self): return "13.580.65.06"
    def device_count(self): return 1
    def handle(self, index): return index
    def name(self, h): return "stand-in GPU (NVMe controller's PCI address)"
    def uuid(self, h): return "GPU-00000000-0000-0000-0000-vmtestnuma"
    def pci_bus_id(self, h): return self.nvml_bus
    def memory_total(self, h): return 96 * 1024**3

    def _unsupported(self, *args):
        raise self.Unsupported("Not Supported")

    power_limit_mw = power_default_mw = power_constraints_mw = power_enforced_mw = _unsupported
    persistence_mode = pcie_gen_current = pcie_gen_max = pcie_width_current = pcie_width_max = _unsupported
    bar1_total = topology_common_ancestor = nvlink_active = nvlink_remote_bus_id = p2p_status = _unsupported


def plan_for(serial: str):
    config = load_config(PROFILE)
    facts = collect()
    facts = facts.model_copy(update={"gpus": probe_gpus(OneGpuAt(pci_address(serial)))})
    return build_plan(config, facts)


def test_guest_has_two_numa_nodes_one_cpu_each():
    numa = probe_numa()
    assert [(n.id, n.cpus) for n in numa.nodes] == [(0, [0]), (1, [1])]
    assert all(n.mem_total_bytes and n.mem_total_bytes > 512 * 1024**2 for n in numa.nodes)


@pytest.mark.parametrize("serial,node", [(NODE1_SERIAL, 1), (NODE0_SERIAL, 0), (ROOTBUS_SERIAL, None)])
def test_sysfs_reports_each_device_node(serial, node):
    got, reason, cpus = read_numa(pci_address(serial))
    assert got == node, reason
    if node is not None:
        assert cpus == [node]


@pytest.mark.parametrize("serial,node", [(NODE1_SERIAL, 1), (NODE0_SERIAL, 0)])
def test_plan_binds_to_the_node_of_the_device(serial, node):
    plan = plan_for(serial)
    p = plan.placement
    assert [g.pci_bus_id for g in p.gpus] == [pci_address(serial)]
    assert (p.numa_node, p.cpuset, p.bind_memory) == (node, str(node), True)
    assert p.env[MEMBIND_ENV] == str(node)
    assert "SYS_NICE" in p.cap_add
    (OUT / f"numa-plan-{serial}.json").write_text(plan.model_dump_json(indent=2))


def test_plan_leaves_an_unknown_node_unbound_and_says_so():
    p = plan_for(ROOTBUS_SERIAL).placement
    assert (p.numa_node, p.cpuset, p.bind_memory) == (None, None, False)
    assert MEMBIND_ENV not in p.env
    assert any(d.key == "NUMA node" and d.value == "unknown" for d in p.decisions)
    assert any("NUMA node unknown" in pr.message for pr in p.problems)


def _rendered(serial: str) -> tuple[dict, dict]:
    files = render_files(plan_for(serial))
    compose = yaml.safe_load(files["compose.yaml"])["services"]["runtime"]
    env = dict(line.split("=", 1) for line in files["runtime.env"].splitlines() if line and not line.startswith("#"))
    return compose, env


def _run_bound(cpuset: str, node: str, mems: str | None) -> dict:
    """Start the payload in a fresh cgroup with `cpuset` (and cpuset.mems when given), through
    the runtime entrypoint with HOSTCTL_NUMA_NODE=node; return what it reports."""
    (CGROUP / "cgroup.subtree_control").write_text("+cpuset")
    group = CGROUP / f"hostctl-vmtest-{uuid.uuid4().hex[:8]}"
    group.mkdir()
    try:
        (group / "cpuset.cpus").write_text(cpuset)
        if mems is not None:
            (group / "cpuset.mems").write_text(mems)
        procs = str(group / "cgroup.procs")

        def enter() -> None:  # in the child, before exec: join the cgroup, as the container's init would
            with open(procs, "w") as f:
                f.write(str(os.getpid()))

        argv = ["sh", str(ENTRYPOINT), sys.executable, "-c", PAYLOAD]
        env = dict(os.environ, **{MEMBIND_ENV: node})
        res = subprocess.run(argv, capture_output=True, text=True, timeout=300, preexec_fn=enter, env=env)
        assert res.returncode == 0, res.stderr
        return json.loads(res.stdout)
    finally:
        group.rmdir()


@pytest.mark.parametrize("serial,node", [(NODE1_SERIAL, "1"), (NODE0_SERIAL, "0")])
def test_process_started_like_the_runtime_runs_and_allocates_on_the_node(serial, node):
    compose, env = _rendered(serial)
    assert compose["cpuset"] == node and env[MEMBIND_ENV] == node
    got = _run_bound(compose["cpuset"], env[MEMBIND_ENV], mems=None)
    (OUT / f"numa-process-{serial}.json").write_text(json.dumps(got, indent=2))
    assert got["cpus"] == node
    assert f"bind:{node}" in got["policies"], got
    other = "0" if node == "1" else "1"
    on_node = got["pages"].get(node, 0)
    assert on_node >= BUFFER_MIB * 256, got  # every 4 KiB page of the buffer
    assert got["pages"].get(other, 0) == 0, got


def test_cpuset_mems_from_the_plan_shows_in_mems_allowed_list():
    compose, env = _rendered(NODE1_SERIAL)
    got = _run_bound(compose["cpuset"], env[MEMBIND_ENV], mems=env[MEMBIND_ENV])
    (OUT / "numa-process-cpuset-mems.json").write_text(json.dumps(got, indent=2))
    assert (got["cpus"], got["mems"]) == ("1", "1")
    assert got["pages"].get("1", 0) >= BUFFER_MIB * 256 and got["pages"].get("0", 0) == 0, got
