"""hostctl.facts.engine against a fake Docker engine on a unix socket (DOCKER_HOST=unix://...):
what the probes ask through the docker SDK and what they make of the answers, errors included."""

from __future__ import annotations

import http.server
import json
import socketserver
import threading
from urllib.parse import urlsplit

import pytest

from hostctl.facts import engine

RUNTIME = {"Id": "c0ffee" * 4, "Names": ["/vllm-demo"], "Image": "vllm:test", "Status": "Up 1 minute",
           "Labels": {"io.hostctl.profile": "demo", "other": "dropped"}}
INSPECT = {"Id": "c0ffee" * 4, "Name": "/vllm-demo", "Image": "sha256:abc",
           "Config": {"Image": "vllm:test", "Labels": {"io.hostctl.profile": "demo"}},
           "State": {"Status": "running", "Pid": 4242, "ExitCode": 0, "OOMKilled": False,
                     "StartedAt": "2026-12-01T10:00:00Z", "Health": {"Status": "healthy"}}}


class _Engine(http.server.BaseHTTPRequestHandler):
    """Answers as the engine does: /version, /info, the container list and one container's and
    one image's inspect document; anything else 404 with the engine's message."""

    asked: list[str] = []

    def do_GET(self):  # noqa: N802 (http.server's name)
        path = urlsplit(self.path).path
        path = path.split("/", 2)[2] if path.startswith("/v1.") else path.lstrip("/")
        self.asked.append(path)
        answers = {"version": {"ApiVersion": "1.47", "Version": "28.1"},
                   "info": {"ServerVersion": "28.1", "CgroupVersion": "2", "CgroupDriver": "systemd",
                            "Runtimes": {"runc": {}, "nvidia": {}}, "DefaultRuntime": "runc"},
                   "containers/json": [RUNTIME],
                   f"containers/{RUNTIME['Id']}/json": INSPECT, "containers/vllm-demo/json": INSPECT,
                   "images/vllm:test/json": {"Id": "sha256:abc"}}
        body = answers.get(path)
        status = 200 if body is not None else 404
        data = json.dumps(body if body is not None else {"message": f"No such object: {path}"}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def address_string(self):
        return "unix"

    def log_message(self, *args):
        pass


class _UnixHTTPServer(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True


@pytest.fixture
def fake_engine(tmp_path, monkeypatch):
    sock = tmp_path / "docker.sock"
    server = _UnixHTTPServer(str(sock), _Engine)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("DOCKER_HOST", f"unix://{sock}")
    monkeypatch.setattr(engine, "daemon_pid", lambda: None)
    _Engine.asked = []
    yield _Engine.asked
    server.shutdown()
    server.server_close()


def test_probe_reads_the_engine_its_containers_and_images(fake_engine):
    facts = engine.probe_docker(("vllm:test", "missing:1"))
    assert facts.available, facts.reason
    assert (facts.version, facts.api_version, facts.cgroup_version, facts.cgroup_driver) == ("28.1", "1.47", "2", "systemd")
    assert facts.runtimes == ["nvidia", "runc"] and facts.default_runtime == "runc"
    [c] = facts.containers
    assert (c.name, c.state, c.health, c.pid, c.image_id) == ("vllm-demo", "running", "healthy", 4242, "sha256:abc")
    assert c.labels == {"io.hostctl.profile": "demo"}
    found, missing = facts.images
    assert found.id == "sha256:abc" and missing.id is None
    assert missing.reason == "No such object: images/missing:1/json"  # the engine's own message
    assert facts.daemon_reason and "no dockerd process" in facts.daemon_reason


def test_one_container_for_status(fake_engine):
    found, why = engine.probe_container("vllm-demo")
    assert why is None and found["state"] == "running" and found["started_at"] == "2026-12-01T10:00:00Z"
    assert engine.probe_container("vllm-gone") == (None, None)  # no such container: down, not an error
    assert "info" not in fake_engine and "containers/json" not in fake_engine  # status asks for its container only


def test_an_engine_that_does_not_answer(tmp_path, monkeypatch):
    sock = tmp_path / "docker.sock"
    sock.touch()  # a file where the socket should be: connecting fails
    monkeypatch.setenv("DOCKER_HOST", f"unix://{sock}")
    facts = engine.probe_docker()
    assert not facts.available and facts.reason.startswith(f"Docker engine unreachable at {sock}: ")
    found, why = engine.probe_container("vllm-demo")
    assert found is None and why.startswith(f"Docker engine unreachable at {sock}: ")


def test_a_missing_socket_is_named_in_plain_words(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/none.sock")
    facts = engine.probe_docker()
    assert not facts.available and "does not exist" in facts.reason
