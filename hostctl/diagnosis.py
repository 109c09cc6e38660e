"""The catalogue of known failure signatures (DESIGN.md) and the classifier that matches
runtime logs, kernel logs and container state against it.

Each signature says what the symptom really means and what to do: the field reports lost
days to symptoms that pointed the wrong way (a TCPStore broken pipe that was a host OOM,
100% GPU utilisation that was an NCCL deadlock, "No free indices" that was one request
slot). `up` calls classify() on failure; `doctor --log FILE` calls it on a saved log.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

MAX_LINES = 6  # evidence lines kept per finding


@dataclass(frozen=True)
class Evidence:
    """What is known about a failed or stuck start. Only `log` is required."""

    log: str = ""
    kernel_log: str = ""
    oom_killed: bool | None = None  # the engine's State.OOMKilled / an `oom` event
    exit_code: int | None = None
    stalled_s: float | None = None  # seconds without progress while the container was alive


@dataclass(frozen=True)
class Finding:
    id: str
    title: str
    cause: str
    fix: str
    lines: list[str] = field(default_factory=list)  # "source:line: text" evidence


@dataclass(frozen=True)
class Signature:
    id: str
    title: str
    cause: str
    fix: str
    match: Callable[[Evidence], list[str] | None]


def _grep(text: str, pattern: re.Pattern, source: str) -> list[str]:
    return [f"{source}:{i}: {line.strip()}" for i, line in enumerate(text.splitlines(), 1) if pattern.search(line)]


def _log(pattern: str, flags: int = 0) -> Callable[[Evidence], list[str] | None]:
    rx = re.compile(pattern, flags)
    return lambda ev: _grep(ev.log, rx, "log") or None


TCPSTORE = re.compile(r"TCPStore|DistStoreError|c10d.*(recvValue|sendBytes)")
BROKEN_PIPE = re.compile(r"Broken pipe|Connection reset by peer|failed to recv, got 0 bytes")
HOST_OOM = re.compile(r"Out of memory: Killed process|oom-kill:.*constraint=CONSTRAINT_NONE|invoked oom-killer.*global")
MEMCG_OOM = re.compile(r"oom-kill:.*constraint=CONSTRAINT_MEMCG|Memory cgroup out of memory")
NCCL_INIT = re.compile(r"NCCL (INFO|WARN).*(Init|init\.cc|Bootstrap|comm 0x|ncclCommInitRank)|ncclCommInitRank|"
                       r"Initializ(ing|ed) (the )?(NCCL|pynccl)|PyNcclCommunicator|vLLM is using nccl")
LOAD_PROGRESS = re.compile(r"Loading (safetensors|pt) checkpoint shards:\s+\d|Loading weights took|Model loading took|"
                           r"converted layer \d+|moe_w2.*layer \d+")
WATCHDOG = re.compile(r"Watchdog caught collective operation timeout|ProcessGroupNCCL.*(timeout|Timeout)|"
                      r"NCCL (watchdog|communicator) .*(timed out|abort)")
NCCL_SHM = re.compile(r"NCCL INFO Channel \d+.* via SHM")
GPU_OOM = re.compile(r"CUDA out of memory|torch\.OutOfMemoryError|OutOfMemoryError: CUDA|cudaErrorMemoryAllocation")
TUNING = re.compile(r"autotun|Autotun|[Tt]uning|flashinfer.*(jit|compil)|Capturing CUDA graph|compile_fx|inductor",)
XID = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F:.]+)\): (\d+)")


def _host_oom(ev: Evidence) -> list[str] | None:
    store = _grep(ev.log, TCPSTORE, "log")
    pipe = _grep(ev.log, BROKEN_PIPE, "log")
    if not (store and pipe):
        return None
    kernel = _grep(ev.kernel_log, HOST_OOM, "kernel")
    # Without a kernel log the broken pipe still most likely follows a dead rank; with one that
    # shows no host OOM, another finding (container OOM, a crash) explains it better.
    if ev.kernel_log and not kernel:
        return None
    return kernel + sorted(set(store) & set(pipe) or set(store[:2] + pipe[:2]))


def _container_oom(ev: Evidence) -> list[str] | None:
    memcg = _grep(ev.kernel_log, MEMCG_OOM, "kernel")
    if ev.oom_killed or (ev.exit_code == 137 and memcg):
        last_phase = _grep(ev.log, re.compile(r"moe_w2 delta tier|delta tier|Loading|converted layer"), "log")[-2:]
        return [f"engine: OOMKilled={ev.oom_killed}, exit code {ev.exit_code}"] + memcg[:2] + last_phase
    return None


def _deadlock(ev: Evidence) -> list[str] | None:
    watchdog = _grep(ev.log, WATCHDOG, "log")
    if watchdog:
        return watchdog
    init = _grep(ev.log, NCCL_INIT, "log")
    if init and ev.stalled_s is not None and not LOAD_PROGRESS.search(ev.log):
        return init[-3:] + [f"watchdog: no progress for {ev.stalled_s:.0f} s after NCCL initialised; no shard loaded"]
    return None


def _autotune_oom(ev: Evidence) -> list[str] | None:
    oom = _grep(ev.log, GPU_OOM, "log")
    if not oom:
        return None
    lines = ev.log.splitlines()
    first = int(oom[0].split(":")[1]) - 1
    context = "\n".join(lines[max(0, first - 30):first + 1])
    return oom[:2] if TUNING.search(context) else None


def _xid(ev: Evidence) -> list[str] | None:
    return _grep(ev.kernel_log, XID, "kernel") or None


SIGNATURES: tuple[Signature, ...] = (
    Signature(
        "nccl-p2p-deadlock",
        "NCCL deadlocked in its first P2P collective",
        "the ranks initialised NCCL and then made no progress (GPUs can show 100% utilisation at ~1 GB VRAM "
        "with no PCIe traffic): P2P over PCIe is blocked by the IOMMU or ACS even though the driver reports it",
        "validate P2P with `hostctl provision --only gpu`; meanwhile set NCCL_P2P_DISABLE=1 with "
        "--disable-custom-all-reduce, or turn IOMMU off (this costs DMA isolation and VFIO passthrough)",
        _deadlock,
    ),
    Signature(
        "host-oom-tcpstore",
        "a rank died to the host OOM killer (shown as a TCPStore broken pipe)",
        "the TCPStore errors are the aftermath: the kernel's OOM killer killed another rank because the host ran "
        "out of RAM and swap",
        "cap the container's memory (hostctl plan: memory), add NVMe swap (hostctl provision --only storage), "
        "and keep a host reserve",
        _host_oom,
    ),
    Signature(
        "container-oom",
        "the container hit its own memory cap (OOMKilled)",
        "the cgroup's RAM cap is below what this phase needs (often right after the moe_w2 delta tier is built)",
        "raise the container's RAM cap in 2 GiB steps (lower memory.host_reserve by 2 GiB, or raise "
        "memory.container_ram where the profile sets it) while leaving the host enough RAM, or let it page further "
        "(memory.container_ram_swap)",
        _container_oom,
    ),
    Signature(
        "no-free-indices",
        "sparse-MLA warm-up ran out of request slots (No free indices)",
        "max_num_seqs is 1, but the sparse-MLA warm-up needs one decode and one prefill slot at once; this is not "
        "a VRAM limit",
        "set --max-num-seqs 2 or more in the recipe (hostctl rejects 1 for sparse-MLA recipes)",
        _log(r"AssertionError: No free indices"),
    ),
    Signature(
        "eager-f8-e8m0",
        "the eager safetensors loader cannot decode F8_E8M0",
        "--safetensors-load-strategy eager does not support the checkpoint's F8_E8M0 scale tensors",
        "remove --safetensors-load-strategy eager; the default streamed, memory-mapped loader works",
        _log(r"F8_E8M0.*(rror|nsupported|not supported|[Uu]nknown)|(rror|nsupported|[Uu]nknown).*F8_E8M0"),
    ),
    Signature(
        "nccl-shm-fallback",
        "NCCL fell back to shared memory between the GPUs (~10% slower)",
        "the P2P level is too low for the GPUs' PHB/SYS path, so NCCL did not use P2P",
        "after P2P passes its functional check, set NCCL_P2P_LEVEL to the GPUs' path (PHB or SYS); hostctl's plan "
        "does this from the stored verdict",
        _log(r"NCCL INFO Channel \d+.* via SHM"),
    ),
    Signature(
        "autotune-oom-cold-cache",
        "out of GPU memory while tuning kernels on a cold cache",
        "GPU memory utilisation is too high for the first start, when kernels are still being autotuned and compiled",
        "lower --gpu-memory-utilization for the first start and keep the vLLM/FlashInfer/Triton caches persistent "
        "(the compile cache role), then raise it again",
        _autotune_oom,
    ),
    Signature(
        "enospc",
        "a cache filesystem ran out of space",
        "writing planes or packs failed: the cache filesystem is too small (a TP=2 first boot needs ~300 GiB free)",
        "free space on the cache drives or move the cache roles to larger drives; doctor checks free space",
        _log(r"No space left on device|ENOSPC|\[Errno 28\]"),
    ),
    Signature(
        "gpu-xid",
        "the GPU driver reported an Xid error",
        "an Xid in the kernel log is a driver-level GPU fault (79: fallen off the bus; 48/63/64/94/95: memory errors; "
        "13/31/43: application faults)",
        "check power, cabling and PCIe link health; for 79 reseat the card or lower its power limit; see NVIDIA's "
        "Xid catalogue for the number",
        _xid,
    ),
)


# ---------------------------------------------------------------- kernel log events

# What an Xid number means and how bad it is: "hardware" ones point at the GPU, its power or its
# link and need a person; "application" ones are a process's own fault (the GPU survives).
XID_MEANINGS: dict[int, tuple[str, str]] = {
    13: ("graphics engine exception", "application"),
    31: ("GPU memory page fault", "application"),
    43: ("GPU stopped processing", "application"),
    45: ("preemptive cleanup after an earlier fault", "application"),
    48: ("double-bit ECC error", "hardware"),
    61: ("internal micro-controller breakpoint", "hardware"),
    62: ("internal micro-controller halt", "hardware"),
    63: ("ECC page retirement or row remap recorded", "contained"),
    64: ("ECC page retirement or row remap failed", "hardware"),
    74: ("NVLink error", "hardware"),
    79: ("GPU has fallen off the bus", "hardware"),
    92: ("high single-bit ECC error rate", "hardware"),
    94: ("contained ECC error", "contained"),
    95: ("uncontained ECC error", "hardware"),
    119: ("GSP RPC timeout", "hardware"),
    120: ("GSP error", "hardware"),
}
KILLED = re.compile(r"(?P<memcg>Memory cgroup out of memory: )?(?:Out of memory: )?Killed process (?P<pid>\d+) \((?P<comm>[^)]*)\)")
OOM_CONSTRAINT = re.compile(r"oom-kill:constraint=(?P<constraint>\w+).*?(?:task_memcg=(?P<memcg>[^,\s]*))?,task=(?P<comm>[^,]*),pid=(?P<pid>\d+)")
_KERNEL_TIME = re.compile(r"^\s*\[\s*(?P<t>\d+\.\d+)\]")


@dataclass(frozen=True)
class KernelEvent:
    """One OOM kill or Xid error in a kernel log."""

    kind: str  # "host_oom", "memcg_oom" or "xid"
    line: str
    time_s: float | None = None  # seconds since boot, when the line carries it
    process: str | None = None  # OOM: the killed task (name and pid)
    cgroup: str | None = None  # OOM: the killed task's memory cgroup (a container's scope)
    xid: int | None = None
    pci_bus_id: str | None = None
    severity: str | None = None  # Xid: hardware, contained or application


def kernel_events(text: str) -> list[KernelEvent]:
    """Every OOM kill (host-wide vs a memory cgroup's own limit) and every Xid error in a kernel
    log (dmesg lines, with or without their [time] prefix), in log order."""
    events: list[KernelEvent] = []
    constraints: dict[str, tuple[str, str | None]] = {}  # pid -> (constraint, memcg) from the line before the kill
    for raw in text.splitlines():
        line = raw.strip()
        m_time = _KERNEL_TIME.match(line)
        t = float(m_time.group("t")) if m_time else None
        if (m := OOM_CONSTRAINT.search(line)) is not None:
            constraints[m.group("pid")] = (m.group("constraint"), m.group("memcg"))
            continue
        if (m := KILLED.search(line)) is not None:
            constraint, memcg = constraints.pop(m.group("pid"), (None, None))
            in_cgroup = bool(m.group("memcg")) or constraint == "CONSTRAINT_MEMCG"
            events.append(KernelEvent("memcg_oom" if in_cgroup else "host_oom", line, t,
                                      process=f"{m.group('comm')} (pid {m.group('pid')})", cgroup=memcg or None))
            continue
        if (m := XID.search(line)) is not None:
            code = int(m.group(2))
            events.append(KernelEvent("xid", line, t, xid=code, pci_bus_id=m.group(1),
                                      severity=XID_MEANINGS.get(code, ("", "unknown"))[1]))
    return events


def classify(evidence: Evidence) -> list[Finding]:
    """Every signature that matches, most specific first (catalogue order)."""
    findings = []
    for sig in SIGNATURES:
        lines = sig.match(evidence)
        if lines:
            findings.append(Finding(sig.id, sig.title, sig.cause, sig.fix, lines[:MAX_LINES]))
    return findings
