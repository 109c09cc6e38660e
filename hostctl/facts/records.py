"""HostFacts: everything hostctl knows about a host, as one JSON-round-trippable snapshot.

Only the probes in this package read the host; planners, renderers and checks read a
HostFacts. Every part that could not be read says so (`available: false` and a `reason`)
instead of being left empty, so a snapshot of a GPU-less, udev-less, Docker-less machine
is still complete and honest.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from hostctl.data import Data, Document

FACTS_SCHEMA = "hostctl.facts/v1"

# nvmlGpuTopologyLevel names, nearest first (NVML_TOPOLOGY_INTERNAL .. SYSTEM), as nvidia-smi topo prints them.
TOPOLOGY_ORDER = ("SELF", "NVLINK", "PIX", "PXB", "PHB", "NODE", "SYS")


class Absence(Data):
    available: bool = True
    reason: str | None = None


# ---------------------------------------------------------------- GPUs


class PowerLimits(Data):
    limit_w: float | None = None  # the configured limit (nvmlDeviceGetPowerManagementLimit)
    default_w: float | None = None
    min_w: float | None = None
    max_w: float | None = None
    enforced_w: float | None = None  # what the driver enforces now (lowest of all limiters)


class PcieLink(Data):
    gen_current: int | None = None
    gen_max: int | None = None
    width_current: int | None = None
    width_max: int | None = None


class Gpu(Data):
    index: int
    name: str
    uuid: str
    pci_bus_id: str  # sysfs form, e.g. 0000:01:00.0
    memory_total_bytes: int
    power: PowerLimits = Field(default_factory=PowerLimits)
    persistence_mode: bool | None = None
    pcie: PcieLink = Field(default_factory=PcieLink)
    numa_node: int | None = None  # None when sysfs says -1: unknown, never guessed
    numa_reason: str | None = None
    local_cpus: list[int] | None = None
    bar1_total_bytes: int | None = None


class GpuPair(Data):
    a: int
    b: int
    # One of TOPOLOGY_ORDER, or None if NVML could not tell; anything else in a snapshot is bad input.
    topology: Literal["SELF", "NVLINK", "PIX", "PXB", "PHB", "NODE", "SYS"] | None = None
    p2p_read: str | None = None  # NVML P2P status: ok, chipset_not_supported, ...
    p2p_write: str | None = None
    nvlink: bool = False


class GpuFacts(Absence):
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    nvml_version: str | None = None
    kernel_module: Literal["open", "proprietary"] | None = None
    devices: list[Gpu] = Field(default_factory=list)
    pairs: list[GpuPair] = Field(default_factory=list)

    @field_validator("devices")
    @classmethod
    def _one_gpu_per_index(cls, devices: list[Gpu]) -> list[Gpu]:
        # NVML numbers the GPUs 0..N-1; two at one index is a hand-edited snapshot, and every
        # decision by index (placement, power limits, P2P pairs) would pick one of them at random
        seen: set[int] = set()
        for g in devices:
            if g.index in seen:
                raise ValueError(f"two GPUs have index {g.index}: each GPU needs an index of its own")
            seen.add(g.index)
        return devices

    def by_index(self, index: int) -> Gpu | None:
        return next((g for g in self.devices if g.index == index), None)

    def pair(self, a: int, b: int) -> GpuPair | None:
        lo, hi = sorted((a, b))
        return next((p for p in self.pairs if p.a == lo and p.b == hi), None)


# ---------------------------------------------------------------- disks


class BlankProof(Data):
    """What a disk that shows no partition table and no filesystem holds where data leaves
    traces: the first and last MiB (MBR, primary and backup GPT, most superblocks) and every
    signature `wipefs --no-act` finds at any offset. Blank is proven only when all is clean."""

    error: str | None = None  # the device could not be read: nothing is proven
    first_mib_zero: bool = False
    last_mib_zero: bool = False
    mbr_signature: bool = False  # 0x55AA at byte 510
    primary_gpt: bool = False  # "EFI PART" at LBA 1 (512- or 4096-byte sectors)
    backup_gpt: bool = False  # "EFI PART" at the last LBA
    signatures: list[str] = Field(default_factory=list)  # wipefs: "<type> at <offset>"
    # the first and last MiB hold nothing outside the GPT's own sectors (protective MBR, headers,
    # entry arrays): what a table write that stopped part-way leaves, and nothing else
    outside_gpt_zero: bool = False
    # sampled offsets inside the disk whose first 4 KiB are not zero (facts.disks.sample_offsets)
    sampled_nonzero: list[str] = Field(default_factory=list)

    @property
    def proven(self) -> bool:
        return (self.error is None and self.first_mib_zero and self.last_mib_zero and not self.signatures
                and not self.sampled_nonzero and not (self.mbr_signature or self.primary_gpt or self.backup_gpt))

    def found(self) -> str:
        """What stands against blank, in words (empty when blank is proven)."""
        if self.error:
            return f"its contents could not be read ({self.error})"
        what = []
        if self.primary_gpt:
            what.append("a primary GPT header")
        if self.backup_gpt:
            what.append("a backup GPT header at the end of the disk" + ("" if self.primary_gpt else
                                                                       " (the primary was erased; the table is recoverable)"))
        if self.mbr_signature:
            what.append("an MBR boot signature")
        what += [f"a signature wipefs finds ({s})" for s in self.signatures]
        if not what:
            where = [w for w, zero in (("first", self.first_mib_zero), ("last", self.last_mib_zero)) if not zero]
            if where:
                what.append(f"non-zero bytes in its {' and '.join(where)} MiB with no signature hostctl knows "
                            "(encrypted data, a raw image, or another tool's layout)")
        if self.sampled_nonzero:
            shown = ", ".join(self.sampled_nonzero[:4]) + (", ..." if len(self.sampled_nonzero) > 4 else "")
            what.append(f"non-zero bytes inside the disk at {len(self.sampled_nonzero)} sampled place(s) ({shown}): "
                        "data left after its partition table was erased")
        return "; ".join(what)


class GptEntryTrace(Data):
    """One named entry of a GPT read straight from a disk's first or last MiB (facts.disks.gpt_traces):
    how hostctl sees a table that no tool loads, one whose write stopped part-way or whose other half
    is gone. Its CRCs are not checked: a trace is evidence of whose the disk is, never a table to use."""

    where: Literal["primary", "backup"]
    name: str  # the partition name, UTF-16 on the disk
    attributes: int = 0  # the entry's 64 attribute bits (hostctl's UNFINISHED_BIT among them)
    first_lba: int = 0
    last_lba: int = 0


class FsCheck(Data):
    """For a partition carrying hostctl's marks and not in use: did its mkfs finish, and is the
    filesystem sound. Read only for such partitions (a user's filesystems are never checked)."""

    inprogress: bool | None = None  # xfs sb_inprogress: mkfs.xfs set it and never cleared it
    crc_error: bool = False  # xfs_db found the superblock's checksum wrong: its fields prove nothing
    first_mib_zero: bool | None = None  # read only when there is no filesystem signature
    backup_superblock: str | None = None  # no primary signature, but ext4 magic at this backup offset
    fsck: Literal["clean", "damaged", "unknown"] | None = None
    detail: str | None = None  # the checker's own words, when damaged or unknown


class Partition(Data):
    name: str
    path: str
    dev: str | None = None  # "major:minor"
    number: int | None = None
    size_bytes: int = 0
    part_type: str | None = None  # GPT partition type GUID
    part_label: str | None = None  # GPT partition name
    part_uuid: str | None = None
    part_flags: int | None = None  # GPT attribute bits
    fs_type: str | None = None
    fs_label: str | None = None
    fs_uuid: str | None = None
    mountpoints: list[str] = Field(default_factory=list)
    holders: list[str] = Field(default_factory=list)
    swap_active: bool = False
    swap_priority: int | None = None
    fs_check: FsCheck | None = None


class Disk(Data):
    name: str
    path: str
    dev: str | None = None  # "major:minor": two identities naming one disk are told apart by it
    model: str | None = None
    serial: str | None = None
    wwn: str | None = None
    by_id: list[str] = Field(default_factory=list)
    size_bytes: int = 0
    rotational: bool | None = None
    removable: bool | None = None
    table_type: str | None = None  # gpt, dos, or None when blank / unknown
    # Entries in the on-disk partition table (partx --show). It can differ from `partitions`
    # (what the kernel has loaded): a loop device after sgdisk, before `partx -u`.
    table_entries: int | None = None
    fs_type: str | None = None  # a filesystem written straight onto the whole disk
    fs_label: str | None = None  # that filesystem's label
    mountpoints: list[str] = Field(default_factory=list)
    holders: list[str] = Field(default_factory=list)
    swap_active: bool = False
    is_root_disk: bool = False
    read_only: bool = False  # /sys/block/<disk>/ro: every write would fail
    blank: BlankProof | None = None  # read only for a disk that shows no table, partition or filesystem
    # named GPT entries found in the bytes of a disk on which the kernel shows no partition (a torn
    # or half-lost table); read only for such disks
    gpt_traces: list[GptEntryTrace] = Field(default_factory=list)
    # sampled starts of the space right after each partition that are not zero (a partition
    # deleted by hand leaves its data there); read only for the profile's disks
    nonzero_after_partitions: list[str] = Field(default_factory=list)
    partitions: list[Partition] = Field(default_factory=list)


class DiskFacts(Absence):
    source: Literal["udev", "sysfs"] = "sysfs"
    source_reason: str | None = None
    devices: list[Disk] = Field(default_factory=list)
    # `path:` identities the profile names, resolved on this host: the path as written ->
    # the kernel name of the block device it leads to (through symlinks), or None
    aliases: dict[str, str | None] = Field(default_factory=dict)


class DriveMatch(Data):
    """One drive identity resolved on this host (facts.disks.resolve_identity)."""

    disks: list[Disk] = Field(default_factory=list)  # the whole disks it names: exactly one when it resolves
    leads_to: str | None = None  # a `path:` identity: the kernel name of the device its path leads to, if any


# ---------------------------------------------------------------- memory, NUMA, IOMMU, kernel


class SwapDevice(Data):
    path: str
    kind: str  # partition or file
    size_bytes: int
    used_bytes: int
    priority: int


class MemoryFacts(Data):
    # Never negative: a snapshot that says so is bad input (exit 2), not a plan with odd numbers.
    mem_total_bytes: int = Field(ge=0)
    mem_available_bytes: int = Field(ge=0)
    swap_total_bytes: int = Field(ge=0)
    swap_free_bytes: int = Field(ge=0)
    swaps: list[SwapDevice] = Field(default_factory=list)
    swappiness: int | None = None
    page_cluster: int | None = None
    memlock_limit_bytes: int | None = None  # None: unlimited
    shm_total_bytes: int | None = None

    @property
    def ram_plus_swap(self) -> int:
        return self.mem_total_bytes + self.swap_total_bytes


class NumaNode(Data):
    id: int
    cpus: list[int]
    mem_total_bytes: int | None = None


class NumaFacts(Data):
    nodes: list[NumaNode] = Field(default_factory=list)
    cpu_count: int


class IommuFacts(Data):
    class_entries: list[str] = Field(default_factory=list)  # /sys/class/iommu
    group_count: int = 0
    default_domain_type: str | None = None  # identity (passthrough), DMA, DMA-FQ, ...
    cmdline_flags: dict[str, str] = Field(default_factory=dict)

    @property
    def enabled(self) -> bool:
        return bool(self.class_entries) or self.group_count > 0


class KernelFacts(Data):
    release: str
    cmdline: str
    virtualization: str | None = None  # systemd-detect-virt / DMI verdict; None on bare metal
    virtualization_evidence: str | None = None


class DaemonLimits(Data):
    """The engine daemon's own limits: what a container's `ulimits` start from."""

    pid: int
    memlock_soft_bytes: int | None = None  # None: unlimited
    memlock_hard_bytes: int | None = None
    nofile_soft: int | None = None
    nofile_hard: int | None = None
    cap_sys_resource: bool | None = None  # may raise limits above the hard ones (runc needs it for memlock -1)


class ContainerFacts(Data):
    """A container hostctl rendered (it carries the io.hostctl.profile label)."""

    id: str
    name: str
    image: str | None = None
    state: str  # created, running, exited, ...
    status: str | None = None  # the engine's words, e.g. "Exited (137) 5 minutes ago"
    health: str | None = None
    exit_code: int | None = None
    oom_killed: bool | None = None
    pid: int | None = None  # the main process on the host, while running
    image_id: str | None = None  # the image it runs, as the engine resolved its reference (sha256:...)
    started_at: str | None = None
    finished_at: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)


