"""A minimal HTTP/1.0 GET over a unix socket or loopback TCP: the status code and the body.

What it is for: the Docker engine's API on its socket (hostctl.facts.engine) and the runtime's
/health on loopback (hostctl.service.status). http.client imports ssl and email, ~35 ms of a
read-only command's 300 ms budget (benchmarks/results/doctor_quick-2vcpu-shared.txt); a request
line, a header block and a read until the peer closes need only `socket`.

HTTP/1.0 because the answer then ends when the server closes the connection: Docker and uvicorn
send no chunked encoding to a 1.0 client. A Content-Length is honoured, and a chunked body is
still decoded should a server send one anyway. Anything that is not a well-formed response
raises HttpError (an OSError, so callers that already treat "cannot reach it" as OSError keep
doing so); a timeout raises socket.timeout (also an OSError).

Reads stop at `limit` bytes (HttpError): the engine's answers (a container or image record, the
container list) stay far below the default; /health is empty. `on_connect` sees the connected
socket before a byte is sent (hostctl.service.apipeer.check: is the runtime the listener?).
"""

from __future__ import annotations

import socket
from collections.abc import Callable

DEFAULT_LIMIT = 64 * 1024 * 1024

class HttpError(OSError):
    """The peer answered something that is not an HTTP response (or closed too early)."""


class Response:
    def __init__(self, status: int, headers: dict[str, str], body: bytes):
        self.status = status
        self.headers = headers  # names lower-cased; a repeated header keeps its last value
        self.body = body


def _dechunk(data: bytes) -> bytes:
    out, i = [], 0
    while True:
        end = data.find(b"\r\n", i)
        if end < 0:
            raise HttpError("chunked body ends inside a chunk size line")
        try:
            size = int(data[i:end].split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise HttpError(f"bad chunk size {data[i:end][:20]!r}") from None
        if size == 0:
            return b"".join(out)
        start = end + 2
        if len(data) < start + size:
            raise HttpError("chunked body ends inside a chunk")
        out.append(data[start:start + size])
        i = start + size + 2


def parse_response(raw: bytes) -> Response:
    """One complete HTTP response (everything the server sent before it closed)."""
    head, sep, body = raw.partition(b"\r\n\r\n")
    if not sep:
        raise HttpError("the connection closed before the response headers ended" if raw else
                        "the connection closed without a response")
    lines = head.decode("iso-8859-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit() or len(parts[1]) != 3:
        raise HttpError(f"not an HTTP status line: {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if colon:
            headers[name.strip().lower()] = value.strip()
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = _dechunk(body)
    elif "content-length" in headers:
        try:
            length = int(headers["content-length"])
        except ValueError:
            raise HttpError(f"bad Content-Length {headers['content-length']!r}") from None
        if len(body) < length:
            raise HttpError(f"the body ended after {len(body)} of {length} bytes")
        body = body[:length]
    return Response(int(parts[1]), headers, body)


def get(path: str, *, unix_socket: str | None = None, host: str = "localhost", port: int = 80,
        timeout: float = 3.0, host_header: str | None = None, limit: int = DEFAULT_LIMIT,
        on_connect: Callable[[socket.socket], None] | None = None) -> Response:
    """GET `path` (with its query) from a unix socket, or else from host:port over TCP.
    `timeout` bounds the connect and each read."""
    if unix_socket is not None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        address: object = unix_socket
    else:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        family, _, _, _, address = infos[0]
        sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(address)
        if on_connect is not None:
            on_connect(sock)
        shown = f"[{host}]" if ":" in host else host
        name = host_header or (shown if unix_socket is not None else f"{shown}:{port}")
        sock.sendall(f"GET {path} HTTP/1.0\r\nHost: {name}\r\nConnection: close\r\n\r\n".encode("ascii"))
        chunks, total = [], 0
        while True:
            data = sock.recv(65536)
            if not data:
                break
            total += len(data)
            if total > limit:
                raise HttpError(f"the answer is larger than {limit} bytes (the cap for it); stopped reading")
            chunks.append(data)
    finally:
        sock.close()
    return parse_response(b"".join(chunks))
