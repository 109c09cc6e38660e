"""The router's front door: a small reverse proxy in the router container that owns who may use
vllm-router's admin routes. vllm-router 0.1.17 answers /add_worker, /remove_worker, /workers,
/list_workers, /flush_cache, ... to anyone who reaches its address, even when started with
--api-key (that key is only what it sends to workers), and has no option to guard them. So
vllm-router listens on 127.0.0.1 on an internal port, and this gate listens on the router's
address:

  - the OpenAI API (/v1/...) and the probes (/health, /liveness, /readiness) pass through
    unchanged, Authorization included: the replicas check the key on the API themselves;
  - every other path needs `Authorization: Bearer <the cluster's key>` (compared in constant
    time), else 401. Deny by default: vllm-router forwards unknown paths to a worker, and a
    new version may add admin routes; a client of the router holds the key anyway.

One request per connection (Connection: close both ways), so a request's body is forwarded
exactly as framed (Content-Length or chunked, checked here) and nothing after it reaches
vllm-router; the response is relayed byte for byte as it arrives (chunked, SSE). Every read
has a deadline and every head and body a size cap, so a slow or huge request ends.

Run as the container's entrypoint (stdlib only: the router image has no hostctl):
    python3 routergate.py --listen ADDR --port P --upstream-port N -- VLLM_ROUTER_ARGS...
It starts vllm-router in a child process with the key from HOSTCTL_ROUTER_KEY (added to its
parsed arguments in-process, never to any argv) and exits with the child's code.
"""

from __future__ import annotations

import argparse
import errno
import hmac
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

KEY_VAR = "HOSTCTL_ROUTER_KEY"
UPSTREAM_HOST = "127.0.0.1"

HEAD_MAX = 64 * 1024  # request line + headers
HEADERS_MAX = 100
HEAD_DEADLINE_S = 15.0  # the whole head, however slowly it drips
BODY_MAX = 256 * 1024 * 1024  # vllm-router's own default --max-payload-size
BODY_IDLE_S = 30.0  # between two reads of a body
BODY_DEADLINE_S = 600.0
CHUNK_LINE_MAX = 4096
UPSTREAM_CONNECT_S = 5.0
# A non-streamed completion may take long before its first byte: vllm-router's own
# --request-timeout-secs default is 1800.
UPSTREAM_IDLE_S = 1800.0
CLIENT_SEND_S = 60.0  # a client that stops reading is dropped
CONNECTIONS_MAX = 256
ACCEPT_RETRY_S = 0.1  # after an accept that failed for want of descriptors or memory

# The probes answer without the key (hostctl waits on /liveness; they change nothing).
PROBES = frozenset({"/health", "/liveness", "/readiness"})
# The OpenAI API, in a form no normalisation upstream can turn into another route: no dot
# segments, no empty segments, no percent escapes.
API_PATH = re.compile(r"/v1(/[A-Za-z0-9_\-][A-Za-z0-9_\-.]*)+")
TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"proxy-connection", b"upgrade", b"te"})


class Refused(Exception):
    """A request answered here, not passed on: its status and reason."""

    def __init__(self, status: int, reason: str, message: str):
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message


def is_public(path: str) -> bool:
    """A path anyone may send (the replicas check the key on the API)."""
    if path in PROBES:
        return True
    return API_PATH.fullmatch(path) is not None and not any(s in (".", "..") for s in path.split("/"))


def authorized(values: list[bytes], key: bytes) -> bool:
    """Exactly one `Authorization: Bearer <key>`; the key compared in constant time."""
    if len(values) != 1 or not key:
        return False
    scheme, _, token = values[0].strip().partition(b" ")
    return scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), key)


# ---------------------------------------------------------------- one request