class ImageFacts(Data):
    ref: str
    id: str | None = None  # None: not in this engine (reason says why)
    reason: str | None = None


class EngineFacts(Absence):
    version: str | None = None
    api_version: str | None = None
    runtimes: list[str] = Field(default_factory=list)
    default_runtime: str | None = None
    cgroup_version: str | None = None
    cgroup_driver: str | None = None
    compose_version: str | None = None
    compose_reason: str | None = None
    daemon: DaemonLimits | None = None
    daemon_reason: str | None = None
    containers: list[ContainerFacts] = Field(default_factory=list)
    # The images the profile's plan names, resolved to the engine's image ids (the service
    # fingerprint's third part, hostctl/service/fingerprint.py).
    images: list[ImageFacts] = Field(default_factory=list)


class MountEntry(Data):
    source: str
    target: str
    fs_type: str
    options: str


class PathFacts(Data):
    """A directory the plan relies on: where it lives and how much room it has."""

    path: str
    exists: bool
    fs_type: str | None = None
    mount_target: str | None = None
    mount_source: str | None = None
    free_bytes: int | None = None
    total_bytes: int | None = None
    files: list[tuple[str, int]] | None = None  # (name, size) for store directories
    owner_uid: int | None = None  # of the directory itself, when it exists
    owner_gid: int | None = None
    symlink: str | None = None  # the first component of the path that is a symlink, "link -> target"
    not_a_directory: bool = False  # the path exists and is a file (or another non-directory)
    entries: list[str] | None = None  # the first few names inside the directory, when it exists


