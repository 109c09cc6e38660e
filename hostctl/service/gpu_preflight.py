"""Does the runtime image see the planned GPUs? `up`'s GPU preflight: a one-second container from
the same image with the same device ids runs hostctl/gpu/device_query.py, and decide() judges
what came back — before a load that can take an hour fails for a reason known in a second.

decide() is a pure function of the planned GPU UUIDs and the container's exit code, stdout and
stderr, so it is tested on recorded outputs: the H200's real device-query output (outside a
container) in tests/unit/data/device-query/, and the failure texts of Docker and the NVIDIA
Container Toolkit as their documentation and issue threads show them. When the container ran,
the decision reads the query's own JSON by error codes (NVML_ERROR_*, CUDA_ERROR_*). When it did
not run, Docker's error text is all there is: those are matched on the fragments the toolkit's
own messages carry, each one cited below.

The containerised path is unexercised here: no machine this was built on has both Docker and an
NVIDIA GPU.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

QUERY_TIMEOUT_S = 60  # image start plus driver init; the query itself takes ~0.3 s on an H200
QUERY_SCRIPT = Path(__file__).resolve().parent.parent / "gpu" / "device_query.py"

# NVML return codes (nvml.h) and CUDA driver error codes (cuda.h) the decision tells apart.
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_UNKNOWN = 999
CUDA_ERROR_NO_DEVICE = 100
CUDA_ERROR_STUB_LIBRARY = 34
CUDA_ERROR_SYSTEM_DRIVER_MISMATCH = 803
CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE = 804

TOOLKIT_INSTALL = ("install the NVIDIA Container Toolkit, run `nvidia-ctk runtime configure --runtime=docker`, then "
                   "`systemctl restart docker` (the engine reads its runtimes at start)")
# Docker's and the toolkit's own error texts when the container could not start (no codes exist
# for these): (code, fragment, what it means, fix). Sources: NVIDIA/nvidia-docker#1034 and #1243
# ("could not select device driver"), NVIDIA/libnvidia-container#231 and
# NVIDIA/nvidia-container-toolkit#154 (libnvidia-ml.so.1), NVIDIA/nvidia-docker#1264/#1283
# ("unknown device"), NVIDIA/nvidia-container-toolkit#146 and #1239 ("unresolvable CDI devices").
ENGINE_ERRORS: tuple[tuple[str, re.Pattern, str, str], ...] = (
    ("no-gpu-device-driver", re.compile(r'could not select device driver "[^"]*" with capabilities: \[\[gpu\]\]'),
     "the Docker engine has no GPU device driver: the NVIDIA Container Toolkit is not installed, or the engine "
     "was not restarted after it was", TOOLKIT_INSTALL),
    ("no-nvidia-runtime", re.compile(r"unknown or invalid runtime name: nvidia"),
     "the engine does not know the nvidia runtime", TOOLKIT_INSTALL),
    ("cdi-unresolvable", re.compile(r"unresolvable CDI devices"),
     "the engine uses CDI and its NVIDIA CDI spec does not list the requested devices (none generated, or "
     "generated before a driver update)",
     "regenerate it: `nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml` (after every driver update)"),
    ("host-driver-missing", re.compile(r"load library failed: libnvidia-ml\.so\.1"),
     "the toolkit cannot load the host's NVML library: no NVIDIA driver is installed on the host, or it is "
     "not where the toolkit looks", "install the NVIDIA driver on the host and check `nvidia-smi` there first"),
    ("unknown-device", re.compile(r"device error: [^\n]*unknown device"),
     "the toolkit does not know a requested device id (a GPU removed, renumbered or given by a stale UUID)",
     "compare gpu.devices in the profile with `nvidia-smi -L`; `hostctl plan` shows the GPUs it picked"),
    ("driver-version-mismatch", re.compile(r"[Dd]river/library version mismatch"),
     "the loaded kernel module and the user-space driver libraries differ (a driver update without a reboot)",
     "reboot the host (or reload the nvidia kernel modules) so the module matches the libraries"),
    ("no-python-in-image", re.compile(r'exec: "python3": executable file not found'),
     "the image has no python3 to run the device query", "use the runtime image the recipe names (it has python3)"),
)


@dataclass(frozen=True)
class GpuVerdict:
    ok: bool
    code: str  # "ok" or what went wrong (stable id)
    message: str
    fix: str | None = None
    evidence: list[str] = field(default_factory=list)
    seen: list[str] = field(default_factory=list)  # GPU UUIDs the container saw


def query_argv(image: str, uuids: list[str], script: str | None = None) -> list[str]:
    """`docker run` of the device query with the same image and device ids Compose will use."""
    code = script if script is not None else QUERY_SCRIPT.read_text()
    return ["docker", "run", "--rm", "--network", "none", "--gpus", f"\"device={','.join(uuids)}\"",
            "--entrypoint", "python3", image, "-c", code]


def _tail(text: str, n: int = 4) -> list[str]:
    return [line.strip() for line in text.strip().splitlines()[-n:] if line.strip()]


def _error_code(part: dict) -> object:
    err = part.get("error") or {}
    return err.get("code")


def decide(planned: list[str], returncode: int | None, stdout: str, stderr: str, *,
           timed_out: bool = False) -> GpuVerdict:
    """The verdict on one device-query run (pure)."""
    if timed_out:
        return GpuVerdict(False, "query-timeout", f"the GPU device query did not finish in {QUERY_TIMEOUT_S} s",
                          "check `docker run --rm --gpus all <image> nvidia-smi` by hand; a hung driver needs a reboot",
                          _tail(stderr))
    doc = None
    for line in reversed(stdout.strip().splitlines()):
        try:
            candidate = json.loads(line)
        except ValueError:
            continue
        if isinstance(candidate, dict) and candidate.get("schema") == "hostctl.device-query/v1":
            doc = candidate
            break
    if doc is None:
        text = stderr + "\n" + stdout
        for code, pattern, cause, fix in ENGINE_ERRORS:
            m = pattern.search(text)
            if m:
                return GpuVerdict(False, code, f"the runtime image cannot use the GPUs: {cause}", fix,
                                  [line for line in text.splitlines() if pattern.search(line)][:2])
        return GpuVerdict(False, "query-failed", f"the GPU device query container failed (exit code {returncode})",
                          "run the image with `docker run --rm --gpus all <image> nvidia-smi` to see why",
                          _tail(text))
    return _decide_doc(planned, doc)


def _decide_doc(planned: list[str], doc: dict) -> GpuVerdict:
    nvml, cuda = doc.get("nvml") or {}, doc.get("cuda") or {}
    seen = [d.get("uuid") for d in nvml.get("devices") or [] if d.get("uuid")]
    evidence = [f"NVML: {'ok' if nvml.get('ok') else nvml.get('error')}, devices {seen or 'none'}",
                f"CUDA: {'ok' if cuda.get('ok') else cuda.get('error')}, devices {cuda.get('uuids') or 'none'}"]
    code = _error_code(nvml)
    if not nvml.get("ok"):
        if code == "library-not-found":
            return GpuVerdict(False, "no-driver-in-container",
                              "the container has no NVIDIA driver libraries: it started without the toolkit's GPU "
                              "injection (the nvidia runtime or CDI was not used)", TOOLKIT_INSTALL, evidence)
        if code in (NVML_ERROR_UNKNOWN, NVML_ERROR_NO_PERMISSION):
            # NVIDIA/nvidia-container-toolkit#48: the device cgroup lost the GPU nodes (systemd
            # reloaded the container's unit under the systemd cgroup driver).
            return GpuVerdict(False, "devices-not-accessible",
                              "NVML cannot open the GPUs inside the container (\"Failed to initialize NVML: Unknown "
                              "Error\"): the container's device cgroup does not allow them",
                              "create the /dev/char links the toolkit needs (`nvidia-ctk system create-dev-char-symlinks "
                              "--create-all`, and its udev rule), or switch the engine to the cgroupfs driver; "
                              "`hostctl doctor` reports the engine's cgroup driver (NVIDIA/nvidia-container-toolkit#48)",
                              evidence)
        if code == NVML_ERROR_LIB_RM_VERSION_MISMATCH:
            return GpuVerdict(False, "driver-version-mismatch",
                              "the driver libraries in the container do not match the loaded kernel module",
                              "reboot the host after a driver update", evidence)
        if code == NVML_ERROR_DRIVER_NOT_LOADED:
            return GpuVerdict(False, "driver-not-loaded", "the NVIDIA kernel module is not loaded on the host",
                              "load it (`modprobe nvidia`) or reinstall the driver; check `nvidia-smi` on the host",
                              evidence)
        return GpuVerdict(False, "nvml-failed", f"NVML failed inside the container: {nvml.get('error')}",
                          "run `docker run --rm --gpus all <image> nvidia-smi` to see the driver's own message", evidence)
    if set(seen) != set(planned):
        missing, extra = sorted(set(planned) - set(seen)), sorted(set(seen) - set(planned))
        return GpuVerdict(False, "wrong-devices",
                          f"the container sees {len(seen)} GPU(s), not the {len(planned)} planned"
                          + (f"; missing {', '.join(missing)}" if missing else "")
                          + (f"; not planned {', '.join(extra)}" if extra else ""),
                          "the engine maps other devices than the plan asks for: check the toolkit's configuration "
                          "(NVIDIA_VISIBLE_DEVICES set in the image, a default runtime that adds all GPUs)",
                          evidence, seen)
    if not cuda.get("ok"):
        ccode = _error_code(cuda)
        causes = {
            CUDA_ERROR_NO_DEVICE: "CUDA sees no device although NVML does (CUDA_VISIBLE_DEVICES set in the image "
                                  "or the environment hides them)",
            CUDA_ERROR_STUB_LIBRARY: "the image's libcuda.so.1 is the CUDA toolkit's stub, not the driver's",
            CUDA_ERROR_SYSTEM_DRIVER_MISMATCH: "the image's CUDA compatibility libraries do not match the host driver",
            CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE: "the image's CUDA forward-compatibility package does not "
                                                       "support this GPU",
        }
        return GpuVerdict(False, "cuda-failed",
                          causes.get(ccode, f"the CUDA driver failed to initialise: {cuda.get('error')}"),
                          "run the recipe's image with a driver at least as new as its CUDA version; remove "
                          "CUDA_VISIBLE_DEVICES from the recipe's env (hostctl maps the GPUs)", evidence, seen)
    cuda_seen = [u for u in cuda.get("uuids") or [] if u]
    if cuda_seen and set(cuda_seen) != set(planned):
        return GpuVerdict(False, "wrong-devices", "CUDA sees other GPUs than NVML and the plan",
                          "remove CUDA_VISIBLE_DEVICES from the recipe's env", evidence, seen)
    return GpuVerdict(True, "ok", f"the runtime image sees the {len(planned)} planned GPU(s)", None, evidence, seen)


def run_query(image: str, uuids: list[str]) -> GpuVerdict:
    """Run the device query in a one-second container (the only part here that acts)."""
    from hostctl import runner

    res = runner.run(query_argv(image, uuids), timeout=QUERY_TIMEOUT_S, new_session=True)
    if res.missing:
        return GpuVerdict(False, "no-docker", "docker is not installed", "install Docker Engine")
    return decide(uuids, res.returncode, res.stdout, res.stderr, timed_out=res.timed_out)
