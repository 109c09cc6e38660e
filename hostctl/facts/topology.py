"""Topology facts: NUMA nodes, IOMMU state, the kernel (release, command line) and whether this
host is virtualised (readings taken inside a VM may not describe the hardware)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from hostctl import runner
from hostctl.facts.records import IommuFacts, KernelFacts, NumaFacts, NumaNode
from hostctl.cpulists import parse_cpulist

NODE_DIR = Path("/sys/devices/system/node")
IOMMU_CLASS = Path("/sys/class/iommu")
IOMMU_GROUPS = Path("/sys/kernel/iommu_groups")
CMDLINE = Path("/proc/cmdline")
DMI = Path("/sys/class/dmi/id")
CPUINFO = Path("/proc/cpuinfo")

IOMMU_FLAGS = ("intel_iommu", "amd_iommu", "iommu", "iommu.passthrough", "iommu.strict")
# DMI vendor / product substrings -> the name systemd-detect-virt would print
DMI_HYPERVISORS = (
    ("QEMU", "qemu"),
    ("KVM", "kvm"),
    ("VMware", "vmware"),
    ("VirtualBox", "oracle"),
    ("innotek", "oracle"),
    ("Xen", "xen"),
    ("Microsoft", "microsoft"),
    ("Amazon EC2", "amazon"),
    ("Google", "google"),
)
_NODE_MEMTOTAL = re.compile(r"MemTotal:\s+(\d+)\s*kB")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def probe_numa() -> NumaFacts:
    cpu_count = os.cpu_count() or 1
    nodes: list[NumaNode] = []
    try:
        names = [n for n in os.listdir(NODE_DIR) if n.startswith("node") and n[4:].isdigit()]
    except OSError:
        names = []
    for name in sorted(names, key=lambda n: int(n[4:])):
        cpus = parse_cpulist(_read(NODE_DIR / name / "cpulist") or "")
        m = _NODE_MEMTOTAL.search(_read(NODE_DIR / name / "meminfo") or "")
        nodes.append(NumaNode(id=int(name[4:]), cpus=cpus, mem_total_bytes=int(m.group(1)) * 1024 if m else None))
    if not nodes:
        # no NUMA sysfs (CONFIG_NUMA off, or hidden in a container): the host is one node
        nodes = [NumaNode(id=0, cpus=list(range(cpu_count)))]
    return NumaFacts(nodes=nodes, cpu_count=cpu_count)


def kernel_args(cmdline: str) -> list[str]:
    """The kernel's own arguments: everything after a bare `--` belongs to init."""
    args = cmdline.split()
    return args[: args.index("--")] if "--" in args else args


def probe_iommu(cmdline: str) -> IommuFacts:
    try:
        entries = sorted(os.listdir(IOMMU_CLASS))
    except OSError:
        entries = []
    try:
        groups = os.listdir(IOMMU_GROUPS)
    except OSError:
        groups = []
    domain = None
    for group in groups:
        domain = _read(IOMMU_GROUPS / group / "type")
        if domain:
            break
    flags: dict[str, str] = {}
    for arg in kernel_args(cmdline):
        key, _, value = arg.partition("=")
        if key in IOMMU_FLAGS:
            flags[key] = value
    return IommuFacts(class_entries=entries, group_count=len(groups), default_domain_type=domain, cmdline_flags=flags)


def _detect_virt_tool() -> tuple[str | None, str] | None:
    """systemd-detect-virt's verdict, a VM before a container: a VM is what makes GPU/PCI
    readings unreliable. None when the tool is absent or fails."""
    vm = runner.run(["systemd-detect-virt", "--vm"], timeout=5)
    if vm.missing or vm.timed_out or vm.returncode not in (0, 1):  # exit 1 is how it says "none"
        return None
    vm_name = vm.stdout.strip()
    if vm_name and vm_name != "none":
        return vm_name, f"systemd-detect-virt --vm: {vm_name}"
    ct = runner.run(["systemd-detect-virt", "--container"], timeout=5)
    ct_name = ct.stdout.strip()
    if ct_name and ct_name != "none":
        return ct_name, f"systemd-detect-virt --container: {ct_name} (no VM detected)"
    return None, "systemd-detect-virt: none"


def probe_virtualization() -> tuple[str | None, str]:
    verdict = _detect_virt_tool()
    if verdict is not None:
        return verdict
    vendor, product = _read(DMI / "sys_vendor") or "", _read(DMI / "product_name") or ""
    for needle, name in DMI_HYPERVISORS:
        if needle.lower() in f"{vendor} {product}".lower():
            return name, f"DMI sys_vendor={vendor!r} product_name={product!r}"
    try:
        with CPUINFO.open() as f:
            for line in f:
                if line.startswith("flags"):
                    if "hypervisor" in line.split():
                        return "vm", "the hypervisor flag in /proc/cpuinfo (hypervisor not identified)"
                    break
    except OSError:
        pass
    dmi = f"DMI sys_vendor={vendor!r} product_name={product!r}" if vendor or product else "no DMI data"
    return None, f"no systemd-detect-virt; {dmi}; no hypervisor flag in /proc/cpuinfo"


def probe_kernel() -> KernelFacts:
    virt, evidence = probe_virtualization()
    return KernelFacts(
        release=os.uname().release,
        cmdline=_read(CMDLINE) or "",
        virtualization=virt,
        virtualization_evidence=evidence,
    )
