"""Who is at the other end of a connection to the runtime's API on this machine, and whether
hostctl may send it anything (the API key, a smoke prompt) or believe its answer.

A loopback port is anyone's to bind. While the runtime is down, restarting, or not yet
listening, another local user can listen on 127.0.0.1:PORT, collect the key from the
`Authorization` header and answer the smoke gate of `up`. So every TCP connection hostctl opens
to the API is checked after the handshake and before a byte is sent (hostctl.service.apiclient's
httpx transport, which `status` uses too): the server end's socket must be owned by root. The
runtime is a container of root's Docker engine under host networking, so its server socket is
root's; a user who is not root cannot create one (the kernel records the uid that
created the listening socket, facts.ports.peer_uid reads it). Checking the connection itself,
not the listener beforehand, leaves no window between the check and the send.

What this cannot check from here: another host's sockets (a cluster member elsewhere) are in
that machine's tables; `verify --host` makes the same proof on the target itself (its snippet,
hostctl.verify.suite._GET, reads the target's tables before it sends the key). An image whose server runs as a non-root
uid, or an engine with user-namespace remapping, is refused too: the message says what uid was
found, and there is no way to tell such a server from another user's program.
"""

from __future__ import annotations

import pwd
import socket
import time

from hostctl.errors import RefusedError
from hostctl.facts.ports import peer_uid

RUNTIME_UID = 0


class ListenerRefused(RefusedError):
    """The API port is held by someone other than root: nothing was sent (exit 3)."""


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return "no such user"


def refusal(address: str, port: int, uid: int | None, user: str | None) -> ListenerRefused | None:
    """The decision, from what the kernel says: None when root holds the server end."""
    if uid == RUNTIME_UID:
        return None
    where = f"[{address}]:{port}" if ":" in address else f"{address}:{port}"
    if uid is None:
        found = f"no socket table in /proc/net lists the server end of the connection to {where}"
    else:
        found = f"the process listening on {where} runs as uid {uid} ({user}), not as root"
    return ListenerRefused(
        f"refusing to talk to {where}: {found}; nothing was sent to it (no API key, no request)",
        details=["the runtime's container runs as root; any other owner is another program on this port, "
                 "possibly another local user collecting the key or forging answers"],
        fix=f"find the holder with `sudo ss -ltnp 'sport = :{port}'`, stop it, then start the runtime "
            "(`hostctl up`); an image whose server runs as a non-root user is not supported")


def check(sock: socket.socket) -> None:
    """Raise ListenerRefused unless root owns the server end of this connected TCP socket."""
    if sock.family not in (socket.AF_INET, socket.AF_INET6):
        return  # a unix socket (the engine's) is not the API port
    local, peer = sock.getsockname(), sock.getpeername()
    uid = peer_uid(local, peer)
    if uid is None:
        time.sleep(0.01)  # a loopback handshake completes in the kernel; one more look at most
        uid = peer_uid(local, peer)
    problem = refusal(peer[0], peer[1], uid, _user(uid) if uid is not None else None)
    if problem is not None:
        raise problem
