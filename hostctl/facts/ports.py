"""Port facts: whether a TCP port the plan binds (the runtime's API) is already listened on, and
by which process — and when that process runs in a container, which one.

Read from /proc/net/tcp{,6} (LISTEN sockets) and, only when the port is taken, from the
/proc/<pid>/fd links that hold the socket and the holder's /proc/<pid>/cgroup.

Also the owner of the far end of a loopback connection hostctl has just opened (peer_uid):
the uid the kernel records for the server's socket, which is the uid that created the
listening socket. hostctl.service.apiclient decides from it whether the runtime answered.
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


def _address_key(host: str, port: int) -> tuple[str, int]:
    """An address as _decode_address shows it (an IPv4-mapped IPv6 address as IPv4)."""
    addr = ipaddress.ip_address(host)
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped:
        addr = addr.ipv4_mapped
    return str(addr), port


def parse_socket_uids(text: str) -> dict[tuple[tuple[str, int], tuple[str, int]], int]:
    """{(local (address, port), remote (address, port)): owner uid} of every socket in a
    /proc/net/tcp{,6} table (any state)."""
    out: dict[tuple[tuple[str, int], tuple[str, int]], int] = {}
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10:
            continue
        try:
            (la, _, lp), (ra, _, rp) = fields[1].partition(":"), fields[2].partition(":")
            out[((_decode_address(la), int(lp, 16)), (_decode_address(ra), int(rp, 16)))] = int(fields[7])
        except ValueError:
            continue
    return out


def peer_uid(local: tuple, peer: tuple, proc: Path = PROC) -> int | None:
    """The owner uid of the socket at the other end of this machine's TCP connection local->peer
    (socket.getsockname() / getpeername()), or None when no table lists it (not a connection
    inside this network namespace, or /proc/net is unreadable)."""
    want = (_address_key(peer[0], peer[1]), _address_key(local[0], local[1]))
    for name in ("tcp", "tcp6"):
        try:
            text = (proc / "net" / name).read_text()
        except OSError:
            continue
        uid = parse_socket_uids(text).get(want)
        if uid is not None:
            return uid
    return None


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
