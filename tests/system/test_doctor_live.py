"""`hostctl doctor` live on this machine, against its real kernel log, /proc, /dev/shm and Docker
engine: a plain machine (no GPU) must get a sensible report, a runtime container holding the
API port must be recognised as ours, a container killed by its memory cap must be explained,
and the support bundle must carry the container's log with its secrets redacted.

Containers and the image are named hc6-* and removed afterwards."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import time
import uuid
from pathlib import Path

import pytest

from conftest import IN_CI
from hostctl import paths, runner
from hostctl.doctor.checks import all_checks
from hostctl.doctor.registry import CheckContext, run_checks
from hostctl.facts import collect
from need import needs

pytestmark = pytest.mark.system

IMAGE = "hc6-busybox:test"
PORT = 18602  # this helper's range: 18600-18699
ROOT = Path(__file__).resolve().parents[2]
BUSYBOX = shutil.which("busybox")
API_SECRET = "sk-live-planted0123456789abcdefXYZ"


def _docker_ok() -> bool:
    return shutil.which("docker") is not None and runner.run(["docker", "info"], timeout=20).ok


needs_docker_busybox = needs(_docker_ok() and BUSYBOX and os.geteuid() == 0,
                             "needs root, a running Docker engine and busybox-static (.ci/run installs them)")


def doctor(*args: str, cwd: Path) -> tuple[int, dict]:
    done = subprocess.run([sys.executable, "-m", "hostctl", "doctor", "--json", *args], capture_output=True, text=True,
                          cwd=cwd, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


def test_plain_machine_report_is_sensible(tmp_path):
    code, doc = doctor(cwd=tmp_path)  # no ./hostctl.toml here
    by_id = {c["id"]: c for c in doc["checks"]}
    assert doc["schema"] == "hostctl.doctor/v1" and doc["facts"]["source"] == "live"
    assert code == doc["exit_code"] == (1 if doc["summary"]["fail"] else 0)
    assert all(c["status"] != "fail" or c["fix"] for c in doc["checks"])
    if not os.path.exists("/proc/driver/nvidia"):
        for cid in ("gpu.driver", "gpu.count", "nccl.p2p.ladder", "memory.memlock", "docker.runtime.nvidia"):
            assert by_id[cid]["status"] == "skip" and "GPU" in by_id[cid]["summary"], cid
    for cid in ("memory.ram_swap", "memory.container_caps", "storage.mounts", "docker.api_port"):
        assert by_id[cid]["status"] == "skip" and "no host profile" in by_id[cid]["summary"]
    if IN_CI or _docker_ok():
        assert by_id["docker.engine"]["status"] == "pass" and by_id["docker.compose"]["status"] == "pass"
    if os.geteuid() == 0:  # root reads the kernel log
        assert by_id["logs.kernel.oom"]["status"] in ("pass", "warn")
        assert by_id["logs.kernel.oom"]["evidence"]["source"] in ("/dev/kmsg", "dmesg", "journalctl -k -b")
    assert by_id["memory.shm.stale"]["status"] in ("pass", "warn")
    assert doc["timings_s"]["facts"] < 5  # a bound against hangs only; speed is in benchmarks/


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    root = tmp_path_factory.mktemp("busybox-root")
    (root / "bin").mkdir()
    shutil.copy2(BUSYBOX, root / "bin" / "busybox")
    for applet in ("sh", "httpd", "head", "tr", "sleep", "echo"):
        (root / "bin" / applet).symlink_to("busybox")
    tar = subprocess.run(["tar", "-C", str(root), "-c", "."], capture_output=True, check=True).stdout
    done = subprocess.run(["docker", "import", "-c", "ENV PATH=/bin", "-", IMAGE], input=tar, capture_output=True)
    assert done.returncode == 0, done.stderr.decode()
    yield IMAGE
    subprocess.run(["docker", "rmi", "-f", IMAGE], capture_output=True)


@pytest.fixture
def container(image):
    names: list[str] = []

    def start(*args: str, command: str, label: str = "hc6-test") -> str:
        name = f"hc6-{uuid.uuid4().hex[:8]}"
        names.append(name)
        done = runner.run(["docker", "run", "-d", "--name", name, "--label", f"io.hostctl.profile={label}", *args, image,
                           "sh", "-c", command], timeout=60)
        assert done.ok, done.why()
        return name

    yield start
    for name in names:
        runner.run(["docker", "rm", "-f", name], timeout=60)


def _profile(tmp_path: Path) -> Path:
    text = (paths.hosts_dir() / "demo-cpu.toml").read_text()
    text = text.replace('name = "demo-cpu"', 'name = "hc6-test"')  # the label our test containers carry
    text = text.replace("api_port = 8000", f"api_port = {PORT}")
    text = text.replace('recipe = "demo-cpu-tiny-moe"', f'recipe = "{paths.recipes_dir() / "demo-cpu-tiny-moe.yaml"}"')
    text = text.replace('compile_cache = "/var/lib/hostctl/compile-cache"', f'compile_cache = "{tmp_path}"')
    profile = tmp_path / "hostctl.toml"
    profile.write_text(text)
    return profile


def _wait_listening(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    pytest.fail(f"nothing listened on 127.0.0.1:{port} within {timeout}s")


@needs_docker_busybox
def test_api_port_held_by_our_runtime_container_then_by_a_stranger(tmp_path, container):
    profile = _profile(tmp_path)
    name = container("--network", "host", command=f"echo VLLM_API_KEY={API_SECRET}; "
                     f"echo 'Authorization: Bearer {API_SECRET}'; exec httpd -f -h / -p 127.0.0.1:{PORT}")
    _wait_listening(PORT)
    bundle = tmp_path / "bundle.tar.gz"
    _, doc = doctor("--config", str(profile), "--bundle", str(bundle), cwd=tmp_path)
    port = {c["id"]: c for c in doc["checks"]}["docker.api_port"]
    assert port["status"] == "pass" and f"held by our runtime container {name}" in port["summary"], port
    with tarfile.open(bundle) as tar:
        members = {m.name.split("/", 1)[1]: tar.extractfile(m).read().decode() for m in tar.getmembers()}
    log = members[f"runtime/{name}.log"]
    assert "VLLM_API_KEY=***REDACTED***" in log and "Bearer ***REDACTED***" in log
    assert all(API_SECRET not in text for text in members.values())
    assert "kernel.log" in members and "facts.json" in members and "rendered/compose.yaml" in members
    runner.run(["docker", "rm", "-f", name], timeout=60)

    with socket.socket() as s:  # now a process that is not our runtime takes the port
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", PORT))
        s.listen()
        code, doc = doctor("--config", str(profile), cwd=tmp_path)
    port = {c["id"]: c for c in doc["checks"]}["docker.api_port"]
    assert code == 1 and port["status"] == "fail" and f"taken by PID {os.getpid()}" in port["summary"]


@needs_docker_busybox
def test_container_killed_by_its_memory_cap_is_explained(container):
    name = container("--network", "none", "--memory", "16m", "--memory-swap", "16m",
                     command='a=$(head -c 67108864 /dev/zero | tr "\\0" x); echo never')
    deadline = time.monotonic() + 60
    while runner.run(["docker", "inspect", "-f", "{{.State.Running}}", name], timeout=20).stdout.strip() == "true":
        assert time.monotonic() < deadline, "the container did not die"
        time.sleep(0.2)
    facts = collect()
    # other containers on this engine may carry hostctl labels too: judge this one
    facts.engine.containers = [c for c in facts.engine.containers if c.name == name]
    assert facts.engine.containers and facts.engine.containers[0].oom_killed is True
    (outcome,) = run_checks(CheckContext(facts=facts), [c for c in all_checks() if c.id == "logs.runtime"])
    assert outcome.result.status == "fail" and "its own memory cap" in outcome.result.summary
    assert "2 GiB steps" in outcome.result.fix
    kernel = facts.kernel_log
    assert kernel is not None and kernel.available
    assert any(e.kind == "memcg_oom" for e in kernel.events), "the kernel log shows the cgroup's OOM kill"
