"""The runtime's API port as an attacker sees it (issue 26, classes 5 and 8): another local user
listening on it gets no API key and no request, and hostctl refuses (exit 3); an endless answer
is read only up to its cap.

The attacker is a real process of uid 65534 (fork + setuid) listening on 127.0.0.1 only; it
records whatever it receives in a file the test reads afterwards.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import needs_root
from hostctl.config import SmokeTest, load_recipe
from hostctl.errors import EXIT_REFUSED, RefusedError
from hostctl.service import status
from hostctl.service.smoke import run_test

# the caps the fix sets (hostctl.service.apiclient); spelled here so that the tests run, and fail
# by their effect, on code from before it
SMALL_CAP = 1024 * 1024

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-SECRETKEY-0123456789abcdef"
NOBODY = 65534

pytestmark = needs_root  # a listener run as uid 65534 (fork + setuid)


class Captured:
    """What the attacker's server received, sent back to the test through a pipe (the attacker
    cannot write into pytest's root-only temp folder)."""

    def __init__(self, fd: int):
        self.fd, self.data = fd, b""
        os.set_blocking(fd, False)

    def read_bytes(self) -> bytes:
        time.sleep(0.2)  # the attacker writes after its recv()
        while True:
            try:
                chunk = os.read(self.fd, 65536)
            except BlockingIOError:
                return self.data
            if not chunk:
                return self.data
            self.data += chunk


def _nobody_listener() -> tuple[int, int, Captured]:
    """(port, pid, capture) of a server run as uid 65534 on 127.0.0.1 that answers every request
    with a plausible OK and reports what it received."""
    ready_r, ready_w = os.pipe()
    cap_r, cap_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the attacker
        try:
            os.close(ready_r)
            os.close(cap_r)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            srv = socket.socket()
            srv.bind(("127.0.0.1", 0))
            srv.listen(16)
            os.write(ready_w, str(srv.getsockname()[1]).encode() + b"\n")
            while True:
                conn, _ = srv.accept()
                conn.settimeout(2)
                try:
                    data = conn.recv(65536)
                    os.write(cap_w, data)
                    body = b'{"data": [{"id": "x", "max_model_len": 1}], "choices": [{"message": {"content": "4"}}]}'
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                                 + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
                except OSError:
                    pass
                conn.close()
        finally:
            os._exit(0)
    os.close(ready_w)
    os.close(cap_w)
    with os.fdopen(ready_r) as f:
        port = int(f.readline())
    return port, pid, Captured(cap_r)


@pytest.fixture
def nobody_listener():
    port, pid, capture = _nobody_listener()
    yield port, capture
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    os.close(capture.fd)


def _profile(tmp_path: Path, port: int) -> Path:
    text = (ROOT / "runtime/hosts/demo-cpu.toml").read_text()
    text = text.replace('recipe = "demo-cpu-tiny-moe"', f'recipe = "{ROOT}/runtime/recipes/demo-cpu-tiny-moe.yaml"')
    text = text.replace("api_port = 8000", f'api_port = {port}\napi_key_env = "HOSTCTL_API_KEY"')
    p = tmp_path / "p.toml"
    p.write_text(text)
    return p


def test_smoke_sends_no_key_to_another_users_listener_and_refuses(tmp_path, nobody_listener):
    port, capture = nobody_listener
    env = {**os.environ, "HOSTCTL_API_KEY": KEY, "HOSTCTL_SYSROOT": str(tmp_path / "sysroot")}
    r = subprocess.run([sys.executable, "-m", "hostctl", "--config", str(_profile(tmp_path, port)), "smoke",
                        "--url", f"http://127.0.0.1:{port}"], env=env, capture_output=True, text=True, timeout=120)
    received = capture.read_bytes()
    assert KEY.encode() not in received and b"Authorization" not in received
    assert received == b"", "nothing at all is sent to a listener that is not the runtime"
    assert r.returncode == EXIT_REFUSED, r.stdout + r.stderr
    assert f"127.0.0.1:{port}" in r.stderr and "uid 65534" in r.stderr and "nothing was sent" in r.stderr
    assert KEY not in r.stdout + r.stderr


def test_status_health_probe_does_not_trust_another_users_listener(nobody_listener):
    port, capture = nobody_listener
    answer = status.health_of(f"http://127.0.0.1:{port}")
    assert capture.read_bytes() == b""
    healthy, refused = answer
    assert healthy is False and "uid 65534" in refused


def test_bench_and_gate_clients_refuse_another_users_listener(nobody_listener):
    port, capture = nobody_listener
    from hostctl.bench.client import Api

    with Api(f"http://127.0.0.1:{port}", "x", headers={"Authorization": f"Bearer {KEY}"}) as api:
        with pytest.raises(Exception) as exc:
            api.chat("hi", 4)
    assert capture.read_bytes() == b""
    assert isinstance(exc.value, RefusedError) and exc.value.exit_code == EXIT_REFUSED


class _Server:
    """A loopback HTTP server run by this (root) process: `body` is a callable yielding chunks."""

    def __init__(self, body):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.sent = 0
        self.requests: list[bytes] = []
        self._body = body
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            try:
                self.requests.append(conn.recv(65536))
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n")
                for chunk in self._body():
                    conn.sendall(chunk)
                    self.sent += len(chunk)
            except OSError:
                pass
            conn.close()

    def close(self):
        self.sock.close()


