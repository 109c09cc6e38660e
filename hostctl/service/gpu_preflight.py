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
from pathlib import Path

from pydantic import ConfigDict, Field

from hostctl.data import Data

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


class GpuVerdict(Data):
    model_config = ConfigDict(frozen=True)

    ok: bool
    code: str  # "ok" or what went wrong (stable id)
    message: str
    fix: str | None = None
    evidence: list[str] = Field(default_factory=list)
    seen: list[str] = Field(default_factory=list)  # GPU UUIDs the container saw


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
        return GpuVerdict(ok=False, code="query-timeout", message=f"the GPU device query did not finish in {QUERY_TIMEOUT_S} s",
                          fix="check `docker run --rm --gpus all <image> nvidia-smi` by hand; a hung driver needs a reboot",
                          evidence=_tail(stderr))
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
                return GpuVerdict(ok=False, code=code, message=f"the runtime image cannot use the GPUs: {cause}", fix=fix,
                                  evidence=[line for line in text.splitlines() if pattern.search(line)][:2])
        return GpuVerdict(ok=False, code="query-failed", message=f"the GPU device query container failed (exit code {returncode})",
                          fix="run the image with `docker run --rm --gpus all <image> nvidia-smi` to see why",
                          evidence=_tail(text))
    return _decide_doc(planned, doc)


def _decide_doc(planned: list[str], doc: dict) -> GpuVerdict:
    nvml, cuda = doc.get("nvml") or {}, doc.get("cuda") or {}
    seen = [d.get("uuid") for d in nvml.get("devices") or [] if d.get("uuid")]
    evidence = [f"NVML: {'ok' if nvml.get('ok') else nvml.get('error')}, devices {seen or 'none'}",
                f"CUDA: {'ok' if cuda.get('ok') else cuda.get('error')}, devices {cuda.get('uuids') or 'none'}"]
    code = _error_code(nvml)
    if not nvml.get("ok"):
        if code == "library-not-found":
            return GpuVerdict(ok=False, code="no-driver-in-container",
                              message="the container has no NVIDIA driver libraries: it started without the toolkit's GPU "
                              "injection (the nvidia runtime or CDI was not used)", fix=TOOLKIT_INSTALL, evidence=evidence)
        if code in (NVML_ERROR_UNKNOWN, NVML_ERROR_NO_PERMISSION):
            # NVIDIA/nvidia-container-toolkit#48: the device cgroup lost the GPU nodes (systemd
            # reloaded the container's unit under the systemd cgroup driver).
            return GpuVerdict(ok=False, code="devices-not-accessible",
                              message="NVML cannot open the GPUs inside the container (\"Failed to initialize NVML: Unknown "
                              "Error\"): the container's device cgroup does not allow them",
                              fix="create the /dev/char links the toolkit needs (`nvidia-ctk system create-dev-char-symlinks "
                              "--create-all`, and its udev rule), or switch the engine to the cgroupfs driver; "
                              "`hostctl doctor` reports the engine's cgroup driver (NVIDIA/nvidia-container-toolkit#48)",
                              evidence=evidence)
        if code == NVML_ERROR_LIB_RM_VERSION_MISMATCH:
            return GpuVerdict(ok=False, code="driver-version-mismatch",
                              message="the driver libraries in the container do not match the loaded kernel module",
                              fix="reboot the host after a driver update", evidence=evidence)
        if code == NVML_ERROR_DRIVER_NOT_LOADED:
            return GpuVerdict(ok=False, code="driver-not-loaded", message="the NVIDIA kernel module is not loaded on the host",
                              fix="load it (`modprobe nvidia`) or reinstall the driver; check `nvidia-smi` on the host",
                              evidence=evidence)
        return GpuVerdict(ok=False, code="nvml-failed", message=f"NVML failed inside the container: {nvml.get('error')}",
                          fix="run `docker run --rm --gpus all <image> nvidia-smi` to see the driver's own message", evidence=evidence)
    if set(seen) != set(planned):
        missing, extra = sorted(set(planned) - set(seen)), sorted(set(seen) - set(planned))
        return GpuVerdict(ok=False, code="wrong-devices",
                          message=f"the container sees {len(seen)} GPU(s), not the {len(planned)} planned"
                          + (f"; missing {', '.join(missing)}" if missing else "")
                          + (f"; not planned {', '.join(extra)}" if extra else ""),
                          fix="the engine maps other devices than the plan asks for: check the toolkit's configuration "
                          "(NVIDIA_VISIBLE_DEVICES set in the image, a default runtime that adds all GPUs)",
                          evidence=evidence, seen=seen)
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
        return GpuVerdict(ok=False, code="cuda-failed",
                          message=causes.get(ccode, f"the CUDA driver failed to initialise: {cuda.get('error')}"),
                          fix="run the recipe's image with a driver at least as new as its CUDA version; remove "
                          "CUDA_VISIBLE_DEVICES from the recipe's env (hostctl maps the GPUs)", evidence=evidence, seen=seen)
    cuda_seen = [u for u in cuda.get("uuids") or [] if u]
    if cuda_seen and set(cuda_seen) != set(planned):
        return GpuVerdict(ok=False, code="wrong-devices", message="CUDA sees other GPUs than NVML and the plan",
                          fix="remove CUDA_VISIBLE_DEVICES from the recipe's env", evidence=evidence, seen=seen)
    return GpuVerdict(ok=True, code="ok", message=f"the runtime image sees the {len(planned)} planned GPU(s)", fix=None, evidence=evidence, seen=seen)


def run_query(image: str, uuids: list[str]) -> GpuVerdict:
    """Run the device query in a one-second container (the only part here that acts)."""
    from hostctl import runner

    res = runner.run(query_argv(image, uuids), timeout=QUERY_TIMEOUT_S, new_session=True)
    if res.missing:
        return GpuVerdict(ok=False, code="no-docker", message="docker is not installed", fix="install Docker Engine")
    return decide(uuids, res.returncode, res.stdout, res.stderr, timed_out=res.timed_out)
