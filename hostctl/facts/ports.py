"""Port facts: whether a TCP port the plan binds (the runtime's API) is already listened on, and
by which process — and when that process runs in a container, which one.

Read from /proc/net/tcp{,6} (LISTEN sockets) and, only when the port is taken, from the
/proc/<pid>/fd links that hold the socket and the holder's /proc/<pid>/cgroup.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Sequence
from pathlib import Path

from hostctl.facts.model import PortFacts

PROC = Path("/proc")
TCP_LISTEN = "0A"
_CONTAINER_ID = re.compile(r"(?:docker-|docker/|/)([0-9a-f]{64})(?:\.scope)?\b")


def _decode_address(hex_addr: str) -> str:
    """/proc/net/tcp's address: IPv4 as one little-endian word, IPv6 as four."""
    raw = bytes.fromhex(hex_addr)
    if len(raw) == 4:
        return str(ipaddress.IPv4Address(raw[::-1]))
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
    addr = ipaddress.IPv6Address(words)
    return str(addr.ipv4_mapped) if addr.ipv4_mapped else str(addr)


def parse_listeners(text: str) -> list[tuple[str, int, int]]:
    """(address, port, socket inode) of every LISTEN socket in a /proc/net/tcp{,6} table."""
    out: list[tuple[str, int, int]] = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or fields[3] != TCP_LISTEN:
            continue
        addr, _, port = fields[1].partition(":")
        try:
            out.append((_decode_address(addr), int(port, 16), int(fields[9])))
        except ValueError:
            continue
    return out


def conflicts(listen_addr: str, want_addr: str) -> bool:
    """Would binding want_addr fail because of a listener on listen_addr (same port)?"""
    try:
        a, b = ipaddress.ip_address(listen_addr), ipaddress.ip_address(want_addr)
    except ValueError:
        return True
    return a == b or a.is_unspecified or b.is_unspecified


def _socket_holder(inode: int, proc: Path) -> int | None:
    target = f"socket:[{inode}]"
    for entry in os.scandir(proc):
        if not entry.name.isdigit():
            continue
        try:
            with os.scandir(f"{entry.path}/fd") as fds:
                for fd in fds:
                    try:
                        if os.readlink(fd.path) == target:
                            return int(entry.name)
                    except OSError:
                        continue
        except OSError:
            continue  # the process exited, or is another user's (not root)
    return None


def container_of(pid: int, proc: Path = PROC) -> str | None:
    """The container id in a process's cgroup path (docker-<id>.scope, /docker/<id>), if any."""
    try:
        text = (proc / str(pid) / "cgroup").read_text()
    except OSError:
        return None
    m = _CONTAINER_ID.search(text)
    return m.group(1) if m else None


def probe_port(host: str, port: int, proc: Path = PROC) -> PortFacts:
    facts = PortFacts(host=host, port=port, listening=False)
    tables, unreadable = [], []
    for name in ("tcp", "tcp6"):
        try:
            tables.append((proc / "net" / name).read_text())
        except OSError as exc:
            unreadable.append(f"{proc / 'net' / name}: {exc.strerror or exc}")
    if not tables:
        facts.listening, facts.reason = None, "; ".join(unreadable)
        return facts
    hits = [(addr, inode) for t in tables for addr, p, inode in parse_listeners(t) if p == port and conflicts(addr, host)]
    if not hits:
        return facts
    addr, inode = hits[0]
    facts.listening, facts.listen_address = True, addr
    pid = _socket_holder(inode, proc) if inode else None
    if pid is None:
        facts.reason = "the listening socket's process is not visible here (another user's process: run as root)"
        return facts
    facts.pid = pid
    try:
        facts.process = (proc / str(pid) / "comm").read_text().strip()
    except OSError:
        pass
    facts.container_id = container_of(pid, proc)
    return facts


def probe_ports(requests: Sequence[tuple[str, int]], proc: Path = PROC) -> list[PortFacts]:
    return [probe_port(host, port, proc) for host, port in requests]
