"""Checks `hostctl up` makes before it starts anything: the engine and Compose answer, the plan
has no errors, the image is here, every directory the container binds exists on a real
filesystem (not overlayfs or tmpfs, where a store would silently live in RAM or a container
layer) with room to write, and the API port is free. Each failure says what was found and
what to do; nothing has been started when one fails. The checkpoint, when it lives on this host,
gets `hostctl model verify --quick` (README "model"): present, every indexed shard there at the
manifest's size, the pinned revision.
"""

from __future__ import annotations

import os

from pydantic import Field

from hostctl.data import Data
from hostctl.config import Config
from hostctl.facts.records import HostFacts, PortFacts
from hostctl.facts.mounts import probe_path, read_mountinfo
from hostctl.facts.ports import probe_port
from hostctl.plan.records import Plan
from hostctl.plan.storage import NOT_A_REAL_FS
from hostctl.service import identity
from hostctl.bytesizes import GIB, fmt_gib

MIN_FREE_WRITABLE = 1 * GIB  # compile caches and logs need some room even when serving


class Failure(Data):
    id: str
    message: str
    fix: str
    details: list[str] = Field(default_factory=list)


def api_address(plan: Plan) -> tuple[str, int]:
    return identity.api_address(plan.runtime.api_host, plan.runtime.api_port)


def endpoint(plan: Plan) -> str:
    return identity.endpoint_url(plan.runtime.api_host, plan.runtime.api_port)


def port_owner(pf: PortFacts) -> str | None:
    """None when nothing listens on the port; otherwise who does, as well as the facts tell."""
    if not pf.listening:
        return None
    if pf.pid is None:
        return f"a process not visible here ({pf.reason or 'run as root to see whose'})"
    who = f"pid {pf.pid}" + (f" ({pf.process})" if pf.process else "")
    return who + (f" in container {pf.container_id[:12]}" if pf.container_id else "")


def check_engine(facts: HostFacts) -> list[Failure]:
    e = facts.engine
    out = []
    if not e.available:
        out.append(Failure(id="docker-unreachable", message=f"the Docker engine does not answer: {e.reason}",
                           fix="start it (systemctl start docker, or .ci/start-docker on a test machine)"))
    if not e.compose_version:
        out.append(Failure(id="compose-missing", message=f"Docker Compose v2 is not available: {e.compose_reason}",
                           fix="install the Compose v2 CLI plugin (docker-compose-plugin, or see .ci/run)"))
    return out


def check_plan(plan: Plan) -> list[Failure]:
    if not plan.errors:
        return []
    return [Failure(id="plan-errors", message="the plan has errors: the host cannot serve this recipe as configured",
                    fix="fix the problems listed (`hostctl plan` explains each decision)",
                    details=[f"[{p.area}] {p.message}" + (f" (fix: {p.fix})" if p.fix else "") for p in plan.errors])]


def check_image(image: str) -> list[Failure]:
    from hostctl.images import DEMO_REPO, demo_staleness
    from hostctl.facts.container import image_id

    if image_id(image) is None:
        fix = ("build it: python3 -m hostctl.images build" if image.startswith(DEMO_REPO + ":")
               else "build the runtime image (runtime/sm120/Dockerfile, see runtime/README.md) or set runtime.image")
        return [Failure(id="image-missing", message=f"the runtime image {image} is not in the local engine "
                        "(hostctl never pulls)", fix=fix)]
    stale = demo_staleness(image)
    if stale is not None:
        return [Failure(id="image-stale-warning", message=f"{image} was built from other inputs (hash {stale.current}) than this "
                        f"checkout's ({stale.expected})", fix="rebuild it: python3 -m hostctl.images build")]
    return []