def _endless():
    chunk = b'{"data": [' + b'{"id": "x"}, ' * 5000
    yield chunk
    filler = b'{"id": "y"}, ' * 5000
    for _ in range(64 * 1024 * 1024 // len(filler)):  # 64 MiB, then the server gives up
        yield filler


def _socket_buffers() -> int:
    """What the kernel may hold on a loopback connection beyond what the client read: the most
    the receiving and the sending buffer may autotune to (tcp_rmem, tcp_wmem), plus a MiB of the
    server's own writes. A fixed 8 MiB was passed once on a loaded machine (9.6 MB sent)."""
    most = sum(int(Path(f"/proc/sys/net/ipv4/{name}").read_text().split()[2]) for name in ("tcp_rmem", "tcp_wmem"))
    return most + 1024 * 1024


def test_an_endless_models_answer_is_read_only_up_to_the_cap():
    import httpx

    srv = _Server(_endless)
    try:
        recipe = load_recipe(ROOT / "runtime/recipes/demo-cpu-tiny-moe.yaml")
        t0 = time.monotonic()
        # what run_suite and the `up` gate do, with the client they build (apiclient after the fix)
        try:
            from hostctl.service.apiclient import client
        except ImportError:
            client = lambda timeout: httpx.Client(timeout=timeout, trust_env=False)  # noqa: E731
        with client(timeout=30) as c:
            res = run_test(c, f"http://127.0.0.1:{srv.port}", recipe, SmokeTest(name="models", kind="models"))
        took = time.monotonic() - t0
    finally:
        srv.close()
    # the read stopped at the cap: the server could not push much more than it into the socket buffers
    assert srv.sent < SMALL_CAP + _socket_buffers(), srv.sent
    assert not res.ok and "larger than" in res.got and str(SMALL_CAP) in res.got
    assert took < 30


def test_an_endless_stream_is_read_only_up_to_the_cap():
    from hostctl.bench.client import Api, ApiError

    def stream():
        yield b"data: " + b"x" * 1000
        for _ in range(64 * 1024):  # one line of 64 MiB that never ends
            yield b"x" * 1024

    srv = _Server(stream)
    try:
        with Api(f"http://127.0.0.1:{srv.port}", "x") as api, pytest.raises(ApiError) as exc:
            api.completion_streamed("hi", 4)
    finally:
        srv.close()
    assert srv.sent < SMALL_CAP + _socket_buffers(), srv.sent
    assert "larger than" in str(exc.value)


def test_a_root_listener_is_the_runtime_and_gets_the_key():
    from hostctl.service import apiclient

    def ok():
        yield b'{"data": [{"id": "tiny", "max_model_len": 2048}]}'

    srv = _Server(ok)
    try:
        with apiclient.client(timeout=5, headers={"Authorization": f"Bearer {KEY}"}) as c:
            r = apiclient.request(c, "GET", f"http://127.0.0.1:{srv.port}/v1/models", cap=apiclient.SMALL_CAP,
                                  what="/v1/models")
    finally:
        srv.close()
    assert r.json()["data"][0]["id"] == "tiny"
    assert f"Bearer {KEY}".encode() in srv.requests[0]


def test_the_decision_names_the_port_the_uid_and_that_nothing_was_sent():
    from hostctl.service import apipeer

    assert apipeer.refusal("127.0.0.1", 8000, 0, "root") is None
    r = apipeer.refusal("127.0.0.1", 8000, 1000, "alice")
    assert r.exit_code == EXIT_REFUSED and "127.0.0.1:8000" in r.message and "uid 1000 (alice)" in r.message
    assert "nothing was sent" in r.message
    assert apipeer.refusal("::1", 8000, None, None).exit_code == EXIT_REFUSED  # cannot tell: refused too


def _verify_get(url: str) -> dict:
    """What `hostctl verify`'s runtime checks run on the target (this machine here), as they run it."""
    import importlib

    suite = importlib.import_module("hostctl.verify.suite")  # the package's `suite` is a function
    r = subprocess.run([sys.executable, "-I", "-c", suite._GET, url, "HOSTCTL_API_KEY"], capture_output=True,
                       text=True, timeout=60, env={**os.environ, "HOSTCTL_API_KEY": KEY}, cwd="/")
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_verify_sends_no_key_to_another_users_listener(nobody_listener):
    port, capture = nobody_listener
    doc = _verify_get(f"http://127.0.0.1:{port}/v1/models")
    assert capture.read_bytes() == b""
    assert doc["status"] is None and "uid 65534" in doc["error"] and "nothing was sent" in doc["error"]


def test_verify_reads_a_root_listener_with_the_key():
    def ok():
        yield b'{"data": [{"id": "tiny"}]}'

    srv = _Server(ok)
    try:
        doc = _verify_get(f"http://127.0.0.1:{srv.port}/v1/models")
    finally:
        srv.close()
    assert doc["status"] == 200 and json.loads(doc["body"])["data"][0]["id"] == "tiny"
    assert f"Authorization: Bearer {KEY}".encode() in srv.requests[0]


def test_bench_refuses_before_vllm_bench_serve_gets_the_key(nobody_listener):
    """The batch probe's container sends the key on its own connections: the run is refused
    before it starts when the port is not the runtime's."""
    port, capture = nobody_listener
    from hostctl.bench import runner

    started = []
    run = runner._proved_first(lambda **kw: started.append(kw) or {}, f"http://127.0.0.1:{port}")
    with pytest.raises(RefusedError):
        run(levels=[1], input_tokens=8, output_tokens=8, runs=1)
    assert started == [] and capture.read_bytes() == b""