def read_head(conn: socket.socket) -> tuple[bytes, bytes]:
    """(the head up to its blank line, the bytes read after it)."""
    buf = b""
    deadline = time.monotonic() + HEAD_DEADLINE_S
    while b"\r\n\r\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0:
            raise Refused(408, "Request Timeout", f"the request head did not arrive within {HEAD_DEADLINE_S:.0f} s")
        conn.settimeout(left)
        try:
            data = conn.recv(65536)
        except socket.timeout:
            continue
        if not data:
            raise ConnectionError("closed before the head ended")
        buf += data
        if len(buf.split(b"\r\n\r\n", 1)[0]) > HEAD_MAX:
            raise Refused(431, "Request Header Fields Too Large", f"the request head is over {HEAD_MAX} bytes")
    head, rest = buf.split(b"\r\n\r\n", 1)
    if len(head) > HEAD_MAX:
        raise Refused(431, "Request Header Fields Too Large", f"the request head is over {HEAD_MAX} bytes")
    return head, rest


def parse_head(head: bytes) -> tuple[bytes, str, list[tuple[bytes, bytes]]]:
    """(request line, path, headers); malformed or ambiguous heads are refused (400)."""
    # A bare CR or LF (or a NUL) inside a line: vllm-router's parser may end a line there and
    # read a header this gate did not see (a Content-Length, say).
    if re.search(rb"\x00|(?<!\r)\n|\r(?!\n)", head):
        raise Refused(400, "Bad Request", "a bare CR, LF or NUL in the request head")
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ")
    if (len(parts) != 3 or not TOKEN.fullmatch(parts[0]) or parts[2] not in (b"HTTP/1.1", b"HTTP/1.0")
            or not parts[1].startswith(b"/") or re.search(rb"[\x00-\x20\x7f-\xff]", parts[1])):
        raise Refused(400, "Bad Request", "a request line `METHOD /path HTTP/1.1` was expected")
    if len(lines) - 1 > HEADERS_MAX:
        raise Refused(431, "Request Header Fields Too Large", f"more than {HEADERS_MAX} headers")
    headers = []
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not TOKEN.fullmatch(name):  # also a folded line (it starts with a space)
            raise Refused(400, "Bad Request", "a header line `Name: value` was expected")
        headers.append((name, value.strip(b" \t")))
    path = parts[1].split(b"?", 1)[0].decode("ascii")
    return lines[0], path, headers


def values(headers: list[tuple[bytes, bytes]], name: bytes) -> list[bytes]:
    return [v for n, v in headers if n.lower() == name]


def body_framing(headers: list[tuple[bytes, bytes]]) -> tuple[str, int]:
    """("length", N) or ("chunked", 0); both, or anything else, is refused: a proxy and its
    upstream that read a body's end differently let a second request through unchecked."""
    te, cl = values(headers, b"transfer-encoding"), values(headers, b"content-length")
    if te and cl:
        raise Refused(400, "Bad Request", "both Transfer-Encoding and Content-Length")
    if te:
        if len(te) != 1 or te[0].lower() != b"chunked":
            raise Refused(501, "Not Implemented", "only `Transfer-Encoding: chunked` is accepted")
        return "chunked", 0
    if not cl:
        return "length", 0
    if len(set(cl)) != 1 or not cl[0].isdigit() or len(cl[0]) > 12:
        raise Refused(400, "Bad Request", "one decimal Content-Length was expected")
    n = int(cl[0])
    if n > BODY_MAX:
        raise Refused(413, "Content Too Large", f"the body is over {BODY_MAX} bytes")
    return "length", n


