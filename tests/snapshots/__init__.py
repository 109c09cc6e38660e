"""Facts snapshots of awkward hosts, each derived from a bundled reference snapshot by the
changes that make it awkward (so every difference is visible in one place)."""

from __future__ import annotations

from hostctl import examples
from hostctl.config import Config
from hostctl.facts.records import BlankProof, GpuPair, HostFacts, NumaNode, Partition
from hostctl.provision import fstab, sysctl
from hostctl.facts.sysfiles import SystemFiles
from hostctl.bytesizes import GIB


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


def blank_drives() -> HostFacts:
    """The desktop before its first `hostctl provision`: both 4 TB NVMe drives blank, only the
    8 GiB swap file, nothing mounted under /mnt/hostctl."""
    _, f = desktop()
    f = f.model_copy(deep=True)
    for disk in f.disks.devices:
        if not disk.is_root_disk:
            disk.partitions, disk.table_type, disk.table_entries = [], None, None
            disk.blank = BlankProof(first_mib_zero=True, last_mib_zero=True)  # what the probe reads on a new drive
    f.memory.swaps = [s for s in f.memory.swaps if s.kind == "file"]
    f.memory.swap_total_bytes = f.memory.swap_free_bytes = 8 * GIB
    f.mounts = [m for m in f.mounts if not m.target.startswith("/mnt/hostctl")]
    f.paths = [p for p in f.paths if not p.path.startswith("/mnt/hostctl")]
    return f


def foreign_and_removable() -> HostFacts:
    """The fresh desktop with a third NVMe drive that holds someone's ext4 partition and a blank
    USB stick: neither may ever be proposed."""
    f = blank_drives()
    ssd = next(d for d in f.disks.devices if d.name == "nvme2n1")
    foreign = ssd.model_copy(deep=True, update={"name": "nvme3n1", "path": "/dev/nvme3n1", "serial": "S7KGNU0X700003",
                                                "wwn": None, "by_id": ["nvme-Samsung_SSD_990_PRO_2TB_S7KGNU0X700003"],
                                                "model": "Samsung SSD 990 PRO 2TB", "size_bytes": 2 * 10**12, "table_type": "gpt",
                                                "table_entries": 1, "blank": None})
    foreign.partitions = [Partition(name="nvme3n1p1", path="/dev/nvme3n1p1", number=1, size_bytes=2 * 10**12 - 2 * 2**20,
                                    part_label="photos", fs_type="ext4", fs_label="photos")]
    usb = ssd.model_copy(deep=True, update={"name": "sda", "path": "/dev/sda", "serial": "4C530001230815117442",
                                            "wwn": None, "by_id": ["usb-SanDisk_Ultra_4C530001230815117442-0:0"],
                                            "model": "SanDisk Ultra", "size_bytes": 64 * 10**9, "removable": True})
    f.disks.devices += [foreign, usb]
    return f


__all__ = ["NumaNode"]


def desktop_files(cfg: Config, facts: HostFacts, user_fstab: str = "") -> SystemFiles:
    """The fstab block and sysctl file as hostctl would have written them on that desktop, below
    the user's own fstab lines."""
    entries = []
    for d in cfg.profile.drives:
        disk = next(x for x in facts.disks.devices if x.serial == d.identity.value)
        swap, data = disk.partitions
        entries.append(fstab.Entry(spec=f"UUID={swap.fs_uuid}", file="none", vfstype="swap", options="pri=100,nofail"))
        entries.append(fstab.Entry(spec=f"UUID={data.fs_uuid}", file=d.mount, vfstype="ext4", options="defaults,noatime,nofail", passno=2))
    return SystemFiles(fstab=fstab.with_block(user_fstab, entries), sysctl=sysctl.render(cfg.profile, sysctl.desired(cfg.profile)))
