"""In-guest driver of the whole-host test (started by hostctl-vmtest.service at every boot).

It reads the mode from the kernel command line (hostctl.vmtest=storage|numa|probe), mounts
the results disk (ext4 labelled hcresults), runs the pytest phase this boot is for
(check_<phase>.py, JUnit XML + log to the results disk), saves diagnostics, and then reboots
(storage, after the first boot) or powers the guest off. Whatever goes wrong, it powers off:
the host is waiting for QEMU to exit. A boot beyond the planned ones powers off at once, so a
broken reboot can never loop.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import traceback
import xml.etree.ElementTree as ET
from pathlib import Path

TESTS = Path(__file__).resolve().parent
RESULTS_DEV = Path("/dev/disk/by-label/hcresults")
MNT = Path("/run/hcresults")
OUT = MNT / "out"
PHASES = {"storage": ["boot1", "boot2"], "numa": ["numa"], "probe": []}
PROBE_MARKER = "HOSTCTL-VMTEST-PROBE-OK"
PYTEST_TIMEOUT_S = 1800


def say(msg: str) -> None:
    print(f"hostctl-vmtest: {msg}", flush=True)  # journal + serial console


def sh(argv: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def mode() -> str:
    for arg in Path("/proc/cmdline").read_text().split():
        if arg.startswith("hostctl.vmtest="):
            return arg.split("=", 1)[1]
    raise SystemExit("not a test boot: no hostctl.vmtest= on the kernel command line")


def uptime() -> float:
    return float(Path("/proc/uptime").read_text().split()[0])


def mount_results() -> None:
    deadline = time.monotonic() + 120
    while not RESULTS_DEV.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{RESULTS_DEV} did not appear within 120 s")
        sh(["udevadm", "settle", "--timeout=10"], timeout=30)
        time.sleep(0.5)
    MNT.mkdir(parents=True, exist_ok=True)
    if not os.path.ismount(MNT):
        res = sh(["mount", "-t", "ext4", str(RESULTS_DEV), str(MNT)])
        if res.returncode != 0:
            raise RuntimeError(f"mount {RESULTS_DEV}: {res.stderr.strip()}")
    OUT.mkdir(exist_ok=True)


def junit_counts(path: Path) -> dict:
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as exc:
        return {"error": f"no JUnit XML: {exc}"}
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    return {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}


def run_phase(phase: str) -> dict:
    say(f"phase {phase}: running check_{phase}.py")
    t0 = time.monotonic()
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v", "-rA", f"--junitxml={OUT}/{phase}.xml",
            "-o", f"junit_suite_name=guest-{phase}", f"--rootdir={TESTS}", str(TESTS / f"check_{phase}.py")]
    env = dict(os.environ, HC_OUT=str(OUT), HC_PHASE=phase, PYTHONDONTWRITEBYTECODE="1")
    with open(OUT / f"{phase}.log", "w") as log:
        try:
            rc = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, cwd=TESTS, env=env,
                                stdin=subprocess.DEVNULL, timeout=PYTEST_TIMEOUT_S).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    result = {"phase": phase, "pytest_rc": rc, "seconds": round(time.monotonic() - t0, 1), **junit_counts(OUT / f"{phase}.xml")}
    say(f"phase {phase}: {result}")
    return result


def diagnostics(phase: str) -> None:
    """What a person debugging a failed run would look at, from this boot."""
    for name, argv in {
        "journal": ["journalctl", "-b", "--no-pager", "-o", "short-monotonic"],
        "units": ["systemctl", "list-units", "--all", "--no-pager", "hostctl*"],
        "failed": ["systemctl", "--failed", "--no-pager", "--no-legend"],
        "lsblk": ["lsblk", "-o", "NAME,SIZE,TYPE,PARTLABEL,LABEL,FSTYPE,UUID,MOUNTPOINTS"],
        "swaps": ["cat", "/proc/swaps"],
        "fstab": ["cat", "/etc/fstab"],
    }.items():
        try:
            res = sh(argv, timeout=120)
            (OUT / f"{phase}-{name}.txt").write_text(res.stdout + res.stderr)
        except Exception as exc:  # diagnostics must never stop the power-off
            (OUT / f"{phase}-{name}.txt").write_text(f"{argv}: {exc}\n")


def finish(action: str) -> None:
    say(f"{action}")
    os.sync()
    if os.path.ismount(MNT):
        sh(["umount", str(MNT)])
    sh(["systemctl", action, "--no-block"])


def main() -> None:
    m = mode()
    if m == "probe":
        say(PROBE_MARKER)
        sh(["systemctl", "poweroff", "--no-block"])
        return
    action = "poweroff"
    try:
        mount_results()
        state_file = OUT / "state.json"
        state = json.loads(state_file.read_text()) if state_file.exists() else {"mode": m, "boots": []}
        phases = PHASES[m]
        done = len(state["boots"])
        if done >= len(phases):
            state.setdefault("extra_boots", []).append(uptime())
            state_file.write_text(json.dumps(state, indent=2))
            say(f"boot {done + 1} was not planned ({len(phases)} planned): powering off")
            return
        phase = phases[done]
        started = {"boot": done + 1, "uptime_at_start": uptime(),
                   "boot_id": Path("/proc/sys/kernel/random/boot_id").read_text().strip()}
        result = run_phase(phase)
        diagnostics(phase)
        state["boots"].append({**started, **result})
        state_file.write_text(json.dumps(state, indent=2))
        if done + 1 < len(phases):
            action = "reboot"
        else:
            state["finished"] = True
            state_file.write_text(json.dumps(state, indent=2))
    except BaseException:
        say("driver failed:\n" + traceback.format_exc())
        try:
            (OUT / "driver-error.txt").write_text(traceback.format_exc())
        except OSError:
            pass
    finally:
        finish(action)


if __name__ == "__main__":
    main()