class BodyReader:
    """The client's bytes after the head, each read bounded by the idle and total deadlines."""

    def __init__(self, conn: socket.socket, rest: bytes):
        self.conn, self.buf, self.deadline = conn, rest, time.monotonic() + BODY_DEADLINE_S

    def more(self) -> None:
        left = min(BODY_IDLE_S, self.deadline - time.monotonic())
        if left <= 0:
            raise Refused(408, "Request Timeout", "the request body did not arrive in time")
        self.conn.settimeout(left)
        try:
            data = self.conn.recv(65536)
        except socket.timeout:
            raise Refused(408, "Request Timeout", "the request body stalled") from None
        if not data:
            raise ConnectionError("closed in the middle of the body")
        self.buf += data

    def take(self, n: int) -> bytes:
        while not self.buf:
            self.more()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def line(self) -> bytes:
        while b"\r\n" not in self.buf:
            if len(self.buf) > CHUNK_LINE_MAX:
                raise Refused(400, "Bad Request", "a chunk line is too long")
            self.more()
        out, self.buf = self.buf.split(b"\r\n", 1)
        if len(out) > CHUNK_LINE_MAX:
            raise Refused(400, "Bad Request", "a chunk line is too long")
        return out + b"\r\n"


def forward_body(reader: BodyReader, framing: tuple[str, int], up: socket.socket) -> None:
    """Send exactly the request's body upstream, as framed (nothing after it)."""
    kind, n = framing
    if kind == "length":
        while n:
            data = reader.take(min(n, 65536))
            up.sendall(data)
            n -= len(data)
        return
    total = 0
    while True:
        line = reader.line()
        size_text = line[:-2].split(b";", 1)[0].strip()
        if not size_text or len(size_text) > 12 or not re.fullmatch(rb"[0-9A-Fa-f]+", size_text):
            raise Refused(400, "Bad Request", "a chunk size was expected")
        size = int(size_text, 16)
        total += size
        if total > BODY_MAX:
            raise Refused(413, "Content Too Large", f"the body is over {BODY_MAX} bytes")
        up.sendall(line)
        if size == 0:
            while True:  # trailers, up to the blank line
                t = reader.line()
                up.sendall(t)
                if t == b"\r\n":
                    return
        left = size
        while left:
            data = reader.take(min(left, 65536))
            up.sendall(data)
            left -= len(data)
        if reader.line() != b"\r\n":
            raise Refused(400, "Bad Request", "a chunk did not end where its size said")
        up.sendall(b"\r\n")


def answer(conn: socket.socket, status: int, reason: str, message: str, extra: bytes = b"") -> None:
    """A refusal, then a short drain of what the client still sends: closing with unread bytes
    resets the connection, and the client might lose the answer."""
    body = json.dumps({"error": {"message": message, "type": "hostctl_router_gate", "code": status}}).encode()
    try:
        conn.settimeout(5)
        conn.sendall(b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s"
                     b"Connection: close\r\n\r\n" % (status, reason.encode(), len(body), extra) + body)
        conn.shutdown(socket.SHUT_WR)
        conn.settimeout(1)
        drained, end = 0, time.monotonic() + 2
        while drained < 1 << 20 and time.monotonic() < end:
            data = conn.recv(65536)
            if not data:
                break
            drained += len(data)
    except OSError:
        pass


