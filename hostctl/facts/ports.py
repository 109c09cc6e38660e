"""Port facts: whether a TCP port the plan binds (the runtime's API) is already listened on, and
by which process — and when that process runs in a container, which one.

Read from /proc/net/tcp{,6} (LISTEN sockets) and, only when the port is taken, who holds the
socket from psutil and the holder's /proc/<pid>/cgroup. The tables are read by hand because
psutil maps every socket of the host to its process on each call (~35 ms for ~110 processes,
growing with the host), which the probe needs only for a port that is taken, and because psutil
does not give a socket's owner uid (peer_uid).

Also the owner of the far end of a loopback connection hostctl has just opened (peer_uid):
the uid the kernel records for the server's socket, which is the uid that created the
listening socket. hostctl.service.apiclient decides from it whether the runtime answered.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from pathlib import Path

from hostctl.facts.records import PortFacts

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


def parse_listeners(text: str) -> list[tuple[str, int]]:
    """(address, port) of every LISTEN socket in a /proc/net/tcp{,6} table."""
    out: list[tuple[str, int]] = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or fields[3] != TCP_LISTEN:
            continue
        addr, _, port = fields[1].partition(":")
        try:
            out.append((_decode_address(addr), int(port, 16)))
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


def _socket_holder(address: str, port: int) -> tuple[int | None, str | None]:
    """(pid, name) of the process that holds the LISTEN socket on address:port, as far as this
    user may see (another user's process stays hidden unless run as root)."""
    import psutil

    for conn in psutil.net_connections("tcp"):
        if (conn.status == psutil.CONN_LISTEN and conn.pid is not None and conn.laddr
                and _address_key(conn.laddr.ip, conn.laddr.port) == (address, port)):
            try:
                return conn.pid, psutil.Process(conn.pid).name()
            except psutil.Error:  # it exited meanwhile
                return conn.pid, None
    return None, None


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
    hits = [addr for t in tables for addr, p in parse_listeners(t) if p == port and conflicts(addr, host)]
    if not hits:
        return facts
    addr = hits[0]
    facts.listening, facts.listen_address = True, addr
    pid, facts.process = _socket_holder(addr, port)
    if pid is None:
        facts.reason = "the listening socket's process is not visible here (another user's process: run as root)"
        return facts
    facts.pid = pid
    facts.container_id = container_of(pid, proc)
    return facts


def probe_ports(requests: Sequence[tuple[str, int]], proc: Path = PROC) -> list[PortFacts]:
    return [probe_port(host, port, proc) for host, port in requests]