def check_dirs(config: Config, plan: Plan) -> list[Failure]:
    out: list[Failure] = []
    mounts = [line.entry for line in read_mountinfo()]
    conversion_need = int(config.recipe.conversion.cache_free_gib * GIB) if config.profile.phase == "converting" else 0
    for v in plan.runtime.volumes:
        if not os.path.exists(v.source):
            out.append(Failure(
                id="store-missing", message=f"{v.why}: {v.source} does not exist",
                fix="create it on the intended drive (`hostctl provision --only storage` makes the cache directories) "
                "and mount that drive; hostctl never lets Docker create it empty on the root filesystem, where the "
                "runtime would silently fill it",
            ))
            continue
        if not os.path.isdir(v.source):
            continue  # a single store file bound over the shared store: its drive is checked by its directory
        pf = probe_path(v.source, False, mounts)
        if pf.fs_type in NOT_A_REAL_FS:
            out.append(Failure(
                id="store-not-real-fs", message=f"{v.why}: {v.source} is on {pf.fs_type} ({pf.mount_target}): its contents "
                "would live in RAM or in a container layer", fix="put it on a real filesystem (a provisioned drive) "
                "and point the profile's storage roles there"))
            continue
        if v.read_only or pf.free_bytes is None:
            continue
        need = MIN_FREE_WRITABLE
        if conversion_need and v.target in ("/planes", "/packs"):
            need = max(need, conversion_need)
        if pf.free_bytes < need:
            out.append(Failure(id="store-full", message=f"{v.why}: {v.source} has {fmt_gib(pf.free_bytes)} free; "
                               f"{fmt_gib(need)} is needed", fix="free space there or move this role to a larger drive "
                               "(ENOSPC mid-start otherwise)"))
    for mount in plan.runtime.required_mounts:
        if not any(m.target == mount for m in mounts):
            out.append(Failure(id="mount-missing", message=f"{mount} is not mounted: the cache drive did not come up",
                               fix=f"mount {mount} (hostctl provision --only storage), then run up again"))
    return out


def check_model(config: Config, say=None) -> list[Failure]:
    """The quick verify of the checkpoint (hostctl/model/verify.py); a model inside the image has
    nothing to verify, and a checkpoint hostctl did not pull is checked for presence only."""
    from hostctl.errors import InputError
    from hostctl.facts.checkpoint import probe_checkpoint
    from hostctl.model.resolve import load_ref
    from hostctl.model.verify import judge

    try:
        ref = load_ref(config)
    except InputError as exc:
        return [Failure(id="model-unresolved", message=exc.message, fix=exc.fix or "correct the recipe's model", details=exc.details)]
    if ref.kind == "image" or not ref.model_dir:
        if say is not None and ref.kind == "image":
            say(f"model: {ref.model} is inside the image, nothing to verify")
        return []
    verdict = judge(ref, probe_checkpoint(ref.model_dir), "quick")
    for w in verdict.warnings:
        if say is not None:
            say(f"warning: model: {w}")
    if verdict.ok:
        if say is not None:
            say(f"model: {ref.describe()}: quick verify passed ({len(verdict.files)} files)")
        return []
    return [Failure(id="model-checkpoint", message=f"the checkpoint in {ref.model_dir} failed the quick verify: "
                    + "; ".join(verdict.problems), fix=verdict.fix or "hostctl model verify",
                    details=[f.line() for f in verdict.bad_files[:10]])]


def check_port(plan: Plan) -> list[Failure]:
    """Re-read, at start time, with the same probe as the facts (hostctl/facts/ports.py): a
    listener on the runtime's bind address (or on the wildcard) takes the port."""
    host, port = api_address(plan)
    owner = port_owner(probe_port(plan.runtime.api_host, port))
    if owner is None:
        return []
    return [Failure(id="port-taken", message=f"the API port {host}:{port} is already taken by {owner}",
                    fix="stop that process, or set runtime.api_port in the profile to a free port")]


def check_gpus_in_image(plan: Plan, run_query=None) -> list[Failure]:
    """With GPUs planned: a one-second container from the runtime image must see exactly them
    (hostctl.service.gpu_preflight). Unexercised where no machine has Docker and a GPU."""
    if not plan.runtime.gpu_uuids:
        return []
    from hostctl.service import gpu_preflight

    verdict = (run_query or gpu_preflight.run_query)(plan.runtime.image, plan.runtime.gpu_uuids)
    if verdict.ok:
        return []
    return [Failure(id=f"gpu-{verdict.code}", message=verdict.message, fix=verdict.fix or "", details=verdict.evidence)]