class Gate:
    def __init__(self, key: str, upstream_port: int):
        self.key = key.encode()
        self.upstream_port = upstream_port
        self.slots = threading.BoundedSemaphore(CONNECTIONS_MAX)

    def handle(self, conn: socket.socket) -> None:
        up = None
        started = threading.Event()  # the upstream's first byte reached the client
        try:
            head, rest = read_head(conn)
            line, path, headers = parse_head(head)
            framing = body_framing(headers)
            if not is_public(path) and not authorized(values(headers, b"authorization"), self.key):
                raise Refused(401, "Unauthorized", f"{path} is one of the router's admin routes: send "
                              "`Authorization: Bearer <the cluster's API key>`")
            try:
                up = socket.create_connection((UPSTREAM_HOST, self.upstream_port), timeout=UPSTREAM_CONNECT_S)
            except OSError:
                raise Refused(502, "Bad Gateway", "vllm-router does not answer (yet)") from None
            named = {t.strip().lower() for v in values(headers, b"connection") for t in v.split(b",")}
            kept = [(n, v) for n, v in headers if n.lower() not in HOP_BY_HOP and n.lower() not in named]
            up.sendall(line + b"\r\n" + b"".join(n + b": " + v + b"\r\n" for n, v in kept)
                       + b"Connection: close\r\n\r\n")
            relay = threading.Thread(target=self._relay, args=(up, conn, started), daemon=True)
            relay.start()  # now: a 100 Continue or an early answer reaches the client during the body
            forward_body(BodyReader(conn, rest), framing, up)
            relay.join()
        except Refused as exc:
            if up is not None:
                _close(up)
            if not started.is_set():
                answer(conn, exc.status, exc.reason, exc.message,
                       b"WWW-Authenticate: Bearer\r\n" if exc.status == 401 else b"")
        except (OSError, ConnectionError, UnicodeDecodeError):
            pass
        finally:
            if up is not None:
                _close(up)
            _close(conn)
            self.slots.release()

    @staticmethod
    def _relay(up: socket.socket, conn: socket.socket, started: threading.Event) -> None:
        """vllm-router's answer to the client as it arrives, until vllm-router closes."""
        try:
            up.settimeout(UPSTREAM_IDLE_S)
            conn.settimeout(CLIENT_SEND_S)
            while True:
                data = up.recv(65536)
                if not data:
                    break
                started.set()
                conn.sendall(data)
        except OSError:
            pass
        finally:
            _close(up)
            try:
                conn.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def serve(self, listener: socket.socket) -> None:
        """Accept until the listener is closed (the gate stopping), handing each client a thread."""
        while True:
            try:
                conn, _ = listener.accept()
            except OSError as exc:
                if exc.errno in (errno.EBADF, errno.EINVAL):  # closed or shut down: the gate is stopping
                    return
                time.sleep(ACCEPT_RETRY_S)  # out of descriptors (EMFILE) or memory: try again, not in a spin
                continue
            if not self.slots.acquire(blocking=False):
                # Never wait on one of a flood of clients here: this loop accepts for everyone.
                try:
                    conn.setblocking(False)
                    conn.send(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                except OSError:
                    pass
                _close(conn)
                continue
            threading.Thread(target=self.handle, args=(conn,), daemon=True).start()


def _close(s: socket.socket) -> None:
    try:
        s.close()
    except OSError:
        pass


def listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, port))
    s.listen(128)
    return s


# ---------------------------------------------------------------- the container's main

# vllm-router reads its key only as --api-key: its launcher is called in-process with the key
# added to the parsed list, so the key is in no process's argv (/proc/PID/cmdline is world-readable).
LAUNCH = ("import os, sys; from vllm_router.launch_router import launch_router, parse_router_args; "
          f"launch_router(parse_router_args([*sys.argv[1:], '--api-key', os.environ['{KEY_VAR}']]))")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="routergate")
    p.add_argument("--listen", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--upstream-port", type=int, required=True)
    p.add_argument("router_args", nargs="*")
    args = p.parse_args(argv)
    key = os.environ.get(KEY_VAR, "").strip()
    if not key:
        print(f"routergate: {KEY_VAR} is empty: the router's admin routes need the cluster's key", file=sys.stderr)
        return 2
    ra = args.router_args
    host = ra[ra.index("--host") + 1] if "--host" in ra[:-1] else None
    port = ra[ra.index("--port") + 1] if "--port" in ra[:-1] else None
    if host != UPSTREAM_HOST or port != str(args.upstream_port):
        print(f"routergate: vllm-router must listen on {UPSTREAM_HOST}:{args.upstream_port} (got {host}:{port})",
              file=sys.stderr)
        return 2
    listener = listen(args.listen, args.port)
    child = subprocess.Popen([sys.executable, "-c", LAUNCH, *ra])
    # PID 1 of the container: docker stop's SIGTERM is passed on, and the gate ends with vllm-router.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda s, _f: child.send_signal(s))
    threading.Thread(target=Gate(key, args.upstream_port).serve, args=(listener,), daemon=True).start()
    return child.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