class P2PVerdict(Data):
    """The functional P2P verdict stored by `provision --only gpu`, with what it was measured under."""

    # failed: the run with P2P exited with an error (e.g. an NCCL/CUDA error) while the control passed
    verdict: Literal["ok", "hang", "wrong_data", "failed", "inconclusive", "not_applicable"]
    measured_at: str
    driver_version: str | None = None
    kernel_cmdline: str | None = None
    busbw_gbps: float | None = None
    control_busbw_gbps: float | None = None
    gpu_uuids: list[str] = Field(default_factory=list)  # the GPUs it was measured on, in rank order
    detail: str | None = None  # the reason, in words


class QualifyVerdict(Document):
    """The context ladder's verdict stored by `hostctl bench --suite qualify`, with the service
    fingerprint (hostctl/service/fingerprint.py) it was measured under."""

    schema_: Literal["hostctl.qualify/v1"] = Field(default="hostctl.qualify/v1", alias="schema")
    passed: bool
    measured_at: str
    profile: str | None = None
    recipe: str | None = None
    context: int | None = None
    fingerprint: dict = Field(default_factory=dict)  # ServiceFingerprint.to_dict()
    rungs: list[dict] = Field(default_factory=list)  # [{name, pass, detail}]
    result: str | None = None  # the hostctl.bench/v1 file it came from


