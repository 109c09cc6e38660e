"""A FAKE NVML adapter for tests and CI: machines we do not have (two RTX PRO 6000s at PHB with
P2P working or blocked, a two-socket host), behind the same small interface as NvmlAdapter.

It lives in tests/ because hostctl itself never uses it. It imitates what NVML does where provisioning depends on
it: setting a power limit outside the GPU's range is refused (InvalidArgument), setting one
without root is refused (NoPermission), and the enforced limit is the lowest of the configured
limit and any other limiter (`enforced_cap_mw`, e.g. a board or thermal limit), so a readback
mismatch can be provoked. Every set is recorded in `sets`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hostctl.facts.gpu import NvmlAdapter, NvmlUnavailable
from hostctl.cpulists import format_cpulist

PRO6000 = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"
PRO6000_MEMORY = 102641958912
# nvmlGpuTopologyLevel_t and nvmlGpuP2PStatus_t values (see hostctl.facts.gpu)
PHB, SYS = 30, 50
P2P_OK, P2P_CHIPSET_NOT_SUPPORTED = 0, 1


class FakeNvmlError(Exception):
    """What the fake raises where pynvml would raise NVMLError; `kind` names the NVML error."""

    def __init__(self, kind: str):
        super().__init__(kind)
        self.kind = kind


@dataclass
class FakeGpu:
    uuid: str
    bus_id: str  # NVML form, 00000000:01:00.0
    name: str = PRO6000
    memory_bytes: int = PRO6000_MEMORY
    limit_mw: int = 600_000
    default_mw: int = 600_000
    min_mw: int = 150_000
    max_mw: int = 600_000
    enforced_cap_mw: int | None = None  # another limiter below the configured limit
    persistence: bool = True
    gen_current: int = 5
    gen_max: int = 5
    width_current: int = 16
    width_max: int = 16
    bar1_bytes: int = 128 * 1024**3
    numa_node: int = -1  # what sysfs would say
    local_cpus: list[int] = field(default_factory=lambda: list(range(16)))
    # live readings (None: NVML answers NotSupported, as in some VMs)
    draw_mw: int | None = 90_000
    temperature_c: int | None = 41
    utilization_percent: int | None = 0
    memory_used_bytes: int | None = 512 * 1024**2
    clocks_event_reasons: int | None = 0x1  # idle


@dataclass
class FakeHost:
    name: str
    gpus: list[FakeGpu]
    topology: int = PHB  # every pair's common ancestor
    p2p_read: int = P2P_OK
    p2p_write: int = P2P_OK
    driver_version: str = "595.71.05"
    cuda_version: int = 13010
    driver_loaded: bool = True
    root: bool = True


class FakeNvml(NvmlAdapter):
    """NvmlAdapter over a FakeHost. `driver_after` makes init fail that many times first (a driver
    still loading at boot)."""

    errors = (FakeNvmlError,)

    def __init__(self, host: FakeHost, *, driver_after: int = 0):
        super().__init__()
        self.host = copy.deepcopy(host)
        self.driver_after = driver_after
        self.init_calls = 0
        self.sets: list[tuple[str, int]] = []  # (uuid, milliwatts) of every successful set

    # ---- lifecycle and system
    def init(self) -> None:
        self.init_calls += 1
        if not self.host.driver_loaded or self.init_calls <= self.driver_after:
            raise NvmlUnavailable("NVIDIA driver not loaded: NVML says the nvidia kernel module is not loaded")

    def shutdown(self) -> None:
        pass

    def driver_version(self) -> str:
        return self.host.driver_version

    def cuda_driver_version(self) -> int:
        return self.host.cuda_version

    def nvml_version(self) -> str:
        return "13." + self.host.driver_version

    def device_count(self) -> int:
        return len(self.host.gpus)

    def handle(self, index: int) -> Any:
        if not 0 <= index < len(self.host.gpus):
            raise FakeNvmlError("InvalidArgument")
        return self.host.gpus[index]

    # ---- one GPU
    def name(self, h: FakeGpu) -> str:
        return h.name

    def uuid(self, h: FakeGpu) -> str:
        return h.uuid

    def pci_bus_id(self, h: FakeGpu) -> str:
        return h.bus_id

    def memory_total(self, h: FakeGpu) -> int:
        return h.memory_bytes

    def power_limit_mw(self, h: FakeGpu) -> int:
        return h.limit_mw

    def power_default_mw(self, h: FakeGpu) -> int:
        return h.default_mw

    def power_constraints_mw(self, h: FakeGpu) -> tuple[int, int]:
        return h.min_mw, h.max_mw

    def power_enforced_mw(self, h: FakeGpu) -> int:
        return h.limit_mw if h.enforced_cap_mw is None else min(h.limit_mw, h.enforced_cap_mw)

    def persistence_mode(self, h: FakeGpu) -> bool:
        return h.persistence

    def pcie_gen_current(self, h: FakeGpu) -> int:
        return h.gen_current

    def pcie_gen_max(self, h: FakeGpu) -> int:
        return h.gen_max

    def pcie_width_current(self, h: FakeGpu) -> int:
        return h.width_current

    def pcie_width_max(self, h: FakeGpu) -> int:
        return h.width_max

    def bar1_total(self, h: FakeGpu) -> int:
        return h.bar1_bytes

    # ---- live readings
    def _live(self, value: Any) -> Any:
        if value is None:
            raise FakeNvmlError("NotSupported")
        return value

    def power_usage_mw(self, h: FakeGpu) -> int:
        return self._live(h.draw_mw)

    def temperature_c(self, h: FakeGpu) -> int:
        return self._live(h.temperature_c)

    def utilization_percent(self, h: FakeGpu) -> int:
        return self._live(h.utilization_percent)

    def memory_used(self, h: FakeGpu) -> int:
        return self._live(h.memory_used_bytes)

    def clocks_event_reasons(self, h: FakeGpu) -> int:
        return self._live(h.clocks_event_reasons)

    # ---- pairs
    def topology_common_ancestor(self, h1: FakeGpu, h2: FakeGpu) -> int:
        return self.host.topology

    def nvlink_active(self, h: FakeGpu, link: int) -> bool:
        raise FakeNvmlError("NotSupported")  # PCIe cards: no NVLink

    def nvlink_remote_bus_id(self, h: FakeGpu, link: int) -> str:
        raise FakeNvmlError("NotSupported")

    def p2p_status(self, h1: FakeGpu, h2: FakeGpu, caps_index: int) -> int:
        return {0: self.host.p2p_read, 1: self.host.p2p_write}.get(caps_index, 5)

    # ---- the write side
    def set_power_limit_mw(self, h: FakeGpu, milliwatts: int) -> None:
        if not self.host.root:
            raise FakeNvmlError("NoPermission")
        if not h.min_mw <= milliwatts <= h.max_mw:
            raise FakeNvmlError("InvalidArgument")
        h.limit_mw = int(milliwatts)
        self.sets.append((h.uuid, int(milliwatts)))

    def is_no_permission(self, exc: BaseException) -> bool:
        return isinstance(exc, FakeNvmlError) and exc.kind == "NoPermission"


def write_sysfs(host: FakeHost, pci_root: Path) -> Path:
    """The sysfs files probe_gpus reads for placement (numa_node, local_cpulist) under pci_root."""
    for gpu in host.gpus:
        domain, _, rest = gpu.bus_id.partition(":")
        dev = pci_root / f"{int(domain, 16):04x}:{rest}".lower()
        dev.mkdir(parents=True, exist_ok=True)
        (dev / "numa_node").write_text(f"{gpu.numa_node}\n")
        (dev / "local_cpulist").write_text(format_cpulist(gpu.local_cpus) + "\n")
    return pci_root


# ---------------------------------------------------------------- the reference hosts


def pro6000x2_phb(*, p2p_ok: bool = True) -> FakeHost:
    """Report 001's desktop (docs/field-reports.md): two PRO 6000s at PCIe 5.0 x8/x8 under one host bridge, 300 W
    caps (range 150-600 W). With p2p_ok=False the driver refuses P2P (chipset_not_supported), as
    it did there before IOMMU was turned off."""
    status = P2P_OK if p2p_ok else P2P_CHIPSET_NOT_SUPPORTED
    gpus = [
        FakeGpu(uuid="GPU-5c1d9a62-7e0b-4f3a-9c2d-1b8e4a6f0c11", bus_id="00000000:01:00.0", limit_mw=300_000,
                width_current=8, width_max=16),
        FakeGpu(uuid="GPU-8e2f4b73-1a9c-4d5e-8f60-2c7d9b1e3a22", bus_id="00000000:03:00.0", limit_mw=300_000,
                width_current=8, width_max=16),
    ]
    return FakeHost(name="pro6000x2-phb" + ("" if p2p_ok else "-p2p-blocked"), gpus=gpus, topology=PHB,
                    p2p_read=status, p2p_write=status)


def two_socket() -> FakeHost:
    """A two-socket Xeon (report 000's kind of host, docs/field-reports.md) with one PRO 6000 per socket: PCIe 4.0
    x16, node 0 and node 1, meeting only across the inter-socket link (SYS)."""
    node0 = list(range(0, 24)) + list(range(48, 72))
    node1 = list(range(24, 48)) + list(range(72, 96))
    gpus = [
        FakeGpu(uuid="GPU-2b7c4d81-9f3e-4a5b-8c6d-7e1f0a2b3c44", bus_id="00000000:31:00.0", gen_current=4, gen_max=4,
                numa_node=0, local_cpus=node0),
        FakeGpu(uuid="GPU-00000000-0000-4000-8000-0000000000b1", bus_id="00000000:B1:00.0", gen_current=4, gen_max=4,
                numa_node=1, local_cpus=node1),
    ]
    return FakeHost(name="two-socket", gpus=gpus, topology=SYS)


REFERENCE_HOSTS = {
    "pro6000x2-phb": lambda: pro6000x2_phb(p2p_ok=True),
    "pro6000x2-phb-p2p-blocked": lambda: pro6000x2_phb(p2p_ok=False),
    "two-socket": two_socket,
}


def pci_tree(root: Path, chains: list[list[str]]) -> Path:
    """A /sys/devices-like tree of PCI paths (root port ... device) with /sys/bus/pci/devices-like
    links into it; returns the bus directory."""
    bus = root / "bus"
    bus.mkdir(parents=True)
    for chain in chains:
        path = root / "devices" / "pci0000:00"
        for bdf in chain:
            path = path / bdf
            path.mkdir(parents=True, exist_ok=True)
            if not (bus / bdf).exists():
                (bus / bdf).symlink_to(path)
    return bus
