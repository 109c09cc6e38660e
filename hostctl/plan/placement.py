"""Placement plan: which GPUs serve (in rank order), their NUMA node, the container's CPU set
and memory-node binding, and the guard variables of mapped-host-layer recipes.

An unknown NUMA node (sysfs -1) is reported as unknown and never guessed: mapped host
memory on the wrong socket costs every token a trip across the interconnect (report 000, docs/field-reports.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hostctl.facts.records import Gpu, HostFacts
from hostctl.plan import codes
from hostctl.cpulists import format_cpulist

if TYPE_CHECKING:  # annotations only: doctor's checks import these modules without a profile
    from hostctl.plan.records import PlacementPlan, Plan
    from hostctl.config import Config

# A recipe's vram_gb is the vendor's decimal figure. NVML's total reads above it on the reference
# GPUs (RTX PRO 6000 "96 GB": 102.6e9 bytes in runtime/hosts/pro6000x2-desktop.facts.json; H200
# "141 GB": 150.8e9 in tests/gpu/h200-facts.json), so this slack only forgives a recipe author's
# rounding on a card that reads a little below its figure.
VRAM_SLACK = 0.93

MAPPED_LAYERS_ENV = "VLLM_MOE_W2_MAPPED_LAYERS"
MAPPED_PCI_GUARD = "VLLM_MOE_W2_MAPPED_PCI"
MAPPED_NODE_GUARD = "VLLM_MOE_W2_MAPPED_NUMA_NODE"
# Read by the runtime entrypoint, which execs the server under numactl --cpunodebind/--membind.
MEMBIND_ENV = "HOSTCTL_NUMA_NODE"


def select_gpus(config: Config, facts: HostFacts, plan: PlacementPlan) -> list[Gpu]:
    want = config.recipe.requires.gpus
    if want == 0:
        plan.decide("GPUs", "none", "the recipe runs on the CPU")
        return []
    if not facts.gpus.available:
        plan.problem(
            codes.PLACEMENT_NO_GPU,
            "error",
            f"the recipe needs {want} GPU(s) but no GPU can be read: {facts.gpus.reason}",
            fix="install the NVIDIA driver, or render with --facts from the serving host",
        )
        return []
    devices = facts.gpus.devices
    if config.profile.gpu.devices:
        chosen: list[Gpu] = []
        for ref in config.profile.gpu.devices:
            gpu = next((g for g in devices if g.uuid == ref or str(g.index) == ref), None)
            if gpu is None:
                plan.problem(codes.PLACEMENT_UNKNOWN_DEVICE, "error", f"gpu.devices names {ref!r}, which is not on this host",
                             fix="use a UUID or index from `hostctl facts`")
            else:
                chosen.append(gpu)
        why = "named in the profile (gpu.devices)"
    else:
        chosen = sorted(devices, key=lambda g: g.index)[:want]
        why = f"the first {want} GPU(s) by index"
    if len(chosen) < want:
        plan.problem(
            codes.PLACEMENT_TOO_FEW_GPUS,
            "error",
            f"the recipe needs {want} GPU(s); {len(chosen)} available"
            + (f" ({len(devices)} on the host)" if len(devices) != len(chosen) else ""),
            fix="choose a recipe for this GPU count, or name the GPUs in gpu.devices",
        )
    plan.decide("GPUs", ", ".join(f"{g.index}:{g.uuid}" for g in chosen) or "none", why)
    return chosen


def plan_placement(config: Config, facts: HostFacts) -> PlacementPlan:
    from hostctl.plan.records import PlacementPlan, SelectedGpu  # here: doctor without a profile imports this module

    plan = PlacementPlan()
    gpus = select_gpus(config, facts, plan)
    plan.gpus = [
        SelectedGpu(rank=r, index=g.index, uuid=g.uuid, name=g.name, pci_bus_id=g.pci_bus_id, numa_node=g.numa_node)
        for r, g in enumerate(gpus)
    ]
    nodes = {n.id: n for n in facts.numa.nodes}
    mapped = str(config.recipe.env.get(MAPPED_LAYERS_ENV, "")).strip()

    if len(nodes) <= 1:
        node = next(iter(nodes), None)
        plan.decide("NUMA node", "all (one node)", "the host has one NUMA node: every CPU and page is local")
        if mapped and plan.gpus and node is not None:
            plan.env[MAPPED_NODE_GUARD] = str(node)
    elif not plan.gpus:
        plan.decide("NUMA node", "unbound", "no GPU to be near: the scheduler may use every node")
    else:
        gpu_nodes = {g.numa_node for g in plan.gpus}
        if None in gpu_nodes:
            unknown = [f"GPU {g.index} ({g.pci_bus_id})" for g in plan.gpus if g.numa_node is None]
            plan.decide("NUMA node", "unknown", f"sysfs reports no NUMA node for {', '.join(unknown)}; not guessed")
            plan.problem(
                codes.NUMA_UNKNOWN,
                "warn" if not mapped else "error",
                f"NUMA node unknown for {', '.join(unknown)} on a {len(nodes)}-node host: the runtime is left unbound"
                + (" and the mapped host layers cannot be pinned to the GPU's node" if mapped else ""),
                fix="check /sys/bus/pci/devices/<bus id>/numa_node on the host (a VM may hide it); "
                "enable NUMA/SRAT reporting in firmware",
            )
        elif len(gpu_nodes) > 1:
            plan.decide(
                "NUMA node", "unbound",
                f"the GPUs sit on nodes {sorted(gpu_nodes)}: binding to one would put the other ranks' memory remote",
            )
            cpus = sorted({c for n in gpu_nodes for c in nodes[n].cpus}) if all(n in nodes for n in gpu_nodes) else []
            if cpus:
                plan.cpuset = format_cpulist(cpus)
                plan.decide("CPU set", plan.cpuset, f"the CPUs of nodes {sorted(gpu_nodes)}, where the GPUs attach")
            if mapped:
                plan.problem(codes.NUMA_SPLIT_MAPPED, "error", "mapped host layers need every GPU on one NUMA node",
                             fix="serve on GPUs of one socket (gpu.devices)")
        else:
            node = gpu_nodes.pop()
            if node not in nodes:
                plan.problem(codes.NUMA_NOT_LISTED, "error", f"the GPUs report NUMA node {node}, which the host does not list")
            else:
                plan.numa_node = node
                plan.cpuset = format_cpulist(nodes[node].cpus)
                plan.bind_memory = True
                plan.env[MEMBIND_ENV] = str(node)
                plan.cap_add["SYS_NICE"] = (
                    "binding memory to a NUMA node calls set_mempolicy/mbind, which Docker's default seccomp "
                    "profile allows only with CAP_SYS_NICE"
                )
                plan.decide("NUMA node", node, f"every serving GPU attaches to node {node}")
                plan.decide("CPU set", plan.cpuset, f"the CPUs of node {node}")
                plan.decide("memory binding", f"node {node}",
                            "Compose has no field for memory nodes: the entrypoint runs the server under "
                            f"numactl --membind={node}, read from {MEMBIND_ENV}")
                if mapped:
                    plan.env[MAPPED_NODE_GUARD] = str(node)

    if mapped and plan.gpus:
        if len(plan.gpus) != 1:
            plan.problem(codes.PLACEMENT_MAPPED_MULTI_GPU, "error", f"{MAPPED_LAYERS_ENV} is set for {len(plan.gpus)} GPUs; mapped host layers serve one GPU")
        plan.env[MAPPED_PCI_GUARD] = plan.gpus[0].pci_bus_id
        plan.decide(
            "mapped-layer guards",
            ", ".join(f"{k}={v}" for k, v in sorted(plan.env.items()) if k.startswith("VLLM_MOE_W2_MAPPED")),
            f"layers {mapped} live in pinned host memory: the runtime refuses to start when the GPU's PCI "
            "address or NUMA node differs from what this plan measured",
        )
    return plan


def serving_gpus(facts: HostFacts, plan: Plan | None) -> list[Gpu]:
    """The GPUs the plan serves on, in rank order; without a plan, every GPU on the host by index.
    (A plan that places none serves on none: callers that want every GPU then pass None.)"""
    if plan is None:
        return sorted(facts.gpus.devices, key=lambda g: g.index)
    return [gpu for g in plan.placement.gpus if (gpu := facts.gpus.by_index(g.index)) is not None]