class PortFacts(Data):
    """A TCP port the plan binds (the runtime's API): free, or who listens on it."""

    host: str
    port: int
    listening: bool | None  # None: could not tell
    listen_address: str | None = None
    pid: int | None = None
    process: str | None = None
    container_id: str | None = None  # the holder's container, from its cgroup
    reason: str | None = None


class ShmSegment(Data):
    name: str
    size_bytes: int
    used_bytes: int  # RAM it occupies (tmpfs pages)
    uid: int
    age_s: float  # since its last modification
    in_use: bool | None  # mapped or open by a process; None: not every process could be read


class ShmFacts(Absence):
    """/dev/shm and the runtime segments in it (nccl-*, psm_*, vllm*, torch_*)."""

    path: str = "/dev/shm"
    total_bytes: int | None = None
    free_bytes: int | None = None
    segments: list[ShmSegment] = Field(default_factory=list)
    scanned_processes: int = 0
    unreadable_processes: int = 0


class KernelEvent(Data):
    """An OOM kill or a GPU Xid error in the kernel log (hostctl.kernel_events)."""

    kind: Literal["host_oom", "memcg_oom", "xid"]
    line: str
    time_s: float | None = None  # seconds since boot
    process: str | None = None
    cgroup: str | None = None
    xid: int | None = None
    pci_bus_id: str | None = None
    severity: str | None = None  # Xid: hardware, contained, application, unknown


