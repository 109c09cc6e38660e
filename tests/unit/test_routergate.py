"""The router's gate (hostctl/cluster/routergate.py) on real sockets on 127.0.0.1, with a stand-in
for vllm-router behind it (an HTTP server on loopback that records what reached it and answers
as vllm-router would: the gate is hostctl's code, vllm-router only lives in the router image).

By effect: an admin route without the key never reaches the stand-in (it records nothing) and
the client gets 401; with the key it does; the API passes with its own Authorization untouched;
a stream arrives chunk by chunk; a request smuggled after a body never reaches it; slow and
huge requests end. hostctl's own admin calls (join, leave, /workers) carry the key.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from hostctl.cluster import routergate

KEY = "gate-test-key-4711"
REPLICA_KEY = "replica-own-key"


class Upstream:
    """Stands in for vllm-router on 127.0.0.1: records each request; /v1/... checks the replica's
    own key as a replica behind the router would; /v1/stream sends two SSE events, the second
    only once the test says the first arrived."""

    def __init__(self):
        self.seen: list[dict] = []
        self.release = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _record(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                if self.headers.get("Transfer-Encoding") == "chunked":
                    while True:
                        size = int(self.rfile.readline().split(b";")[0], 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b""):
                                pass
                            break
                        body += self.rfile.read(size)
                        self.rfile.readline()
                outer.seen.append({"method": self.command, "path": self.path, "body": body,
                                   "auth": self.headers.get_all("Authorization") or []})

            def _send(self, code, doc):
                data = json.dumps(doc).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _any(self):
                self._record()
                if self.path == "/v1/stream":
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for i, part in enumerate((b"data: one\n\n", b"data: two\n\n")):
                        if i == 1:
                            outer.release.wait(10)
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                    return
                if self.path.startswith("/v1/") and self.headers.get("Authorization") != f"Bearer {REPLICA_KEY}":
                    return self._send(401, {"error": "the replica's own check"})
                self._send(200, {"path": self.path, "workers": []})

            do_GET = do_POST = do_DELETE = do_PUT = _any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def paths(self) -> list[str]:
        return [r["path"] for r in self.seen]


@pytest.fixture
def gate():
    up = Upstream()
    listener = routergate.listen("127.0.0.1", 0)
    threading.Thread(target=routergate.Gate(KEY, up.port).serve, args=(listener,), daemon=True).start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}", up, listener.getsockname()[1]
    up.server.shutdown()
    listener.close()


def raw(port: int, data: bytes, timeout: float = 10) -> bytes:
    """Send bytes as they are; what came back until the gate closed."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


ADMIN = [("POST", "/add_worker?url=http://127.0.0.1:9/"), ("POST", "/remove_worker?url=http://127.0.0.1:8201"),
         ("GET", "/workers"), ("GET", "/list_workers"), ("POST", "/flush_cache"), ("GET", "/get_loads"),
         ("DELETE", "/workers/http%3A%2F%2F127.0.0.1%3A8201"), ("POST", "/scheduling/diagnostics"),
         ("POST", "/finish_session"), ("GET", "/health_generate"), ("GET", "/get_server_info"),
         # spellings that a normalising server could read as an admin route
         ("POST", "/v1/../add_worker?url=http://127.0.0.1:9/"), ("POST", "/v1/./../add_worker"),
         ("POST", "/%61dd_worker"), ("POST", "//add_worker"), ("GET", "/v1/%2e%2e/workers"), ("GET", "/v1")]


