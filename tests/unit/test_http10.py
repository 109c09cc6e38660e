"""hostctl.http10, the HTTP/1.0 GET that the engine probe and `status` use: against a real
loopback HTTP server, a real unix-socket server, and responses as servers send them."""

from __future__ import annotations

import http.server
import socket
import socketserver
import threading

import pytest

from hostctl import http10
from hostctl.facts.engine import EngineApi, EngineApiError


def test_parse_content_length_and_headers():
    r = http10.parse_response(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}trailing")
    assert (r.status, r.body, r.headers["content-type"]) == (200, b"{}", "application/json")


def test_parse_body_until_close_and_chunked():
    assert http10.parse_response(b"HTTP/1.0 404 Not Found\r\n\r\nno such").body == b"no such"
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nWiki\r\n5;x=1\r\npedia\r\n0\r\n\r\n"
    assert http10.parse_response(chunked).body == b"Wikipedia"


@pytest.mark.parametrize("raw", [b"", b"HTTP/1.0 200 OK\r\nContent-", b"SSH-2.0-OpenSSH\r\n\r\n",
                                 b"HTTP/1.0 2000 OK\r\n\r\n", b"HTTP/1.0 200 OK\r\nContent-Length: 10\r\n\r\nshort",
                                 b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"])
def test_malformed_responses_are_oserrors(raw):
    with pytest.raises(http10.HttpError) as info:
        http10.parse_response(raw)
    assert isinstance(info.value, OSError)


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        body = f"{self.path} {self.headers['Host']}".encode()
        self.send_response(200 if self.path == "/health" else 503)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_get_over_loopback_tcp():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        ok = http10.get("/health", host="127.0.0.1", port=port)
        assert (ok.status, ok.body) == (200, f"/health 127.0.0.1:{port}".encode())
        assert http10.get("/other?x=1", host="127.0.0.1", port=port).status == 503
    finally:
        server.shutdown()
        server.server_close()
    with pytest.raises(OSError):  # nothing listens there any more
        http10.get("/health", host="127.0.0.1", port=port, timeout=1)


def _unix_server(path, answer):
    """A unix-socket server that reads the request and answers `answer` then closes (None: never
    answers; a callable: its answer to the request's bytes)."""
    seen: list[bytes] = []

    class Handler(socketserver.BaseRequestHandler):
        def handle(self):
            data = b""
            while b"\r\n\r\n" not in data:
                data += self.request.recv(4096)
            seen.append(data)
            if answer is None:
                threading.Event().wait(3)
                return
            self.request.sendall(answer(data) if callable(answer) else answer)

    server = socketserver.ThreadingUnixStreamServer(str(path), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, seen


def test_engine_api_over_a_unix_socket(tmp_path):
    sock = tmp_path / "docker.sock"
    server, seen = _unix_server(sock, b'HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{"ServerVersion": "28.1"}')
    try:
        assert EngineApi(str(sock)).json("/info") == {"ServerVersion": "28.1"}
        assert seen[0].startswith(b"GET /info HTTP/1.0\r\n") and b"\r\nHost: docker\r\n" in seen[0]
    finally:
        server.shutdown()
        server.server_close()


def test_engine_api_error_keeps_the_status(tmp_path):
    sock = tmp_path / "docker.sock"
    server, _ = _unix_server(sock, b'HTTP/1.1 404 Not Found\r\nContent-Length: 41\r\n\r\n{"message": "No such container: vllm-x"}\n')
    try:
        with pytest.raises(EngineApiError) as info:
            EngineApi(str(sock)).get("/containers/vllm-x/json")
        assert info.value.status == 404 and "No such container: vllm-x" in str(info.value)
    finally:
        server.shutdown()
        server.server_close()


def test_a_silent_server_times_out(tmp_path):
    sock = tmp_path / "docker.sock"
    server, _ = _unix_server(sock, None)
    try:
        with pytest.raises(socket.timeout):
            http10.get("/info", unix_socket=str(sock), timeout=0.3)
    finally:
        server.shutdown()
        server.server_close()


def _path(request: bytes) -> str:
    return request.split(b" ", 2)[1].decode().split("?")[0]


def test_engine_probe_reads_the_api_version_from_the_info_answer(tmp_path, monkeypatch):
    """The engine's API version comes from the Api-Version header of /info's answer, as Docker
    sends it on every answer: the probe asks nothing else for it (no /version round trip)."""
    from hostctl.facts import engine

    answers = {"/info": b'{"ServerVersion": "28.1", "CgroupVersion": "2", "Runtimes": {"runc": {}}}',
               "/containers/json": b"[]"}

    def answer(request: bytes) -> bytes:
        body = answers.get(_path(request))
        if body is None:
            return b'HTTP/1.0 404 Not Found\r\n\r\n{"message": "page not found"}'
        return b"HTTP/1.0 200 OK\r\nApi-Version: 1.47\r\nContent-Type: application/json\r\n\r\n" + body

    sock = tmp_path / "docker.sock"
    server, seen = _unix_server(sock, answer)
    monkeypatch.setattr(engine, "daemon_pid", lambda: None)
    try:
        facts = engine._probe_local(str(sock))
    finally:
        server.shutdown()
        server.server_close()
    asked = [_path(r) for r in seen]
    assert facts.available and (facts.version, facts.api_version, facts.cgroup_version) == ("28.1", "1.47", "2")
    assert asked == ["/info", "/containers/json"]
