"""Problem codes: the stable name of every problem a plan can report.

A code is a dotted string (`storage.expert_store.not_mounted`) that names what is wrong, not how
the message words it: doctor routes each problem to the one check that claims its code
(`codes=` on the check), and nothing decides by matching a message or a fix. A planner can only
raise a code listed here (Section.problem refuses any other), so CODES is everything a plan can
produce.
"""

from __future__ import annotations

from hostctl.storage_roles import ROLES

# storage: one set per cache role, because each role has its own doctor check
ROLE_PROBLEMS = ("unnamed", "missing", "not_real_fs", "not_mounted", "no_space")


def role_code(role: str, kind: str) -> str:
    """storage.<role>.<kind>: a problem about one cache role's directory."""
    if role not in ROLES or kind not in ROLE_PROBLEMS:
        raise ValueError(f"no storage problem code for role {role!r}, kind {kind!r}")
    return f"storage.{role}.{kind}"


RANK_STALE_COPY = "storage.rank.stale_copy"
RANK_NOT_SPLIT = "storage.rank.not_split"

# the profile's drives as provision's storage part judges them (hostctl.provision.storage.drive_problems):
# drives that resolve to one disk (bad input); a drive whose identity names no disk, several, or
# a partition (an error on the host, a warning on a snapshot of another); a drive it would
# refuse for what the disk holds or is (in use, too small, foreign data without --erase, ...)
STORAGE_DRIVES_INVALID = "storage.drives.invalid"
STORAGE_DRIVE_UNRESOLVED = "storage.drive.unresolved"
STORAGE_DRIVE_REFUSED = "storage.drive.refused"
# a host file the storage run would edit (fstab, the swap sysctl file) that it cannot edit:
# immutable, on a read-only filesystem, or a link another user owns or that leads nowhere
STORAGE_FILE_UNEDITABLE = "storage.file.uneditable"

RUNTIME_NO_IMAGE = "runtime.no_image"
RUNTIME_NO_MODEL_DIR = "runtime.no_model_dir"
# a recipe's {model:NAME} with no runtime.models_dir to resolve under (a role's placeholder without
# its role is storage.<role>.unnamed)
RUNTIME_MODELS_DIR_UNSET = "runtime.models_dir_unset"

POWER_NO_GPU = "power.no_gpu"
POWER_OUT_OF_RANGE = "power.out_of_range"

MEMORY_CONTAINER_RAM_LOW = "memory.container.ram_low"
MEMORY_CONTAINER_RAM_OVER_RESERVE = "memory.container.ram_over_reserve"
MEMORY_CONTAINER_NO_ROOM = "memory.container.no_room"
MEMORY_CONTAINER_SWAP_BELOW_RAM = "memory.container.swap_below_ram"
MEMORY_CONTAINER_SWAP_OVER_HOST = "memory.container.swap_over_host"
MEMORY_HOST_RAM_SHORT = "memory.host.ram_short"
MEMORY_HOST_CONVERSION_SHORT = "memory.host.conversion_short"

PLACEMENT_NO_GPU = "placement.no_gpu"
PLACEMENT_UNKNOWN_DEVICE = "placement.unknown_device"
PLACEMENT_TOO_FEW_GPUS = "placement.too_few_gpus"
PLACEMENT_MAPPED_MULTI_GPU = "placement.mapped_multi_gpu"
NUMA_UNKNOWN = "placement.numa.unknown"
NUMA_SPLIT_MAPPED = "placement.numa.split_mapped"
NUMA_NOT_LISTED = "placement.numa.not_listed"

NCCL_P2P_REFUSED_IOMMU = "nccl.p2p.refused_iommu"
NCCL_IN_VM = "nccl.in_vm"
NCCL_P2P_UNVERIFIED = "nccl.p2p.unverified"
NCCL_P2P_FAILED = "nccl.p2p.failed"

# box: the recipe against the vLLM-MoET box the profile declares (its compat reasons), and the
# declaration against this host's facts
BOX_TOO_FEW_GPUS = "box.too_few_gpus"
BOX_VRAM_SHORT = "box.vram_short"
BOX_HOST_RAM_SHORT = "box.host_ram_short"
BOX_MODEL_MISSING = "box.model_missing"
BOX_FACTS_DIFFER = "box.facts_differ"

CODES: frozenset[str] = frozenset(
    [role_code(r, k) for r in ROLES for k in ROLE_PROBLEMS]
    + [v for k, v in dict(globals()).items() if k.isupper() and isinstance(v, str) and "." in v]
)
