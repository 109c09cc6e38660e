"""The failure catalogue on captured log text, each with near-misses that must not match."""

from pathlib import Path

import pytest

from hostctl.failures import SIGNATURES, StartEvidence, classify

TCPSTORE_LOG = """\
(VllmWorker rank=1 pid=311) INFO 08-02 21:14:05 [parallel_state.py:1076] rank 1 in world size 2 is assigned as DP rank 0, PP rank 0, TP rank 1
(VllmWorker rank=1 pid=311) INFO 08-02 21:52:41 [default_loader.py:262] Loading safetensors checkpoint shards:  44% Completed | 21/48
[W802 21:58:13.102344 TCPStore.cpp:125] [c10d] recvValue failed on SocketImpl(fd=64, addr=[localhost]:47730, remote=[localhost]:40115): failed to recv, got 0 bytes
(VllmWorker rank=1 pid=311) ERROR 08-02 21:58:13 torch.distributed.DistStoreError: sendBytes failed on SocketImpl(fd=64): Broken pipe
"""
KERNEL_HOST_OOM = """\
[81234.551202] python3 invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0
[81234.551310] oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/system.slice/docker-4f1e.scope,task=python3,pid=310,uid=0
[81234.551377] Out of memory: Killed process 310 (python3) total-vm:212334112kB, anon-rss:44012345kB
"""
KERNEL_MEMCG_OOM = """\
[1201.22] python3 invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0
[1201.23] Memory cgroup out of memory: Killed process 5120 (python3) total-vm:9123456kB
[1201.23] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=docker-ab12,mems_allowed=0,oom_memcg=/docker/ab12,task=python3,pid=5120,uid=0
"""
NCCL_STUCK = """\
INFO 08-01 10:02:11 [__init__.py:1753] vLLM is using nccl==2.28.9
(VllmWorker rank=0 pid=201) INFO 08-01 10:02:12 [pynccl.py:70] vLLM is using nccl==2.28.9
host:201:201 [0] NCCL INFO ncclCommInitRank comm 0x5581c0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1000 commId 0x9a - Init START
host:201:201 [0] NCCL INFO Channel 00/02 : 0 1
"""
IDS = [s.id for s in SIGNATURES]


def ids(**kw):
    return [f.id for f in classify(StartEvidence(**kw))]


def test_catalogue_ids_are_unique_and_every_entry_explains_itself():
    assert len(IDS) == len(set(IDS))
    for s in SIGNATURES:
        assert s.title and s.cause and s.fix


def test_tcpstore_broken_pipe_is_a_host_oom():
    findings = classify(StartEvidence(log=TCPSTORE_LOG, kernel_log=KERNEL_HOST_OOM))
    assert [f.id for f in findings] == ["host-oom-tcpstore"]
    assert any(line.startswith("kernel:") and "Killed process 310" in line for line in findings[0].lines)


def test_tcpstore_without_kernel_log_still_points_at_oom():
    assert ids(log=TCPSTORE_LOG) == ["host-oom-tcpstore"]


@pytest.mark.parametrize("log, kernel", [
    ("[c10d] TCPStore server started on port 29500\nINFO ready\n", ""),             # TCPStore but no broken pipe
    ("BrokenPipeError: [Errno 32] Broken pipe while writing the response\n", ""),  # a client hung up
    (TCPSTORE_LOG, "[12.0] nvme nvme0: I/O 12 QID 3 timeout, completion polled\n"),  # kernel log without an OOM
])
def test_tcpstore_near_misses(log, kernel):
    assert "host-oom-tcpstore" not in ids(log=log, kernel_log=kernel)


def test_container_oom_from_engine_state():
    log = "INFO building moe_w2 delta tier: 24.0 GiB pool, 2048 slots\n"
    findings = classify(StartEvidence(log=log, oom_killed=True, exit_code=137))
    assert [f.id for f in findings] == ["container-oom"]
    assert "moe_w2 delta tier" in findings[0].lines[-1]
    assert ids(log=log, exit_code=137, kernel_log=KERNEL_MEMCG_OOM) == ["container-oom"]


def test_exit_137_without_oom_is_not_a_container_oom():
    # docker stop / kill also exits 137
    assert ids(log="INFO shutting down\n", exit_code=137, oom_killed=False) == []


def test_no_free_indices():
    log = "  File \"sparse_mla.py\", line 88, in allocate\nAssertionError: No free indices\n"
    assert ids(log=log) == ["no-free-indices"]
    assert ids(log="DEBUG allocated free indices 0..1\n") == []


