"""Helpers for the in-guest checks (check_*.py, run by driver.py inside the test guest):
hostctl as a user runs it (every call's argv, exit status and output kept on the results
disk), state carried from one boot to the next, and the names the guest profile uses.

What the host should be is `hostctl verify`'s to prove (run as a user runs it); the `host` fixture
is a pytest-testinfra host on its local backend for the few checks verify does not make (waiting
for nofail mounts, what systemd did at boot). It is one unparametrized object (not the plugin's
per-host parametrized fixture), so pytest keeps the checks in file order: provision first.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import testinfra

OUT = Path(os.environ.get("HC_OUT", "/run/hcresults/out"))
TESTS = Path(__file__).resolve().parent
PROFILE = TESTS / "hostctl.toml"
RECIPE = TESTS / "vmtest-recipe.yaml"
INSTALLED_PROFILE = Path("/etc/hostctl/hostctl.toml")
# drive name in the profile -> the serial number QEMU gives its NVMe controller
DRIVES = {"ssd1": "HCVMSSD1", "ssd2": "HCVMSSD2"}
SPARE = "HCVMSPARE"  # in the guest, not in the profile: must keep every byte
SWAP_PRIORITY = 100
CACHE_DIRS = {"planes_cache": "/mnt/hostctl/ssd1/moet-planes", "expert_store": "/mnt/hostctl/ssd2/moet-store",
              "compile_cache": "/var/lib/hostctl/compile-cache"}
# What systemd reports for a service its ExecCondition= skipped (the power unit without a driver):
# ConditionResult=no, inactive (not failed), with this result.
SKIPPED_RESULT = "exec-condition"
UNIT_PROPS = ("UnitFileState", "LoadState", "ActiveState", "SubState", "Result", "ConditionResult",
              "InactiveExitTimestampMonotonic", "ExecMainStartTimestampMonotonic", "ExecMainStatus", "NRestarts")


def by_id(serial: str) -> Path:
    """udev's stable name for a QEMU NVMe namespace with this serial."""
    return Path(f"/dev/disk/by-id/nvme-QEMU_NVMe_Ctrl_{serial}")


def mount_of(drive: str) -> str:
    return f"/mnt/hostctl/{drive}"


def sh(argv: list[str], timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if check and res.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {res.returncode}: {res.stderr.strip()[-800:]}")
    return res


_calls = [0]


def hostctl(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    """Run the installed `hostctl` (the console script from the wheel) and keep the record."""
    _calls[0] += 1
    argv = ["hostctl", *args]
    t0 = time.monotonic()
    res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    took = time.monotonic() - t0
    phase = os.environ.get("HC_PHASE", "guest")
    with open(OUT / f"{phase}-hostctl.log", "a") as log:
        log.write(f"### {' '.join(argv)}\n### exit {res.returncode} after {took:.1f} s\n"
                  f"--- stdout\n{res.stdout}--- stderr\n{res.stderr}\n")
    return res


def unit_props(unit: str) -> dict[str, str]:
    out = sh(["systemctl", "show", "-p", ",".join(UNIT_PROPS), unit]).stdout
    props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    with open(OUT / f"{os.environ.get('HC_PHASE', 'guest')}-unit-props.log", "a") as log:
        log.write(f"{unit}: {json.dumps(props)}\n")
    return props


def sha256(path: Path | str, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def wait_until(what: str, check, timeout: float = 120, interval: float = 1.0):
    """Poll check() until it returns something true; nofail mounts and swaps may still be
    coming up when multi-user.target is reached."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not true within {timeout:.0f} s")
        time.sleep(interval)


def swaps() -> dict[str, int]:
    """Active swap device (resolved path) -> priority, from /proc/swaps."""
    out = {}
    for line in Path("/proc/swaps").read_text().splitlines()[1:]:
        fields = line.split()
        out[os.path.realpath(fields[0])] = int(fields[4])
    return out


def lsblk(device: Path | str) -> list[dict]:
    """The device's partitions with GPT names, filesystem labels, types and UUIDs."""
    res = sh(["lsblk", "-J", "-o", "NAME,PATH,TYPE,PARTLABEL,LABEL,FSTYPE,UUID,MOUNTPOINTS", str(device)])
    (disk,) = json.loads(res.stdout)["blockdevices"]
    return disk.get("children", [])


def partition(drive: str, kind: str) -> dict:
    """kind: swap | data. The partition hostctl made for that role, by its GPT name."""
    name = f"hostctl-{kind}-{drive}"
    parts = [p for p in lsblk(by_id(DRIVES[drive]).resolve()) if p["partlabel"] == name]
    assert len(parts) == 1, f"expected one partition named {name} on {drive}, found {parts}"
    return parts[0]


class Shared:
    """State one boot leaves for the next, on the results disk."""

    path = OUT / "shared.json"

    def __init__(self) -> None:
        self.data = json.loads(self.path.read_text()) if self.path.exists() else {}

    def get(self, key: str, default=None):
        return self.data.get(key, default)

    def __getitem__(self, key: str):
        return self.data[key]

    def __setitem__(self, key: str, value) -> None:
        self.data[key] = value
        self.path.write_text(json.dumps(self.data, indent=2))
        os.sync()


@pytest.fixture(scope="session")
def host():
    return testinfra.get_host("local://")


@pytest.fixture
def shared() -> Shared:
    return Shared()


@pytest.fixture
def storage_ready(shared: Shared) -> None:
    """Storage checks read what `provision --only storage` did in boot 1."""
    state = shared.get("storage")
    if state != "provisioned":
        pytest.fail(f"storage was not provisioned in boot 1 (state: {state}); see the boot1 log")