def request(port: int, method: str, path: str, headers: dict[str, str]) -> tuple[int, bytes]:
    """One request with its path exactly as given (an HTTP client would normalise `..`)."""
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n"
    out = raw(port, (head + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n").encode())
    status, _, rest = out.partition(b"\r\n")
    return int(status.split(b" ")[1]), out


@pytest.mark.parametrize("method,path", ADMIN)
def test_an_admin_route_needs_the_key(gate, method, path):
    url, up, port = gate
    for headers in ({}, {"Authorization": "Bearer wrong-key-4711"}, {"Authorization": f"Basic {KEY}"},
                    {"Authorization": f"Bearer {KEY}x"}, {"Authorization": KEY}, {"Authorization": f"Bearer {KEY[:-1]}"}):
        code, out = request(port, method, path, headers)
        assert code == 401, (headers, out)
        assert b"WWW-Authenticate: Bearer\r\n" in out and b"Authorization: Bearer" in out
    assert up.seen == []  # nothing reached vllm-router
    code, out = request(port, method, path, {"Authorization": f"Bearer {KEY}"})
    assert b"hostctl_router_gate" not in out and len(up.seen) == 1
    # (the stand-in, Python's http.server, reads a leading // as /)
    assert (up.seen[0]["method"], up.seen[0]["path"]) == (method, "/" + path.lstrip("/"))


def test_two_authorization_headers_are_not_the_key(gate):
    url, up, port = gate
    out = raw(port, b"GET /workers HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer nope\r\n"
                    b"Authorization: Bearer " + KEY.encode() + b"\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 401 ") and up.seen == []


def test_the_api_and_probes_pass_with_their_own_auth_untouched(gate):
    url, up, _ = gate
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    # no key: the replica's own check answers (the gate does not)
    r = httpx.post(f"{url}/v1/chat/completions", json=chat, timeout=10)
    assert r.status_code == 401 and r.json() == {"error": "the replica's own check"}
    r = httpx.post(f"{url}/v1/chat/completions", json=chat, headers={"Authorization": f"Bearer {REPLICA_KEY}"},
                   timeout=10)
    assert r.status_code == 200
    assert httpx.get(f"{url}/v1/models", headers={"Authorization": f"Bearer {REPLICA_KEY}"}, timeout=10).status_code == 200
    assert httpx.get(f"{url}/liveness", timeout=10).status_code == 200
    assert up.paths() == ["/v1/chat/completions", "/v1/chat/completions", "/v1/models", "/liveness"]
    assert up.seen[1]["auth"] == [f"Bearer {REPLICA_KEY}"] and json.loads(up.seen[1]["body"]) == chat


def test_a_stream_passes_chunk_by_chunk(gate):
    url, up, _ = gate
    with httpx.stream("POST", f"{url}/v1/stream", json={}, timeout=10) as r:
        lines = r.iter_lines()
        # the second event is sent only after the first arrived here: a gate that buffered the
        # answer would deliver neither, and this read would time out
        assert next(line for line in lines if line) == "data: one"
        up.release.set()
        assert next(line for line in lines if line) == "data: two"
        assert r.headers["content-type"] == "text/event-stream"


def test_a_request_smuggled_after_a_body_never_reaches_the_router(gate):
    url, up, port = gate
    smuggled = b"POST /add_worker?url=http://127.0.0.1:9/ HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
    # after a chunked body, and after a Content-Length body, on the same connection
    out = raw(port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                    b"5\r\nhello\r\n0\r\n\r\n" + smuggled)
    assert out.count(b"HTTP/1.1 ") == 1
    out = raw(port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello" + smuggled)
    assert out.count(b"HTTP/1.1 ") == 1
    # both framings at once, or a framing the gate does not read, reach nothing
    for head in (b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", b"Transfer-Encoding: gzip, chunked\r\n",
                 b"Content-Length: 5\r\nContent-Length: 50\r\n", b"Content-Length: -5\r\n",
                 # a header the gate would not see, if vllm-router ended a line at a bare LF or CR
                 b"X-A: 1\nContent-Length: 5\r\n", b"X-A: 1\rContent-Length: 5\r\n", b"Transfer-Encoding : chunked\r\n"):
        out = raw(port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + head + b"\r\n5\r\nhello\r\n0\r\n\r\n" + smuggled)
        assert out.split(b" ")[1] in (b"400", b"501"), out
    assert up.paths() == ["/v1/completions", "/v1/completions"]
    assert [r["body"] for r in up.seen] == [b"hello", b"hello"]


def test_slow_or_huge_requests_end(gate, monkeypatch):
    url, up, port = gate
    monkeypatch.setattr(routergate, "HEAD_DEADLINE_S", 1.0)
    monkeypatch.setattr(routergate, "BODY_IDLE_S", 1.0)
    # a head that drips a byte at a time never ends: the gate answers 408 after its deadline
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        t0 = time.monotonic()
        s.sendall(b"GET /v1/models HTTP/1.1\r\n")
        while time.monotonic() - t0 < 1.5:
            s.sendall(b"X")
            time.sleep(0.1)
        out = s.recv(65536)
        assert out.startswith(b"HTTP/1.1 408 ") and time.monotonic() - t0 < 5
    assert up.seen == []
    # a body that stops half-way: 408 after the idle deadline
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        t0 = time.monotonic()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nhalf")
        assert s.recv(65536).startswith(b"HTTP/1.1 408 ") and time.monotonic() - t0 < 5
    # a head over the cap, and a body over the cap: refused before vllm-router hears of it
    before = len(up.seen)
    out = raw(port, b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (routergate.HEAD_MAX + 10) + b"\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 431 ")
    out = raw(port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (routergate.BODY_MAX + 1))
    assert out.startswith(b"HTTP/1.1 413 ")
    assert len(up.seen) == before


def test_hostctl_sends_the_key_on_its_admin_calls(gate, tmp_path, monkeypatch):
    """join_router, router_backends and leave_router through the gate: each passes it."""
    from test_cluster import replicas, write_cluster

    from hostctl.cluster import run
    from hostctl.cluster.commands import load

    url, up, port = gate
    monkeypatch.setenv("HC_TEST_KEY", KEY)
    doc = replicas()
    doc["hosts"][0]["api_port"] = port
    cluster, cp, me = load(write_cluster(tmp_path, doc), "r1")
    assert run.router_backends(cp) == []
    said = []
    assert run.join_router(cp, cp.member("r1"), said.append)
    assert up.paths() == ["/workers", "/liveness", "/workers", "/add_worker?url=http%3A%2F%2F127.0.0.1%3A8201"]
    assert all(r["auth"] == [f"Bearer {KEY}"] for r in up.seen if r["path"] != "/liveness")