def test_eager_loader_and_f8_e8m0():
    log = "ValueError: Unsupported safetensors dtype F8_E8M0 with load strategy eager\n"
    assert ids(log=log) == ["eager-f8-e8m0"]
    assert ids(log="INFO checkpoint scale dtype F8_E8M0, using streamed loader\n") == []


def test_deadlock_needs_nccl_init_and_a_stall_without_loading():
    assert ids(log=NCCL_STUCK, stalled_s=900) == ["nccl-p2p-deadlock"]
    assert ids(log=NCCL_STUCK) == []  # not (yet) stalled
    loading = NCCL_STUCK + "INFO Loading safetensors checkpoint shards:   2% Completed | 1/48\n"
    assert ids(log=loading, stalled_s=900) == []  # stalled later, but it did load: not the P2P deadlock
    watchdog = "[rank0]:[E801 10:32:11 ProcessGroupNCCL.cpp:632] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE)\n"
    assert ids(log=watchdog) == ["nccl-p2p-deadlock"]


def test_nccl_shm_fallback():
    assert ids(log="host:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via SHM/direct/direct\n") == ["nccl-shm-fallback"]
    assert ids(log="host:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n") == []


def test_gpu_oom_during_autotune_but_not_during_serving():
    tuning = "INFO flashinfer autotuning fused_moe for 64 shapes\n" + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    assert ids(log=tuning) == ["autotune-oom-cold-cache"]
    serving = "INFO Application startup complete.\nINFO 127.0.0.1 POST /v1/chat/completions 200\n" \
              "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 9.00 GiB\n"
    assert ids(log=serving) == []


def test_enospc_and_xid():
    assert ids(log="OSError: [Errno 28] No space left on device: '/planes/layer17.plane'\n") == ["enospc"]
    assert ids(log="INFO /planes has 2.1 TiB of space left on device nvme1n1p2\n") == []
    findings = classify(StartEvidence(kernel_log="[99.1] NVRM: Xid (PCI:0000:01:00): 79, pid=0, GPU has fallen off the bus.\n"))
    assert [f.id for f in findings] == ["gpu-fallen-off-bus"] and "79" in findings[0].lines[0]
    assert ids(kernel_log=JOURNAL_XID) == ["gpu-xid"]  # an application Xid is the generic entry


# ---------------------------------------------------------------- kernel log events (doctor's logs.kernel.*)

from hostctl.kernel_events import XID_MEANINGS, kernel_events  # noqa: E402

# Captured on this CI machine: a 16 MiB container that allocated 64 MiB (cgroup v1, kernel 6.18).
KERNEL_MEMCG_OOM_REAL = """\
[ 1498.155210] sh invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0
[ 1498.155430] memory: usage 16384kB, limit 16384kB, failcnt 69
[ 1498.155598] Memory cgroup out of memory: Killed process 7612 (sh) total-vm:20704kB, anon-rss:15360kB, file-rss:1456kB, shmem-rss:0kB, UID:0 pgtables:76kB oom_score_adj:0
"""
JOURNAL_XID = "Aug 02 21:58:13 desktop kernel: NVRM: Xid (PCI:0000:02:00): 13, pid=4123, name=python3, Graphics SM Warp Exception\n"


def test_kernel_events_host_oom_with_its_cgroup():
    (event,) = kernel_events(KERNEL_HOST_OOM)
    assert event.kind == "host_oom" and event.process == "python3 (pid 310)"
    assert event.cgroup == "/system.slice/docker-4f1e.scope" and event.time_s == pytest.approx(81234.551377)


def test_kernel_events_memcg_oom_both_orders():
    (event,) = kernel_events(KERNEL_MEMCG_OOM_REAL)
    assert event.kind == "memcg_oom" and event.process == "sh (pid 7612)"
    # the constraint line may come after the kill line (older kernels): still a cgroup kill
    assert [e.kind for e in kernel_events(KERNEL_MEMCG_OOM)] == ["memcg_oom"]


def test_kernel_events_xid_with_and_without_timestamps():
    (fatal,) = kernel_events("[99.1] NVRM: Xid (PCI:0000:01:00): 79, pid=0, GPU has fallen off the bus.\n")
    assert (fatal.xid, fatal.severity, fatal.pci_bus_id, fatal.time_s) == (79, "hardware", "0000:01:00", 99.1)
    (app,) = kernel_events(JOURNAL_XID)
    assert (app.xid, app.severity, app.time_s) == (13, "application", None)
    assert XID_MEANINGS[79][0] == "GPU has fallen off the bus"