class KernelLogFacts(Absence):
    source: str | None = None  # /dev/kmsg, dmesg or journalctl -k -b
    records: int = 0
    first_record_s: float | None = None
    complete: bool | None = None  # False: the ring buffer dropped records since boot
    events: list[KernelEvent] = Field(default_factory=list)


class PciBridgeAcs(Data):
    """One PCI device on a GPU's path, as `lspci -vvv` lists its ACS control register."""

    bdf: str  # full, with the domain: 0000:00:01.1
    description: str = ""
    bridge: bool = False
    access_denied: bool = False  # lspci could not read the extended capabilities (not root)
    acs_cap: dict[str, bool] | None = None  # ACSCap: what the device can do; None: no ACS capability listed
    acs_ctl: dict[str, bool] | None = None  # ACSCtl: what is switched on; None: not listed (or unreadable)

    @property
    def redirects(self) -> list[str]:
        """The ACSCtl flags that are on and send peer traffic upstream instead of across the bridge."""
        return [f for f in ACS_REDIRECT_FLAGS if (self.acs_ctl or {}).get(f)]

    def ctl_text(self) -> str:
        return " ".join(f"{k}{'+' if v else '-'}" for k, v in (self.acs_ctl or {}).items())


# ACSCtl flags that send peer traffic upstream instead of straight across the bridge
ACS_REDIRECT_FLAGS = ("ReqRedir", "CmpltRedir", "EgressCtrl")


class AcsFacts(Absence):
    """The ACS state of the PCI devices between the GPUs: each GPU's path from the root complex
    (sysfs) and the ACS control of every device on those paths (`lspci -vvv`). available=False:
    lspci could not run, or there are fewer than two GPUs (reason says which)."""

    gpu_paths: dict[str, list[str]] = Field(default_factory=dict)  # GPU bus id -> root..GPU; absent: no sysfs path
    devices: list[PciBridgeAcs] = Field(default_factory=list)  # the devices on those paths lspci lists

    def device(self, bdf: str) -> PciBridgeAcs | None:
        return next((d for d in self.devices if d.bdf == bdf), None)


class ProvisionedPart(Data):
    """A provision part that converged on this host: a fresh look decided nothing more to do."""

    converged_at: str
    profile: str  # the profile's name
    profile_sha256: str | None = None  # of the profile file it converged with
    hostctl: str | None = None  # the hostctl version that ran it


class KvAtReady(Data):
    """The KV cache capacity the runtime reported while `up` watched it load."""

    tokens: int | None = None
    max_concurrency: float | None = None  # full-context requests at once, as the runtime reports it
    per_request_tokens: int | None = None
    full_context_requests: int | None = None
    context: int


