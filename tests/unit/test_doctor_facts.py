"""The facts doctor added: kernel log events, /dev/shm segments, the API port's holder, the
engine daemon's limits and hostctl's containers. Parsers on captured text; probes on this
machine's real /proc, /dev/kmsg and sockets."""

from __future__ import annotations

import mmap
import os
import socket
import time

import pytest

from hostctl.facts.engine import compose_plugin, daemon_pid, probe_compose, read_daemon_limits
from hostctl.facts.kernel_log import parse_kmsg_record, probe_kernel_log
from hostctl.facts.ports import _decode_address, conflicts, container_of, parse_listeners, probe_port
from hostctl.facts.shm import GRACE_S, probe_shm
from need import needs

PORT = 18601  # this helper's range: 18600-18699

PROC_NET_TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 41234 1 0000000000000000 100 0 0 10 0
   1: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1999 1 0000000000000000 100 0 0 10 0
   2: 0100007F:1F40 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 41299 1 0000000000000000 20 4 30 10 -1
"""
PROC_NET_TCP6 = """\
  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 5150 1 0000000000000000 100 0 0 10 0
   1: 0000000000000000FFFF00000100007F:1F41 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 5151 1 0000000000000000 100 0 0 10 0
"""


# ---------------------------------------------------------------- kernel log


def test_parse_kmsg_record():
    rec = b"6,1023,1498155598,-;Memory cgroup out of memory: Killed process 7612 (sh)\n SUBSYSTEM=memory\n"
    assert parse_kmsg_record(rec) == (1023, "[ 1498.155598] Memory cgroup out of memory: Killed process 7612 (sh)")
    assert parse_kmsg_record(b"garbage without fields") is None
    assert parse_kmsg_record(b"6,x,y,-;text") is None


def test_kernel_log_on_this_machine():
    k = probe_kernel_log()
    if not k.available:
        assert os.geteuid() != 0 and k.reason, "root can read /dev/kmsg or dmesg"
        return
    assert k.source in ("/dev/kmsg", "dmesg", "journalctl -k -b") and k.records > 0
    assert all(e.kind in ("host_oom", "memcg_oom", "xid") for e in k.events)


# ---------------------------------------------------------------- ports


def test_parse_listeners_and_addresses():
    assert parse_listeners(PROC_NET_TCP) == [("127.0.0.1", 8000), ("0.0.0.0", 22)]  # not ESTABLISHED
    assert parse_listeners(PROC_NET_TCP6) == [("::", 8080), ("127.0.0.1", 8001)]  # v4-mapped shown as v4
    assert _decode_address("0100007F") == "127.0.0.1"
    assert conflicts("0.0.0.0", "127.0.0.1") and conflicts("127.0.0.1", "0.0.0.0") and conflicts("::", "127.0.0.1")
    assert not conflicts("192.0.2.10", "127.0.0.1")


def test_container_of_reads_v1_and_v2_cgroup_paths(tmp_path):
    cid = "bac44981b7e9edea4a033c293f8787494d647db62d531e621ee602182eae3e46"
    for pid, text in ((1, f"12:memory:/docker/{cid}\n"), (2, f"0::/system.slice/docker-{cid}.scope\n"),
                      (3, "0::/user.slice/user-1000.slice/session-2.scope\n")):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cgroup").write_text(text)
    assert container_of(1, tmp_path) == cid and container_of(2, tmp_path) == cid
    assert container_of(3, tmp_path) is None and container_of(4, tmp_path) is None


def test_port_held_by_this_process_then_free():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", PORT))
        s.listen()
        held = probe_port("127.0.0.1", PORT)
        assert held.listening is True and held.listen_address == "127.0.0.1"
        if os.geteuid() == 0 or held.pid is not None:
            assert held.pid == os.getpid() and held.process
        assert probe_port("0.0.0.0", PORT).listening is True  # a wildcard bind would collide too
    assert probe_port("127.0.0.1", PORT).listening is False


# ---------------------------------------------------------------- /dev/shm


def _segment(folder, name, size=1 << 20, age=3600.0):
    path = folder / name
    with open(path, "wb") as f:
        f.truncate(size)
        f.write(b"x" * 4096)  # one page really in use
    t = time.time() - age
    os.utime(path, (t, t))
    return path


def test_shm_segments_stale_in_use_and_young(tmp_path):
    _segment(tmp_path, "nccl-stale1")
    _segment(tmp_path, "psm_young", age=1.0)
    _segment(tmp_path, "unrelated.lock")  # not a runtime segment: not reported
    mapped = _segment(tmp_path, "vllm_mapped")
    with open(mapped, "r+b") as f, mmap.mmap(f.fileno(), 4096):  # this process maps it: in use
        facts = probe_shm(shm=tmp_path)
    by_name = {s.name: s for s in facts.segments}
    assert set(by_name) == {"nccl-stale1", "psm_young", "vllm_mapped"}
    assert by_name["vllm_mapped"].in_use is True
    assert by_name["psm_young"].in_use is True and by_name["psm_young"].age_s < GRACE_S
    assert by_name["nccl-stale1"].in_use is (None if facts.unreadable_processes else False)
    assert by_name["nccl-stale1"].size_bytes == 1 << 20 and by_name["nccl-stale1"].used_bytes >= 4096
    assert facts.scanned_processes > 0


def test_shm_open_fd_counts_as_in_use(tmp_path):
    path = _segment(tmp_path, "torch_held")
    fd = os.open(path, os.O_RDONLY)
    try:
        (seg,) = probe_shm(shm=tmp_path).segments
        assert seg.in_use is True
    finally:
        os.close(fd)


def test_shm_without_runtime_segments_scans_no_process(tmp_path):
    facts = probe_shm(shm=tmp_path)
    assert facts.available and facts.segments == [] and facts.scanned_processes == 0
    assert not probe_shm(shm=tmp_path / "missing").available


# ---------------------------------------------------------------- engine


def test_daemon_limits_parse(tmp_path):
    (tmp_path / "812").mkdir()
    (tmp_path / "812" / "limits").write_text(
        "Limit                     Soft Limit           Hard Limit           Units     \n"
        "Max open files            1048576              1048576              files     \n"
        "Max locked memory         8388608              unlimited            bytes     \n")
    (tmp_path / "812" / "status").write_text("Name:\tdockerd\nCapEff:\t000001fffeffffff\n")
    d = read_daemon_limits(812, tmp_path)
    assert (d.memlock_soft_bytes, d.memlock_hard_bytes, d.nofile_hard) == (8388608, None, 1048576)
    assert d.cap_sys_resource is False  # bit 24 clear in 0x1fffeffffff
    (tmp_path / "812" / "status").write_text("CapEff:\t000001ffffffffff\n")
    assert read_daemon_limits(812, tmp_path).cap_sys_resource is True


@needs(daemon_pid() is not None, "no dockerd process visible here")
def test_daemon_limits_of_this_machines_engine():
    d = read_daemon_limits(daemon_pid())
    assert d.pid > 0 and d.cap_sys_resource is not None


@needs(compose_plugin() is not None, "no Compose v2 CLI plugin installed")
def test_compose_version_from_the_plugin_matches_the_cli():
    from hostctl import runner

    version, why = probe_compose()
    cli = runner.run(["docker", "compose", "version", "--short"], timeout=20)
    assert why is None and version == cli.stdout.strip().removeprefix("v")