@pytest.mark.parametrize("line", [
    "[12.0] oom_reaper: reaped process 310 (python3), now anon-rss:0kB, file-rss:0kB",    # after a kill, not a kill
    "[12.0] python3 invoked oom-killer: gfp_mask=0x140cca, order=0, oom_score_adj=0",      # the start, counted once at the kill
    "[12.0] systemd[1]: Started Killed process monitor.",                                 # words, no pid
    "[12.0] NVRM: GPU at PCI:0000:01:00: GPU-17807b50-eef5-86af-1c54-f9c9e81056a5",          # NVRM, no Xid
    "[12.0] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  580.159.04",
    "INFO vLLM: Killed process group after timeout (pid 12)",                             # a runtime's own words
])
def test_kernel_events_near_misses(line):
    assert kernel_events(line) == []


def test_up_reads_only_kernel_events_since_it_began(monkeypatch):
    from hostctl.facts.records import KernelEvent, KernelLogFacts
    from hostctl.service import lifecycle

    old = KernelEvent(kind="host_oom", line="[100.0] Out of memory: Killed process 7 (python3)", time_s=100.0)
    new = KernelEvent(kind="host_oom", line="[900.0] Out of memory: Killed process 310 (python3)", time_s=900.0)
    monkeypatch.setattr("hostctl.facts.kernel_log.probe_kernel_log",
                        lambda: KernelLogFacts(source="test", records=2, events=[old, new]))
    text = lifecycle._kernel_events_since(500.0)
    assert "process 310" in text and "process 7 " not in text
    # With that line, the TCPStore broken pipe of a dead rank is a host OOM; the kernel line is evidence.
    findings = classify(StartEvidence(log=TCPSTORE_LOG, kernel_log=text))
    assert findings[0].id == "host-oom-tcpstore" and any("process 310" in ln for ln in findings[0].lines)


# ---------------------------------------------------------------- every signature: its fixture and near miss

from hostctl.safeload import load_yaml  # noqa: E402

FIXTURES = load_yaml(Path(__file__).resolve().parent / "data" / "failures.yaml", "fixtures").data
EVIDENCE_KEYS = ("log", "kernel_log", "oom_killed", "exit_code", "stalled_s")


def _evidence(case: dict) -> StartEvidence:
    return StartEvidence(**{k: case[k] for k in EVIDENCE_KEYS if k in case})


def test_the_catalogue_has_twenty_signatures_each_with_a_fixture_and_a_near_miss():
    assert len(SIGNATURES) >= 20
    assert set(FIXTURES) == set(IDS)
    for sig_id, case in FIXTURES.items():
        assert case.get("source") and case.get("near_miss"), sig_id


@pytest.mark.parametrize("sig_id", IDS)
def test_fixture_is_recognised_first(sig_id):
    findings = classify(_evidence(FIXTURES[sig_id]))
    assert findings and findings[0].id == sig_id, [f.id for f in findings]
    assert findings[0].lines  # evidence lines, quoted from the log


@pytest.mark.parametrize("sig_id", IDS)
def test_near_miss_does_not_match(sig_id):
    assert sig_id not in ids(**{k: v for k, v in FIXTURES[sig_id]["near_miss"].items() if k in EVIDENCE_KEYS})


def test_engine_core_failure_quotes_the_childs_error():
    (f, *_) = classify(_evidence(FIXTURES["engine-core-failed"]))
    assert any("ImportError: libnuma.so.1" in line for line in f.lines)
    # with a specific cause in the same log, that cause comes first
    log = FIXTURES["engine-core-failed"]["log"] + FIXTURES["no-kernel-image"]["log"]
    assert ids(log=log)[0] == "no-kernel-image"


def test_graph_capture_and_autotune_ooms_are_told_apart():
    assert ids(log=FIXTURES["cuda-graph-capture-oom"]["log"]) == ["cuda-graph-capture-oom"]
    assert ids(log=FIXTURES["autotune-oom-cold-cache"]["log"]) == ["autotune-oom-cold-cache"]


def test_kernel_log_facts_find_the_same_events_and_skip_the_catalogue_without_markers():
    """facts.kernel_log tests EVENT_MARKERS on the whole log before importing the catalogue: every
    log kernel_events finds something in still gets those events, and a log without a marker none."""
    import subprocess
    import sys

    from hostctl.facts.kernel_log import _events

    for text in (KERNEL_HOST_OOM, KERNEL_MEMCG_OOM, KERNEL_MEMCG_OOM_REAL, JOURNAL_XID):
        expected = kernel_events(text)
        assert expected and [(e.kind, e.line, e.xid) for e in _events(text)] == [(e.kind, e.line, e.xid) for e in expected]
    plain = "[    0.000000] Linux version 6.8.0\n[    1.234567] EXT4-fs (vda1): mounted filesystem\n"
    code = ("import sys; from hostctl.facts.kernel_log import _events; "
            f"assert _events({plain!r}) == []; assert {kernel_events.__module__!r} not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)
