"""Facts: the only part of hostctl that reads the host. `collect()` runs every probe and returns
one HostFacts; `load_snapshot()` reads a saved one (`hostctl facts --json > snap.json`).

A probe that breaks unexpectedly becomes an absence or a note in the facts, never a crash:
doctor must still be able to say what it could read.

The probes make their data (hostctl/data.py), validated as pydantic validates any constructor
call. What comes from outside (a snapshot, the state files earlier runs left) is validated with
strict=True where it is read.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from hostctl.errors import InputError, MissingFileError

if TYPE_CHECKING:
    from hostctl.facts.records import HostFacts

# The probes, imported on first use (by collect, collect_storage, or an attribute access such as a
# test's monkeypatch): `status` imports hostctl.facts.engine for one container's facts, and
# importing a submodule runs this package first; the other probes and their imports (the thread
# pool, logging, udev and mount parsers) cost it ~15-25 ms on the 2-CPU machine
# (benchmarks/results/doctor_quick-2vcpu-shared.txt, round 3).
_PROBES = {
    "probe_acs": "hostctl.facts.acs",
    "probe_disks": "hostctl.facts.disks",
    "probe_engine": "hostctl.facts.engine",
    "probe_gpus": "hostctl.facts.gpu",
    "probe_kernel_log": "hostctl.facts.kernel_log",
    "probe_memory": "hostctl.facts.memory",
    "read_swaps": "hostctl.facts.memory",
    "probe_paths": "hostctl.facts.mounts",
    "read_mountinfo": "hostctl.facts.mounts",
    "probe_ports": "hostctl.facts.ports",
    "probe_shm": "hostctl.facts.shm",
    "probe_state": "hostctl.facts.state",
    "CMDLINE": "hostctl.facts.topology",
    "probe_iommu": "hostctl.facts.topology",
    "probe_kernel": "hostctl.facts.topology",
    "probe_numa": "hostctl.facts.topology",
}

if TYPE_CHECKING:  # the names _PROBES binds, for readers and type checkers
    from hostctl.facts.acs import probe_acs
    from hostctl.facts.disks import probe_disks
    from hostctl.facts.engine import probe_engine
    from hostctl.facts.gpu import probe_gpus
    from hostctl.facts.kernel_log import probe_kernel_log
    from hostctl.facts.memory import probe_memory, read_swaps
    from hostctl.facts.mounts import probe_paths, read_mountinfo
    from hostctl.facts.ports import probe_ports
    from hostctl.facts.shm import probe_shm
    from hostctl.facts.state import probe_state
    from hostctl.facts.topology import CMDLINE, probe_iommu, probe_kernel, probe_numa


def _load(name: str) -> object:
    from importlib import import_module

    value = getattr(import_module(_PROBES[name]), name)
    globals()[name] = value
    return value


def _load_probes() -> None:
    """Bind every probe name in this module (a name already bound, e.g. monkeypatched, stays)."""
    g = globals()
    for name in _PROBES:
        if name not in g:
            _load(name)


def __getattr__(name: str) -> object:
    if name in _PROBES:
        return _load(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["collect", "collect_storage", "load_snapshot"]

T = TypeVar("T")


def _guarded(name: str, probe: Callable[[], T], fallback: Callable[[str], T], notes: list[str]) -> T:
    try:
        return probe()
    except Exception as exc:  # a probe bug must not hide every other fact
        why = f"{name} probe failed: {exc.__class__.__name__}: {exc}"
        notes.append(why)
        return fallback(why)


# What `hostctl plan` decides on: the engine, ACS, the kernel log, /dev/shm and the ports are not
# read for it. On a host with Docker, the engine's SDK import and socket round trip were a third
# of plan's time (benchmarks/results/doctor_quick_ab-plan-reads.txt). The disks stay: the plan
# is where a drive the storage part would refuse should show first.
PLAN_READS = frozenset({"kernel", "gpus", "disks", "memory", "numa", "iommu", "paths", "state"})
ALL_READS = PLAN_READS | {"engine", "acs", "kernel_log", "shm", "ports"}


def collect(path_requests: Sequence[tuple[str, bool]] = (), port_requests: Sequence[tuple[str, int]] = (),
            alias_paths: Sequence[str] = (), image_requests: Sequence[str] = (), *,
            reads: frozenset[str] = ALL_READS) -> HostFacts:
    """Probe this host. path_requests: (directory, list_files) for each directory the plan relies on;
    port_requests: (address, port) for each TCP port it binds; alias_paths: the `path:` drive
    identities, resolved to the devices they lead to; image_requests: image references to
    resolve to the engine's image ids. reads: ALL_READS, or PLAN_READS for `plan`; memory, NUMA,
    IOMMU, directories and state are always read (milliseconds). A part not read says so (engine,
    disks, GPUs) or is left absent, as in an older snapshot (ACS, kernel log, shm: None)."""
    from concurrent.futures import Future, ThreadPoolExecutor

    from hostctl.facts.records import (AcsFacts, DiskFacts, EngineFacts, GpuFacts, HostFacts, IommuFacts, KernelFacts,
                                     KernelLogFacts, MemoryFacts, NumaFacts, PathFacts, ShmFacts, StateFacts)

    unknown = reads - ALL_READS
    assert not unknown, f"no such facts: {sorted(unknown)}"
    _load_probes()
    notes: list[str] = []
    skipped = "not read: " + ("the plan reads only GPUs, disks, memory, NUMA, IOMMU, the kernel, directories and state"
                              if reads == PLAN_READS else f"only {', '.join(sorted(reads))} were read")
    mountinfo = read_mountinfo()
    mounts = [line.entry for line in mountinfo]
    swaps = read_swaps()
    try:
        cmdline = CMDLINE.read_text().strip()
    except OSError:
        cmdline = ""

    def done(value: T) -> Future[T]:
        f: Future[T] = Future()
        f.set_result(value)
        return f

    # The slow probes wait on NVML, subprocesses and the Docker socket: overlap them.
    with ThreadPoolExecutor(max_workers=5, thread_name_prefix="hostctl-facts") as pool:
        engine_f = pool.submit(_guarded, "engine", lambda: probe_engine(tuple(image_requests)),
                               lambda why: EngineFacts(available=False, reason=why), notes) \
            if "engine" in reads else done(EngineFacts(available=False, reason=skipped))
        gpus_f = pool.submit(_guarded, "GPU", probe_gpus, lambda why: GpuFacts(available=False, reason=why), notes) \
            if "gpus" in reads else done(GpuFacts(available=False, reason=skipped))
        # ACS needs the GPUs' bus ids: it waits for NVML, then runs lspci beside the other probes
        acs_f = pool.submit(_guarded, "ACS", lambda: probe_acs([g.pci_bus_id for g in gpus_f.result().devices]),
                            lambda why: AcsFacts(available=False, reason=why), notes) \
            if "acs" in reads else done(None)
        disks_f = pool.submit(_guarded, "disk", lambda: probe_disks(mountinfo, swaps, alias_paths),
                              lambda why: DiskFacts(available=False, reason=why), notes) \
            if "disks" in reads else done(DiskFacts(available=False, reason=skipped))
        kernel_f = pool.submit(
            _guarded,
            "kernel",
            probe_kernel,
            lambda why: KernelFacts(release=os.uname().release, cmdline=cmdline, virtualization_evidence=why),
            notes,
        ) if "kernel" in reads else done(KernelFacts(release=os.uname().release, cmdline=cmdline))
        memory = _guarded(
            "memory",
            lambda: probe_memory(swaps),
            lambda why: MemoryFacts(mem_total_bytes=0, mem_available_bytes=0, swap_total_bytes=0, swap_free_bytes=0),
            notes,
        )
        numa = _guarded("NUMA", probe_numa, lambda why: NumaFacts(cpu_count=os.cpu_count() or 1), notes)
        iommu = _guarded("IOMMU", lambda: probe_iommu(cmdline), lambda why: IommuFacts(), notes)
        paths = _guarded(
            "path",
            lambda: probe_paths(path_requests, mountinfo),
            lambda why: [PathFacts(path=p, exists=os.path.isdir(p)) for p, _ in path_requests],
            notes,
        )
        state, state_notes = _guarded("state", probe_state, lambda why: (StateFacts(), []), notes)
        notes += state_notes
        kernel_log = _guarded("kernel log", probe_kernel_log,
                              lambda why: KernelLogFacts(available=False, reason=why), notes) \
            if "kernel_log" in reads else None
        shm = _guarded("shared memory", probe_shm, lambda why: ShmFacts(available=False, reason=why), notes) \
            if "shm" in reads else None
        ports = _guarded("port", lambda: probe_ports(port_requests), lambda why: [], notes) if "ports" in reads else []
        engine, gpus, disks, kernel = engine_f.result(), gpus_f.result(), disks_f.result(), kernel_f.result()
        acs = acs_f.result()
    if reads != ALL_READS:
        notes.append(skipped)

    return HostFacts(
        hostname=socket.gethostname(),
        collected_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        notes=notes,
        kernel=kernel,
        gpus=gpus,
        disks=disks,
        memory=memory,
        numa=numa,
        iommu=iommu,
        engine=engine,
        mounts=mounts,
        paths=paths,
        state=state,
        kernel_log=kernel_log,
        shm=shm,
        ports=ports,
        acs=acs,
    )


STORAGE_READS = 3  # a mount or swapon that finishes while the disks are read shows on the next read


def collect_storage(path_requests: Sequence[tuple[str, bool]] = (), alias_paths: Sequence[str] = (),
                    checked: Sequence[tuple[str, str]] = ()) -> HostFacts:
    """Only what storage provisioning decides on: disks, mounts, swap and memory, and the
    directories asked for (milliseconds, where a full `collect` waits on NVML and the Docker
    socket). The other parts say they were not read, so nothing mistakes them for absent."""
    from hostctl.facts.records import (DiskFacts, EngineFacts, GpuFacts, HostFacts, IommuFacts, KernelFacts, MemoryFacts,
                                     NumaFacts, PathFacts)

    _load_probes()
    why = "not read: storage provisioning reads only disks, mounts, memory and directories"
    try:
        cmdline = CMDLINE.read_text().strip()
    except OSError:
        cmdline = ""
    for _ in range(STORAGE_READS):
        notes: list[str] = []
        mountinfo = read_mountinfo()
        swaps = read_swaps()
        disks = _guarded("disk", lambda: probe_disks(mountinfo, swaps, alias_paths, checked),
                         lambda w: DiskFacts(available=False, reason=w), notes)
        # The disks' checks (fsck -n, xfs_repair -n) judge partitions the mount table said were
        # not mounted. A mount that finished meanwhile (a killed hostctl's mount(2) completing in
        # the kernel: CI's kill -9 5 ms into its own mount of an xfs) makes xfs_repair refuse "a
        # mounted and writable filesystem", which is not damage: read it all again, at one moment.
        if read_mountinfo() == mountinfo and read_swaps() == swaps:
            break
    mounts = [line.entry for line in mountinfo]
    memory = _guarded("memory", lambda: probe_memory(swaps),
                      lambda w: MemoryFacts(mem_total_bytes=0, mem_available_bytes=0, swap_total_bytes=0,
                                            swap_free_bytes=0), notes)
    paths = _guarded("path", lambda: probe_paths(path_requests, mountinfo),
                     lambda w: [PathFacts(path=p, exists=os.path.isdir(p)) for p, _ in path_requests], notes)
    notes.append("storage facts only: GPUs, NUMA, IOMMU and the container engine were not read")
    return HostFacts(
        hostname=socket.gethostname(),
        collected_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        notes=notes,
        kernel=KernelFacts(release=os.uname().release, cmdline=cmdline),
        gpus=GpuFacts(available=False, reason=why),
        disks=disks,
        memory=memory,
        numa=NumaFacts(cpu_count=os.cpu_count() or 1),
        iommu=IommuFacts(),
        engine=EngineFacts(available=False, reason=why),
        mounts=mounts,
        paths=paths,
    )


def _field_path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:80] + "..."


def load_snapshot(path: str | os.PathLike[str]) -> HostFacts:
    """Read a facts snapshot; InputError names what is wrong (and for a field, where)."""
    from pydantic import ValidationError

    from hostctl.facts.records import FACTS_SCHEMA, HostFacts
    from hostctl.safeload import MAX_SNAPSHOT_BYTES, parse_json, read_text

    p = Path(path)
    try:
        text = read_text(p, "facts snapshot", limit=MAX_SNAPSHOT_BYTES)
    except MissingFileError as exc:
        exc.fix = "make one with `hostctl facts --json > snap.json`"
        raise
    # parsed first for safeload's limits (nesting, NaN, huge integers) and to name a wrong schema
    data = parse_json(text, f"facts snapshot {p}")
    if not isinstance(data, dict):
        raise InputError(f"facts snapshot {p} must be a JSON object, not {type(data).__name__}")
    schema = data.get("schema", FACTS_SCHEMA)
    if schema != FACTS_SCHEMA:
        raise InputError(
            f"facts snapshot {p} has schema {schema!r}; this hostctl reads {FACTS_SCHEMA!r}",
            fix="re-create it with this hostctl: `hostctl facts --json > snap.json`",
        )
    try:
        return HostFacts.model_validate_json(text, strict=True)
    except ValidationError as exc:
        problems = [f"{_field_path(e['loc'])}: {e['msg']}" + (f" (got {_shown(e['input'])})" if "input" in e and
                    e["type"] not in ("missing", "extra_forbidden", "value_error") else "") for e in exc.errors()]
        raise InputError(
            f"facts snapshot {p} is not valid {FACTS_SCHEMA}: {problems[0]}"
            + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""),
            details=problems[1:20],
        ) from None
