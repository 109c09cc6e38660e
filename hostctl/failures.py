"""The catalogue of known failure signatures and the classifier that matches runtime logs,
kernel logs and container state against it.

Each signature says what the symptom really means and what to do: the field reports (docs/field-reports.md) lost
days to symptoms that pointed the wrong way (a TCPStore broken pipe that was a host OOM,
100% GPU utilisation that was an NCCL deadlock, "No free indices" that was one request
slot). `up` calls classify() on failure; `doctor --log FILE` calls it on a saved log.

Every signature has a captured-style log excerpt and a near miss in
tests/unit/data/failures.yaml, each saying what real report or issue thread it is modelled on.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from pydantic import ConfigDict, Field

from hostctl.data import Data
from hostctl import loglines
from hostctl.kernel_events import XID

MAX_LINES = 6  # evidence lines kept per finding


class StartEvidence(Data):
    """What is known about a failed or stuck start. Only `log` is required."""

    model_config = ConfigDict(frozen=True)

    log: str = ""
    kernel_log: str = ""
    oom_killed: bool | None = None  # the engine's State.OOMKilled / an `oom` event
    exit_code: int | None = None
    stalled_s: float | None = None  # seconds without progress while the container was alive


class Finding(Data):
    model_config = ConfigDict(frozen=True)

    id: str
    title: str
    cause: str
    fix: str
    lines: list[str] = Field(default_factory=list)  # "source:line: text" evidence


class Signature:
    """One known failure: what it means, what to do, and the matcher that finds it (a callable: a
    plain class, not data)."""

    def __init__(self, id: str, title: str, cause: str, fix: str,
                 match: Callable[[StartEvidence], list[str] | None]) -> None:
        self.id, self.title, self.cause, self.fix, self.match = id, title, cause, fix, match


def _grep(text: str, pattern, source: str) -> list[str]:
    """Evidence lines: every (bounded) line `pattern.search` accepts, numbered as in the text."""
    return [f"{source}:{i}: {line.strip()}" for i, line in loglines.numbered(text) if pattern.search(line)]


# Every pattern the catalogue matches against log text, for tests/unit/test_failures_bounded.py
# to run each one against pathological input. "A.*B" is written ("A", "B"): loglines.Then.
PATTERNS: list[loglines.LinePattern] = []


def _p(*alternatives: str | tuple[str, ...], flags: int = 0) -> loglines.LinePattern:
    built = loglines.pattern(*alternatives, flags=flags)
    PATTERNS.append(built)
    return built


def _log(*alternatives: str | tuple[str, ...] | loglines.LinePattern) -> Callable[[StartEvidence], list[str] | None]:
    rx = alternatives[0] if isinstance(alternatives[0], loglines.LinePattern) else _p(*alternatives)
    return lambda ev: _grep(ev.log, rx, "log") or None


TCPSTORE = _p(r"TCPStore|DistStoreError", ("c10d", r"recvValue|sendBytes"))
BROKEN_PIPE = _p(r"Broken pipe|Connection reset by peer|failed to recv, got 0 bytes")
HOST_OOM = _p(r"Out of memory: Killed process", ("oom-kill:", "constraint=CONSTRAINT_NONE"),
              ("invoked oom-killer", "global"))
MEMCG_OOM = _p(("oom-kill:", "constraint=CONSTRAINT_MEMCG"), r"Memory cgroup out of memory")
NCCL_INIT = _p((r"NCCL (?:INFO|WARN)", r"Init|init\.cc|Bootstrap|comm 0x|ncclCommInitRank"),
               r"ncclCommInitRank|Initializ(?:ing|ed) (?:the )?(?:NCCL|pynccl)|PyNcclCommunicator|vLLM is using nccl")
LOAD_PROGRESS = _p(r"Loading (?:safetensors|pt) checkpoint shards:\s+\d|Loading weights took|Model loading took|"
                   r"converted layer \d", ("moe_w2", r"layer \d"))
WATCHDOG = _p(r"Watchdog caught collective operation timeout", ("ProcessGroupNCCL", r"[Tt]imeout"),
              (r"NCCL (?:watchdog|communicator) ", r"timed out|abort"))
GPU_OOM = _p(r"CUDA out of memory|torch\.OutOfMemoryError|OutOfMemoryError: CUDA|cudaErrorMemoryAllocation")
TUNING = _p(r"[Aa]utotun|[Tt]uning|compile_fx|inductor", ("flashinfer", r"jit|compil"))
GRAPH_CAPTURE = _p(r"Capturing CUDA graph|CUDA graph captur|cudagraph captur|Capturing cudagraphs", flags=re.I)
GRAPH_DONE = _p(r"[Gg]raph capturing finished|cudagraph capture finished", ("Capturing CUDA graphs", "100%"))
XID_FALLEN_OFF = {79}
XID_ECC = {48, 63, 64, 92, 94, 95}
NCCL_SHM_SEGMENT = _p(r"Error while (?:creating|attaching to) shared memory segment|unable to allocate shared memory",
                      ("Cannot allocate memory", "/dev/shm"))
P2P_UNSUPPORTED = _p(r"peer access is not supported between these two devices|cudaErrorPeerAccessUnsupported")
NCCL_SYSTEM = _p(("NCCL error", "unhandled system error"), r"ncclSystemError")
LAST_PHASE = _p(r"moe_w2 delta tier|delta tier|Loading|converted layer")
FALLEN_OFF = _p(r"GPU has fallen off the bus|cudaErrorDevicesUnavailable")
ECC = _p(r"uncorrectable ECC error encountered|cudaErrorECCUncorrectable")
ENGINE_CORE = _p(r"Engine core initialization failed|EngineCore failed to start")


def _host_oom(ev: StartEvidence) -> list[str] | None:
    store = _grep(ev.log, TCPSTORE, "log")
    pipe = _grep(ev.log, BROKEN_PIPE, "log")
    # The store's own socket must be the broken one (one line says both): a TCPStore line and an
    # unrelated client's broken pipe elsewhere are not a dead rank.
    both = sorted(set(store) & set(pipe))
    if not both:
        return None
    kernel = _grep(ev.kernel_log, HOST_OOM, "kernel")
    # Without a kernel log the broken pipe still most likely follows a dead rank; with one that
    # shows no host OOM, another finding (container OOM, a crash) explains it better.
    if ev.kernel_log and not kernel:
        return None
    return kernel + both


def _container_oom(ev: StartEvidence) -> list[str] | None:
    memcg = _grep(ev.kernel_log, MEMCG_OOM, "kernel")
    if ev.oom_killed or (ev.exit_code == 137 and memcg):
        last_phase = _grep(ev.log, LAST_PHASE, "log")[-2:]
        return [f"engine: OOMKilled={ev.oom_killed}, exit code {ev.exit_code}"] + memcg[:2] + last_phase
    return None


def _deadlock(ev: StartEvidence) -> list[str] | None:
    watchdog = _grep(ev.log, WATCHDOG, "log")
    if watchdog:
        return watchdog
    init = _grep(ev.log, NCCL_INIT, "log")
    if init and ev.stalled_s is not None and not LOAD_PROGRESS.search_text(ev.log):
        return init[-3:] + [f"watchdog: no progress for {ev.stalled_s:.0f} s after NCCL initialised; no shard loaded"]
    return None


def _oom_context(ev: StartEvidence) -> tuple[list[str], str]:
    """The GPU OOM lines and the 30 log lines before the first one."""
    oom = _grep(ev.log, GPU_OOM, "log")
    if not oom:
        return [], ""
    lines = loglines.lines(ev.log)
    first = int(oom[0].split(":")[1]) - 1
    return oom, "\n".join(lines[max(0, first - 30):first + 1])


def _autotune_oom(ev: StartEvidence) -> list[str] | None:
    oom, context = _oom_context(ev)
    return oom[:2] if oom and TUNING.search_text(context) and not GRAPH_CAPTURE.search_text(context) else None


def _graph_capture_oom(ev: StartEvidence) -> list[str] | None:
    oom, context = _oom_context(ev)
    if not oom or not GRAPH_CAPTURE.search_text(context) or GRAPH_DONE.search_text(context):
        return None
    return _grep(context, GRAPH_CAPTURE, "log")[-1:] + oom[:2]


def _xids(ev: StartEvidence, wanted) -> list[str] | None:
    found = [f"kernel:{i}: {line.strip()}" for i, line in loglines.numbered(ev.kernel_log)
             if (m := XID.search(line)) and wanted(int(m.group(2)))]
    return found or None


def _xid(ev: StartEvidence) -> list[str] | None:
    return _xids(ev, lambda n: n not in XID_FALLEN_OFF | XID_ECC)


def _fallen_off(ev: StartEvidence) -> list[str] | None:
    return (_xids(ev, lambda n: n in XID_FALLEN_OFF) or []) + _grep(ev.log, FALLEN_OFF, "log")[:2] or None


def _ecc(ev: StartEvidence) -> list[str] | None:
    return (_xids(ev, lambda n: n in XID_ECC) or []) + _grep(ev.log, ECC, "log")[:2] or None


def _nccl_system(ev: StartEvidence) -> list[str] | None:
    """The generic NCCL system error, when no more specific cause (shm segment, P2P) is in the log."""
    if NCCL_SHM_SEGMENT.search_text(ev.log) or P2P_UNSUPPORTED.search_text(ev.log):
        return None
    return _grep(ev.log, NCCL_SYSTEM, "log") or None


# An exception name is short: bounded, so a long word after "] " costs a constant to reject.
ROOT_ERROR = _p(r"(?:^|\] )\s{0,16}[A-Z][A-Za-z0-9_.]{0,200}(?:Error|Exception): ")


def _engine_core(ev: StartEvidence) -> list[str] | None:
    """vLLM's "engine core failed to start": the parent's words; the child's own first errors are
    the evidence (they name the real cause when no other signature knows it)."""
    head = _grep(ev.log, ENGINE_CORE, "log")
    if not head:
        return None
    roots: list[str] = []
    for line in _grep(ev.log, ROOT_ERROR, "log"):
        text = line.split(": ", 1)[1]
        if "Engine core initialization failed" not in text and text not in [r.split(": ", 1)[1] for r in roots]:
            roots.append(line)
        if len(roots) >= 3:
            break
    return head[:1] + roots


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
        "gpu-fallen-off-bus",
        "a GPU fell off the bus (Xid 79)",
        "the GPU stopped answering on PCIe: a power excursion (transient load spikes past what the PSU or its "
        "cabling delivers), overheating, a riser or slot fault, or a PCIe link that drops at its negotiated speed",
        "power the host off and on (a reset does not bring it back); check the PSU, the 12V-2x6 connectors and risers; "
        "lower the GPU's power limit (gpu.power_limit_w) or force a lower PCIe generation in the firmware; "
        "`hostctl doctor` reads the link",
        _fallen_off,
    ),
    Signature(
        "gpu-ecc-error",
        "the GPU reported a memory (ECC) error",
        "Xid 48/94/95 are uncorrectable or contained ECC errors and 63/64 row-remapping events: the GPU's memory "
        "returned bad data, and the process using it was stopped",
        "reset the GPU when idle (`nvidia-smi -r`) so pending row remaps take effect, and read `nvidia-smi -q -d "
        "ECC,ROW_REMAPPER`; repeated errors after a reset mean the card needs service",
        _ecc,
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
        _log(("F8_E8M0", r"rror|nsupported|not supported|[Uu]nknown"), (r"rror|nsupported|[Uu]nknown", "F8_E8M0")),
    ),
    Signature(
        "kv-cache-too-small",
        "the KV cache cannot hold one request of the full context",
        "after the weights (and the FP4 pool, the graphs) there is too little GPU memory left for the KV cache of "
        "one max_model_len-long request, so vLLM refuses to start",
        "lower context in the recipe to what the log estimates, or raise --gpu-memory-utilization, or use an FP8 KV "
        "cache (--kv-cache-dtype fp8), or shrink what else lives on the GPU (delta pool, speculative drafts)",
        _log(r"max seq len \(\d+\) is larger than the maximum number of tokens that can be stored in KV cache|"
             r"KV cache is needed, which is larger than the available KV cache memory|"
             r"No available memory for the cache blocks"),
    ),
    Signature(
        "gpu-memory-in-use",
        "another process holds GPU memory the runtime was told it could use",
        "vLLM reserves --gpu-memory-utilization of the whole GPU at start and checks that much is free; something "
        "else (a desktop session, a leftover container, another Python process) is using part of it",
        "free the GPU (`nvidia-smi` shows who holds memory; `docker ps` for a leftover runtime) or lower "
        "--gpu-memory-utilization in the recipe",
        _log((r"Free memory on device \S+ \(", r"\) on startup is less than desired GPU memory utilization")),
    ),
    Signature(
        "cuda-graph-capture-oom",
        "out of GPU memory while capturing CUDA graphs",
        "graph capture allocates per batch size after the KV cache has taken its share; with a high "
        "--gpu-memory-utilization the last capture sizes do not fit",
        "lower --gpu-memory-utilization by 0.01-0.02, or capture fewer sizes (--max-cudagraph-capture-size / "
        "--cuda-graph-sizes), or --enforce-eager to skip capture (slower decode)",
        _graph_capture_oom,
    ),
    Signature(
        "no-kernel-image",
        "the runtime has no CUDA kernels for this GPU's architecture",
        "the image's PyTorch or vLLM was built without this GPU's compute capability (stock vLLM wheels on "
        "workstation Blackwell, sm_120), so the first kernel launch fails",
        "use the runtime image built for this GPU (runtime/sm120/Dockerfile: vLLM-MoET with sm_120 kernels), not a "
        "stock vLLM image",
        _log(r"no kernel image is available for execution on the device|"
             r"sm_\d+ is not compatible with the current PyTorch installation"),
    ),
    Signature(
        "nccl-shm-segment",
        "NCCL could not create its shared-memory segment in /dev/shm",
        "ranks on one host exchange data through /dev/shm (the host's, under host IPC): it is too small or full of "
        "stale segments from killed runs",
        "enlarge /dev/shm (a tmpfs, e.g. `mount -o remount,size=32G /dev/shm`) and remove stale nccl-* files; "
        "`hostctl doctor` checks both (memory.shm.*)",
        _log(NCCL_SHM_SEGMENT),
    ),
    Signature(
        "p2p-not-supported",
        "CUDA peer access between the GPUs is not supported here",
        "the GPUs cannot map each other's memory over this PCIe path (a chipset or a VM without P2P), but the "
        "runtime asked for it (custom all-reduce, or NCCL P2P forced on)",
        "run with NCCL_P2P_DISABLE=1 and --disable-custom-all-reduce (hostctl's plan does this unless P2P passed "
        "its functional check: `hostctl provision --only gpu`)",
        _log(P2P_UNSUPPORTED),
    ),
    Signature(
        "nccl-system-error",
        "NCCL failed with an unhandled system error",
        "a system call NCCL needs failed (shared memory, memlock, sockets, or a device error) during communicator "
        "set-up; the line after it names the call",
        "start once with NCCL_DEBUG=INFO to see which call failed; check /dev/shm and memlock with `hostctl doctor`",
        _nccl_system,
    ),
    Signature(
        "checkpoint-shard-broken",
        "a checkpoint shard is missing or damaged",
        "a safetensors file is truncated (an interrupted download or copy), corrupt, or missing from the "
        "checkpoint directory",
        "re-download or re-copy the named shard and compare its size and checksum with the source "
        "(`hostctl model verify` once it exists); check runtime.model_dir points at the complete checkpoint",
        _log(r"SafetensorError|Error while deserializing header|MetadataIncompleteBuffer|HeaderTooLarge|"
             r"incomplete metadata, file not fully covered|No such file or directory: '[^']*\.safetensors'"),
    ),
    Signature(
        "port-in-use",
        "the API port is already taken",
        "another process (often a runtime from an earlier start) listens on the API address",
        "find it with `ss -ltnp 'sport = :PORT'` and stop it (`hostctl down` for hostctl's own), or move the API: "
        "runtime.api_port in the profile",
        _log(r"\[Errno 98\]|[Aa]ddress already in use"),
    ),
    Signature(
        "unknown-parser",
        "the recipe names a tool-call or reasoning parser this runtime does not have",
        "--tool-call-parser or --reasoning-parser names a parser the image's vLLM does not register (a typo, or one "
        "added in a newer vLLM)",
        "use a parser the runtime lists in its error (e.g. hermes, glm47 / glm45, deepseek_v3), or the image that "
        "brings it",
        _log(r"invalid tool call parser|invalid reasoning parser|"
             r"argument --(?:tool-call-parser|reasoning-parser): invalid choice", ("reasoning parser", "not found")),
    ),
    Signature(
        "driver-too-old",
        "the host's NVIDIA driver is older than the image's CUDA needs",
        "the runtime image was built for a newer CUDA than the host driver supports",
        "update the host driver (the image's CUDA version needs a matching minimum driver) or use an image built for "
        "the installed driver",
        _log(r"NVIDIA driver on your system is too old|CUDA driver version is insufficient for CUDA runtime version|"
             r"cudaErrorInsufficientDriver"),
    ),
    Signature(
        "follower-died",
        "a worker on another node (or process) died",
        "in a multi-node or Ray-managed start a follower's process ended (often the kernel's OOM killer on that "
        "node, or a network drop); the leader only sees the loss",
        "read that node's kernel log (`hostctl doctor` on it: logs.kernel.oom) and its runtime log; give it the "
        "same memory caps and swap as the leader",
        _log(r"ActorDiedError|The actor died unexpectedly|marked dead because the detector has missed too many "
             r"heartbeats|A worker died or was killed"),
    ),
    Signature(
        "trust-remote-code",
        "the model needs its own code, and it was not allowed to run it",
        "the checkpoint's config names Python code shipped with the model; the runtime refuses it without "
        "--trust-remote-code",
        "add --trust-remote-code to the recipe's serve_args (only for a checkpoint you trust)",
        _log(r"requires you to execute the configuration file|contains custom code which must be executed|"
             r"(pass|set) the (argument|option) `trust_remote_code=True`"),
    ),
    Signature(
        "nccl-shm-fallback",
        "NCCL fell back to shared memory between the GPUs (~10% slower)",
        "the P2P level is too low for the GPUs' PHB/SYS path, so NCCL did not use P2P",
        "after P2P passes its functional check, set NCCL_P2P_LEVEL to the GPUs' path (PHB or SYS); hostctl's plan "
        "does this from the stored verdict",
        _log((r"NCCL INFO Channel \d", " via SHM")),
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
        "engine-core-failed",
        "the engine core failed to start",
        "vLLM's engine process died during start-up; the lines below are the first errors it logged, which name "
        "the actual cause",
        "fix what the first error names (an argument, the model, memory); `hostctl up --keep-on-failure` keeps the "
        "container for `hostctl logs`",
        _engine_core,
    ),
    Signature(
        "gpu-xid",
        "the GPU driver reported an Xid error",
        "an Xid in the kernel log is a driver-level GPU fault (13/31/43: a process's own fault; 61/62/119/120: the "
        "GPU's firmware; 74: NVLink)",
        "check power, cabling and PCIe link health; see NVIDIA's Xid catalogue for the number; a process fault "
        "after a driver update often needs a reboot",
        _xid,
    ),
)


def classify(evidence: StartEvidence) -> list[Finding]:
    """Every signature that matches, most specific first (catalogue order)."""
    findings = []
    for sig in SIGNATURES:
        lines = sig.match(evidence)
        if lines:
            findings.append(Finding(id=sig.id, title=sig.title, cause=sig.cause, fix=sig.fix, lines=lines[:MAX_LINES]))
    return findings
