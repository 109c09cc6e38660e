"""Facts snapshots of awkward hosts, each derived from a bundled reference snapshot by the
changes that make it awkward (so every difference is visible in one place)."""

from __future__ import annotations

from hostctl import examples
from hostctl.config import Config
from hostctl.facts.model import GpuPair, HostFacts, NumaNode
from hostctl.units import GIB


def reference(name: str) -> tuple[Config, HostFacts]:
    return examples.load(name)


def desktop() -> tuple[Config, HostFacts]:
    return reference("pro6000x2-desktop")


def p2p_unsupported() -> HostFacts:
    """The desktop before IOMMU was turned off: the driver refuses P2P between the cards."""
    _, f = desktop()
    f = f.model_copy(deep=True)
    f.gpus.pairs = [GpuPair(a=0, b=1, topology="PHB", p2p_read="chipset_not_supported", p2p_write="chipset_not_supported")]
    f.iommu.class_entries = ["ivhd0"]
    f.iommu.group_count = 31
    f.iommu.default_domain_type = "DMA"
    f.state.p2p = None
    return f


def too_little_ram_swap() -> HostFacts:
    """The desktop with only its original 8 GiB swap file: 53 GiB of RAM+swap for a 220 GiB conversion."""
    _, f = desktop()
    f = f.model_copy(deep=True)
    f.memory.swaps = [s for s in f.memory.swaps if s.kind == "file"]
    f.memory.swap_total_bytes = 8 * GIB
    f.memory.swap_free_bytes = 8 * GIB
    return f


def two_sockets_split() -> HostFacts:
    """Two sockets, two GPUs, one on each node: the mapped host with a second card on node 1."""
    _, f = reference("pro6000x1-mapped")
    f = f.model_copy(deep=True)
    second = f.gpus.devices[0].model_copy(deep=True)
    second.index, second.uuid, second.pci_bus_id = 1, "GPU-00000000-0000-4000-8000-0000000000b1", "0000:b1:00.0"
    second.numa_node, second.local_cpus = 1, f.numa.nodes[1].cpus
    f.gpus.devices.append(second)
    f.gpus.pairs = [GpuPair(a=0, b=1, topology="SYS", p2p_read="ok", p2p_write="ok")]
    return f


def numa_unknown_two_nodes() -> HostFacts:
    """The mapped host read inside a VM: two NUMA nodes but the GPU's numa_node reads -1."""
    _, f = reference("pro6000x1-mapped")
    f = f.model_copy(deep=True)
    f.gpus.devices[0].numa_node = None
    f.gpus.devices[0].numa_reason = "sysfs numa_node reads -1"
    f.kernel.virtualization = "kvm"
    return f


def gpu_on_node1() -> HostFacts:
    _, f = reference("pro6000x1-mapped")
    f = f.model_copy(deep=True)
    f.gpus.devices[0].numa_node = 1
    f.gpus.devices[0].pci_bus_id = "0000:b1:00.0"
    return f


__all__ = ["NumaNode"]
