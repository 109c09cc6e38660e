"""SIGINT and SIGTERM sent to a running `hostctl up` (the real demo runtime: Docker Engine, Compose v2,
vLLM's CPU build): `up` takes down what it started (unless --keep-on-failure), records the state
as interrupted and exits 130 / 143; a second Ctrl-C during the clean-up skips the graceful wait.

Each test interrupts the start a moment after the container exists, so a boot costs seconds, not
the ~40 s a full load takes (three boots in all). Ports 18570-18579, Compose projects hc5-hc15-*.
"""

import json
import signal
import subprocess
import threading
import time

import pytest

from conftest import needs_compose, needs_root
from runtime_fixtures import ROOT

pytestmark = [pytest.mark.system, needs_root, needs_compose]


class Up:
    """`hostctl up` as a child process whose stderr is read line by line as it comes."""

    def __init__(self, host, *args: str):
        self.host = host
        self.proc = subprocess.Popen(host.argv("up", *args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env=host.env(), cwd=ROOT)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, text: str, timeout: float) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(text in line for line in self.lines):
                return time.monotonic()
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"never saw {text!r}; stderr so far:\n" + "\n".join(self.lines))

    def finish(self, timeout: float = 120) -> tuple[int, str, str]:
        try:
            out = self.proc.stdout.read()
            self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        self._reader.join(timeout=10)
        return self.proc.returncode, out, "\n".join(self.lines)

    def service_state(self) -> dict:
        return json.loads((self.host.sysroot / "var/lib/hostctl/service.json").read_text())


def test_sigint_during_up_takes_down_what_it_started(demo_image, host_factory):
    h = host_factory("hc15-int", 18570)
    up = Up(h)
    up.wait_for(f"started {h.container}", timeout=180)
    assert h.container_exists()
    time.sleep(1.0)  # mid-load: the server is importing vLLM
    t0 = time.monotonic()
    up.proc.send_signal(signal.SIGINT)
    rc, out, err = up.finish()
    took = time.monotonic() - t0
    assert rc == 130, err
    assert out == ""  # no endpoint: it never became ready
    assert "interrupted by SIGINT: taking the project down" in err
    assert "took the project down (ok): nothing left running" in err
    assert not h.container_exists()
    doc = up.service_state()
    assert doc["state"] == "interrupted" and doc["signal"] == "SIGINT" and doc["taken_down"] is True
    assert doc["container"] == h.container and not doc["kept"]
    print(f"SIGINT: exit {rc} {took:.1f} s after the signal")
    rc, out, _, _ = h.run("status", timeout=60)
    assert rc == 1 and "last up: interrupted at" in out and "(by SIGINT)" in out
    # The lock is free again: a `down` right after runs (and finds nothing).
    rc, out, err2, _ = h.run("down", timeout=120)
    assert rc == 0 and "was not running" in out, err2


def test_sigterm_then_a_second_signal_skips_the_graceful_wait(demo_image, host_factory):
    # systemd stopping the unit sends SIGTERM; a second signal during the clean-up means "now".
    h = host_factory("hc15-term", 18573)
    up = Up(h)
    up.wait_for(f"started {h.container}", timeout=180)
    time.sleep(1.0)
    up.proc.send_signal(signal.SIGTERM)
    up.wait_for("press Ctrl-C again to skip the wait", timeout=30)
    t1 = time.monotonic()
    up.proc.send_signal(signal.SIGINT)
    rc, _, err = up.finish()
    assert rc == 143, err  # the first signal decides the exit code
    assert "interrupted by SIGTERM" in err
    assert "second signal: removing the container without waiting for it to stop" in err
    assert not h.container_exists()
    doc = up.service_state()
    assert doc["state"] == "interrupted" and doc["signal"] == "SIGTERM" and doc["taken_down"] is True
    print(f"SIGTERM then SIGINT: exit {rc} {time.monotonic() - t1:.1f} s after the second signal")


def test_keep_on_failure_leaves_an_interrupted_runtime_running(demo_image, host_factory):
    h = host_factory("hc15-keep", 18576)
    up = Up(h, "--keep-on-failure")
    up.wait_for(f"started {h.container}", timeout=180)
    up.proc.send_signal(signal.SIGINT)
    rc, _, err = up.finish()
    assert rc == 130, err
    assert "--keep-on-failure" in err and h.container_exists()
    doc = up.service_state()
    assert doc["state"] == "interrupted" and doc["kept"] is True
    rc, out, err, _ = h.run("down", timeout=120)
    assert rc == 0 and "stopped and removed" in out, err
    assert not h.container_exists()