class LastUp(Document):
    """service.json in the state directory: what the last `hostctl up` or `down` of this host's
    runtime left (hostctl/service/saved.py writes it). `ready`: up passed its gate and nothing
    took the runtime down since; `failed` (with its catalogue cause), `interrupted` (by `signal`),
    `down`. Each state's time is under its own key. A file that does not validate is no record."""

    schema_: Literal["hostctl.service/v1"] = Field(default="hostctl.service/v1", alias="schema")
    state: Literal["ready", "failed", "interrupted", "down"]
    profile: str | None = None
    recipe: str | None = None
    endpoint: str | None = None
    container: str | None = None
    project: str | None = None
    project_dir: str | None = None
    ready_at: str | None = None
    failed_at: str | None = None
    interrupted_at: str | None = None
    down_at: str | None = None
    cause: str | None = None  # the failure catalogue's id (hostctl/failures.py)
    signal: str | None = None  # what interrupted `up`, or stopped its supervisor
    kept: bool | None = None  # --keep-on-failure left the container
    taken_down: bool | None = None  # after an interrupt: the project was taken down and verified gone
    after_ready: bool | None = None  # failed while supervised, after its gate had passed
    kv: KvAtReady | None = None
    timings: dict[str, float] | None = None  # up's phases, in seconds

    @property
    def at(self) -> str | None:
        """When it entered its state."""
        return {"ready": self.ready_at, "failed": self.failed_at, "interrupted": self.interrupted_at,
                "down": self.down_at}[self.state]


class ServiceRecord(Data):
    """What the last `hostctl up` or `down` left (LastUp, summarised for a snapshot): ready (up
    passed its gate), failed, interrupted or down."""

    state: str
    container: str | None = None
    at: str | None = None


class SupervisedEnding(Data):
    """One death or hang the supervisor (`up --foreground`) ended on (restarts.json, README "Supervision")."""

    ended_at: str
    kind: str  # died | hung
    cause: str  # a failure catalogue id, or runtime-died / runtime-hang
    title: str | None = None
    exit_code: int | None = None
    lines: list[str] = Field(default_factory=list)
    restart_at: str | None = None  # the next supervised start began
    ready_again_at: str | None = None


def _empty(value: object) -> bool:
    return not value


class StateFacts(Data):
    """What earlier hostctl runs left in /var/lib/hostctl."""

    p2p: P2PVerdict | None = None
    qualify: QualifyVerdict | None = None
    # Left out of the JSON while empty: snapshots made before these fields existed (the bundled
    # examples) stay byte-identical.
    provisioned: dict[str, ProvisionedPart] = Field(default_factory=dict, exclude_if=_empty)  # part -> when it converged
    service: ServiceRecord | None = Field(default=None, exclude_if=_empty)
    supervised: list[SupervisedEnding] = Field(default_factory=list, exclude_if=_empty)  # oldest first

    @property
    def runtime_expected(self) -> bool:
        """`up` passed its gate and `down` has not run since: the runtime should be running."""
        return self.service is not None and self.service.state == "ready"


class HostFacts(Document):
    schema_: Literal["hostctl.facts/v1"] = Field(default=FACTS_SCHEMA, alias="schema")
    hostname: str
    collected_at: str
    notes: list[str] = Field(default_factory=list)  # provenance, e.g. for a snapshot made from a report in docs/field-reports.md
    kernel: KernelFacts
    gpus: GpuFacts
    disks: DiskFacts
    memory: MemoryFacts
    numa: NumaFacts
    iommu: IommuFacts
    engine: EngineFacts
    mounts: list[MountEntry] = Field(default_factory=list)
    paths: list[PathFacts] = Field(default_factory=list)
    state: StateFacts = Field(default_factory=StateFacts)
    # Read live for doctor; absent (None / empty) in snapshots made before they existed.
    kernel_log: KernelLogFacts | None = None
    shm: ShmFacts | None = None
    ports: list[PortFacts] = Field(default_factory=list)
    acs: AcsFacts | None = None  # None: not read (a snapshot from before hostctl read ACS)

    def path(self, path: str) -> PathFacts | None:
        return next((p for p in self.paths if p.path == path), None)

    def port(self, port: int) -> PortFacts | None:
        return next((p for p in self.ports if p.port == port), None)
