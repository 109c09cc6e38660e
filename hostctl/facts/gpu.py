"""GPU facts through NVML: driver, devices (power limits, PCIe link, BAR1, NUMA placement) and
every pair's topology level and P2P status.

All NVML calls sit behind NvmlAdapter, which speaks plain Python values, so a fake with the
same methods (tests/fake_nvml.py) can stand in for a machine we don't have. The adapter
has one write: the power limit, which only `provision --only gpu` calls. A getter NVML cannot answer
(NotSupported on this GPU, in this VM, ...) leaves its one field None; only a missing driver
or library makes the whole part unavailable.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from hostctl.facts.records import Gpu, GpuFacts, GpuPair, PcieLink, PowerLimits
from hostctl.cpulists import parse_cpulist

PCI_DEVICES = Path("/sys/bus/pci/devices")
NVIDIA_VERSION = Path("/proc/driver/nvidia/version")
# The nvidia kernel module creates both while it is loaded (a container given the GPUs sees both
# too). Neither there means NVML can only answer "driver not loaded", and importing pynvml for
# that costs ~80 ms (pynvml + ctypes; benchmarks/results/doctor_quick-2vcpu-shared.txt).
NVIDIA_CTL = Path("/dev/nvidiactl")

# nvmlGpuTopologyLevel_t values -> TOPOLOGY_ORDER names (NVLink is found separately)
TOPOLOGY_LEVELS = {0: "SELF", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
# nvmlGpuP2PStatus_t values
P2P_STATUS = {
    0: "ok",
    1: "chipset_not_supported",
    2: "gpu_not_supported",
    3: "ioh_topology_not_supported",
    4: "disabled_by_regkey",
    5: "not_supported",
    6: "unknown",
}
# nvmlGpuP2PCapsIndex_t values; written out because pynvml 13 defines ..._READ as the tuple (0,)
P2P_CAPS_READ, P2P_CAPS_WRITE, P2P_CAPS_NVLINK = 0, 1, 2

NUMA_UNKNOWN = "sysfs reports -1: unknown — common in VMs and on single-node firmware"

T = TypeVar("T")


class NvmlUnavailable(Exception):
    """NVML cannot be used at all on this host; the message says why, for GpuFacts.reason."""


class NvmlAdapter:
    """The NVML calls hostctl makes. Handles are opaque; every other value is a plain int/str/bool.
    `errors` lists the exception types that mean "NVML has no answer for this one getter"."""

    errors: tuple[type[BaseException], ...] = ()

    def __init__(self) -> None:
        self._nvml: Any = None
        self.max_nvlinks = 18

    def init(self) -> None:
        if not (NVIDIA_VERSION.exists() or NVIDIA_CTL.exists()):
            raise NvmlUnavailable(f"NVIDIA driver not loaded: neither {NVIDIA_VERSION} nor {NVIDIA_CTL} exists")
        try:
            import pynvml
        except ImportError as exc:
            raise NvmlUnavailable(f"nvidia-ml-py (pynvml) is not installed: {exc}") from exc
        self._nvml = pynvml
        self.errors = (pynvml.NVMLError,)
        self.max_nvlinks = getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError_LibraryNotFound as exc:
            raise NvmlUnavailable("NVIDIA driver not loaded: libnvidia-ml.so.1 not found") from exc
        except pynvml.NVMLError_DriverNotLoaded as exc:
            raise NvmlUnavailable("NVIDIA driver not loaded: NVML says the nvidia kernel module is not loaded") from exc
        except pynvml.NVMLError_NoPermission as exc:
            raise NvmlUnavailable("NVML: no permission to open the NVIDIA device nodes (/dev/nvidia*)") from exc
        except pynvml.NVMLError as exc:
            raise NvmlUnavailable(f"NVML initialisation failed: {exc}") from exc

    def shutdown(self) -> None:
        self._nvml.nvmlShutdown()

    def driver_version(self) -> str:
        return self._nvml.nvmlSystemGetDriverVersion()

    def cuda_driver_version(self) -> int:
        return self._nvml.nvmlSystemGetCudaDriverVersion()

    def nvml_version(self) -> str:
        return self._nvml.nvmlSystemGetNVMLVersion()

    def device_count(self) -> int:
        return self._nvml.nvmlDeviceGetCount()

    def handle(self, index: int) -> Any:
        return self._nvml.nvmlDeviceGetHandleByIndex(index)

    def name(self, h: Any) -> str:
        return self._nvml.nvmlDeviceGetName(h)

    def uuid(self, h: Any) -> str:
        return self._nvml.nvmlDeviceGetUUID(h)

    def pci_bus_id(self, h: Any) -> str:
        bus = self._nvml.nvmlDeviceGetPciInfo(h).busId
        return bus.decode() if isinstance(bus, bytes) else bus

    def memory_total(self, h: Any) -> int:
        return self._nvml.nvmlDeviceGetMemoryInfo(h).total

    def power_limit_mw(self, h: Any) -> int:
        return self._nvml.nvmlDeviceGetPowerManagementLimit(h)

    def power_default_mw(self, h: Any) -> int:
        return self._nvml.nvmlDeviceGetPowerManagementDefaultLimit(h)

    def power_constraints_mw(self, h: Any) -> tuple[int, int]:
        lo, hi = self._nvml.nvmlDeviceGetPowerManagementLimitConstraints(h)
        return lo, hi

    def power_enforced_mw(self, h: Any) -> int:
        return self._nvml.nvmlDeviceGetEnforcedPowerLimit(h)

    def persistence_mode(self, h: Any) -> bool:
        return self._nvml.nvmlDeviceGetPersistenceMode(h) == self._nvml.NVML_FEATURE_ENABLED

    def pcie_gen_current(self, h: Any) -> int:
        return self._nvml.nvmlDeviceGetCurrPcieLinkGeneration(h)

    def pcie_gen_max(self, h: Any) -> int:
        # the link's maximum with this GPU in this slot, as nvidia-smi's pcie.link.gen.max
        return self._nvml.nvmlDeviceGetMaxPcieLinkGeneration(h)

    def pcie_width_current(self, h: Any) -> int:
        return self._nvml.nvmlDeviceGetCurrPcieLinkWidth(h)

    def pcie_width_max(self, h: Any) -> int:
        return self._nvml.nvmlDeviceGetMaxPcieLinkWidth(h)

    def bar1_total(self, h: Any) -> int:
        return self._nvml.nvmlDeviceGetBAR1MemoryInfo(h).bar1Total

    def topology_common_ancestor(self, h1: Any, h2: Any) -> int:
        return self._nvml.nvmlDeviceGetTopologyCommonAncestor(h1, h2)

    def nvlink_active(self, h: Any, link: int) -> bool:
        return self._nvml.nvmlDeviceGetNvLinkState(h, link) == self._nvml.NVML_FEATURE_ENABLED

    def nvlink_remote_bus_id(self, h: Any, link: int) -> str:
        bus = self._nvml.nvmlDeviceGetNvLinkRemotePciInfo(h, link).busId
        return bus.decode() if isinstance(bus, bytes) else bus

    def p2p_status(self, h1: Any, h2: Any, caps_index: int) -> int:
        return self._nvml.nvmlDeviceGetP2PStatus(h1, h2, caps_index)

    # ---- live readings (hostctl.facts.gpu_telemetry: `status --watch`, `hostctl metrics`)

    def power_usage_mw(self, h: Any) -> int:
        return self._nvml.nvmlDeviceGetPowerUsage(h)

    def temperature_c(self, h: Any) -> int:
        return self._nvml.nvmlDeviceGetTemperature(h, self._nvml.NVML_TEMPERATURE_GPU)

    def utilization_percent(self, h: Any) -> int:
        return self._nvml.nvmlDeviceGetUtilizationRates(h).gpu

    def memory_used(self, h: Any) -> int:
        return self._nvml.nvmlDeviceGetMemoryInfo(h).used

    def clocks_event_reasons(self, h: Any) -> int:
        """Why the clocks are held down now, a bitmask (NVML's "clocks event reasons", formerly throttle reasons)."""
        return self._nvml.nvmlDeviceGetCurrentClocksEventReasons(h)

    # ---- the write side (provision only; never called by facts or tests on a real GPU)

    def set_power_limit_mw(self, h: Any, milliwatts: int) -> None:
        self._nvml.nvmlDeviceSetPowerManagementLimit(h, int(milliwatts))

    def is_no_permission(self, exc: BaseException) -> bool:
        """Whether an error from a call above means "needs root" (NVML_ERROR_NO_PERMISSION)."""
        return isinstance(exc, self._nvml.NVMLError_NoPermission)


def sysfs_bus_id(nvml_bus_id: str) -> str:
    """NVML's 00000000:01:00.0 -> sysfs's 0000:01:00.0."""
    domain, _, rest = nvml_bus_id.strip().partition(":")
    try:
        return f"{int(domain, 16):04x}:{rest}".lower()
    except ValueError:
        return nvml_bus_id.strip().lower()


def cuda_version_text(value: int) -> str:
    """NVML's 12080 -> "12.8"."""
    return f"{value // 1000}.{value % 1000 // 10}"


def kernel_module_flavour(version_text: str | None) -> str | None:
    if not version_text:
        return None
    first = version_text.splitlines()[0] if version_text.strip() else ""
    if "Open Kernel Module" in first:
        return "open"
    return "proprietary" if "Kernel Module" in first else None


def read_numa(bus_id: str, pci_root: Path = PCI_DEVICES) -> tuple[int | None, str | None, list[int] | None]:
    """(numa_node, numa_reason, local_cpus) from sysfs; never guessed."""
    dev = pci_root / bus_id
    try:
        node = int((dev / "numa_node").read_text().strip())
    except (OSError, ValueError) as exc:
        node, reason = None, f"cannot read {dev / 'numa_node'}: {exc.__class__.__name__}"
    else:
        reason = None
        if node < 0:
            node, reason = None, NUMA_UNKNOWN
    try:
        cpus: list[int] | None = parse_cpulist((dev / "local_cpulist").read_text())
    except (OSError, ValueError):
        cpus = None
    return node, reason, cpus


class Prober:
    """NVML getters for one session: a getter NVML cannot answer gives None (its field unknown),
    watts from NVML's milliwatts. Shared by the facts here and the live readings (gpu_telemetry)."""

    def __init__(self, adapter: NvmlAdapter):
        self.nv = adapter

    def get(self, fn: Callable[..., T], *args: Any) -> T | None:
        try:
            return fn(*args)
        except self.nv.errors:
            return None

    def watts(self, fn: Callable[..., int], h: Any) -> float | None:
        mw = self.get(fn, h)
        return None if mw is None else mw / 1000.0

    def device(self, index: int, h: Any, pci_root: Path) -> Gpu:
        nv = self.nv
        bus = sysfs_bus_id(nv.pci_bus_id(h))
        constraints = self.get(nv.power_constraints_mw, h)
        node, reason, cpus = read_numa(bus, pci_root)
        return Gpu(
            index=index,
            name=self.get(nv.name, h) or "unknown",
            uuid=nv.uuid(h),
            pci_bus_id=bus,
            memory_total_bytes=self.get(nv.memory_total, h) or 0,
            power=PowerLimits(
                limit_w=self.watts(nv.power_limit_mw, h),
                default_w=self.watts(nv.power_default_mw, h),
                min_w=None if constraints is None else constraints[0] / 1000.0,
                max_w=None if constraints is None else constraints[1] / 1000.0,
                enforced_w=self.watts(nv.power_enforced_mw, h),
            ),
            persistence_mode=self.get(nv.persistence_mode, h),
            pcie=PcieLink(
                gen_current=self.get(nv.pcie_gen_current, h),
                gen_max=self.get(nv.pcie_gen_max, h),
                width_current=self.get(nv.pcie_width_current, h),
                width_max=self.get(nv.pcie_width_max, h),
            ),
            numa_node=node,
            numa_reason=reason,
            local_cpus=cpus,
            bar1_total_bytes=self.get(nv.bar1_total, h),
        )

    def nvlink_peers(self, h: Any) -> tuple[bool, set[str]]:
        """(any link active, sysfs bus ids at the far end of the active links)."""
        active, peers = False, set()
        for link in range(self.nv.max_nvlinks):
            try:
                up = self.nv.nvlink_active(h, link)
            except self.nv.errors:
                break  # NotSupported (no NVLink) or InvalidArgument (past the last link)
            if up:
                active = True
                remote = self.get(self.nv.nvlink_remote_bus_id, h, link)
                if remote:
                    peers.add(sysfs_bus_id(remote))
        return active, peers

    def pair(self, a: Gpu, ha: Any, links_a: tuple[bool, set[str]], b: Gpu, hb: Any, links_b: tuple[bool, set[str]]) -> GpuPair:
        nv = self.nv
        level = self.get(nv.topology_common_ancestor, ha, hb)
        nvlink = b.pci_bus_id in links_a[1] or a.pci_bus_id in links_b[1]
        if not nvlink and links_a[0] and links_b[0]:
            # both on NVLink but through an NVSwitch: the far end is the switch, not the peer
            nvlink = self.get(nv.p2p_status, ha, hb, P2P_CAPS_NVLINK) == 0
        read = self.get(nv.p2p_status, ha, hb, P2P_CAPS_READ)
        write = self.get(nv.p2p_status, ha, hb, P2P_CAPS_WRITE)
        return GpuPair(
            a=a.index,
            b=b.index,
            topology="NVLINK" if nvlink else TOPOLOGY_LEVELS.get(level) if level is not None else None,
            p2p_read=None if read is None else P2P_STATUS.get(read, "unknown"),
            p2p_write=None if write is None else P2P_STATUS.get(write, "unknown"),
            nvlink=nvlink,
        )


def probe_gpus(
    adapter: NvmlAdapter | None = None,
    *,
    pci_root: Path = PCI_DEVICES,
    version_file: Path = NVIDIA_VERSION,
) -> GpuFacts:
    nv = adapter or NvmlAdapter()
    try:
        nv.init()
    except NvmlUnavailable as exc:
        return GpuFacts(available=False, reason=str(exc))
    try:
        return _probe(Prober(nv), pci_root, version_file)
    finally:
        try:
            nv.shutdown()
        except nv.errors:
            pass


def _probe(p: Prober, pci_root: Path, version_file: Path) -> GpuFacts:
    nv = p.nv
    try:
        version_text: str | None = version_file.read_text()
    except OSError:
        version_text = None
    cuda = p.get(nv.cuda_driver_version)
    facts = GpuFacts(
        driver_version=p.get(nv.driver_version),
        cuda_driver_version=None if cuda is None else cuda_version_text(cuda),
        nvml_version=p.get(nv.nvml_version),
        kernel_module=kernel_module_flavour(version_text),
    )
    count = p.get(nv.device_count)
    if not count:
        facts.available = False
        facts.reason = "NVML found no NVIDIA GPUs" if count == 0 else "NVML could not count the GPUs"
        return facts
    handles: dict[int, Any] = {}
    failed: list[str] = []
    for index in range(count):
        try:
            h = nv.handle(index)
            facts.devices.append(p.device(index, h, pci_root))
            handles[index] = h
        except nv.errors as exc:
            failed.append(f"GPU {index}: {exc}")
    if failed:
        facts.reason = "some GPUs could not be read: " + "; ".join(failed)
    links = {g.index: p.nvlink_peers(handles[g.index]) for g in facts.devices}
    for a, b in itertools.combinations(facts.devices, 2):
        facts.pairs.append(p.pair(a, handles[a.index], links[a.index], b, handles[b.index], links[b.index]))
    return facts
