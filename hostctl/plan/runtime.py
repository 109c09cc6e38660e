"""Runtime spec: the container the plan describes — image, GPUs, network, memory caps, CPU set,
volumes, environment and the server's argv — assembled from the other plan sections.

Serve arguments come from the recipe, except the few hostctl owns because they describe
this host or its credentials (hostctl.serveflags: address, port, keys, served name, context).
Config validation refuses a recipe that sets one in any spelling; the two canonical ones it
accepts are handled here (`--max-model-len`, equal to the context, is dropped; `--hf-token` moves
to the environment). The profile binds 127.0.0.1 unless it opts in with an API key.
"""

from __future__ import annotations

from hostctl.config import PLACEHOLDER_RE, Config, ServeArgs
from hostctl.secrets import SECRET_FLAGS_TO_ENV
from hostctl.plan import codes
from hostctl.plan.records import (BoundPlaceholder, MemoryPlan, NcclPlan, PlacementPlan, RoleTarget, RuntimeSpec,
                                StoragePlan, Volume)
from hostctl.bytesizes import docker_size

SERVER = ["python3", "-m", "vllm.entrypoints.openai.api_server"]
MODEL_IN_CONTAINER = "/model"
MODELS_IN_CONTAINER = "/models"
CACHE_ENV = {"VLLM_CACHE_ROOT": "/root/.cache/vllm", "TRITON_CACHE_DIR": "/root/.cache/triton"}
NON_GPU_SHM = "1g"


def _bind(role: str, target: RoleTarget, where: str) -> BoundPlaceholder:
    on = f"drive {target.drive}" if target.drive else "a directory"
    return BoundPlaceholder(placeholder=f"{{{role}}}", field=where, container_path=target.container_path,
                            host_path=target.host_path, source=f"storage.{role}, {on}")


def _resolve(where: str, text: str, roles: dict[str, RoleTarget], models_dir: str | None,
             model: BoundPlaceholder | None, spec: RuntimeSpec, flag: str | None = None) -> str | None:
    """`text` with {planes_cache}, {expert_store}, {model} (`model`: the recipe's checkpoint, None when
    the plan has none, an error already) and {model:NAME} filled with their container paths,
    each binding recorded on the spec; None when the profile gives one no value: the storage plan has
    then said so for a role (storage.<role>.unnamed, naming this field), and this one for {model:NAME}.
    vLLM-MoET drops such a knob (bench/runner/common.py: build_env); hostctl refuses: the roles are
    hostctl's storage layout, and a dropped planes cache is rebuilt at every boot."""
    unresolved = False
    bound: list[BoundPlaceholder] = []

    def repl(m) -> str:
        nonlocal unresolved
        name = m.group(1)
        if m.group(0) == "{model}":
            if model is None:
                unresolved = True  # runtime.no_model_dir says why
                return m.group(0)
            bound.append(model.model_copy(update={"field": where}))
        elif name == "model" and models_dir:
            bound.append(BoundPlaceholder(placeholder=m.group(0), field=where,
                                          container_path=f"{MODELS_IN_CONTAINER}/{m.group(2)}",
                                          host_path=f"{models_dir.rstrip('/')}/{m.group(2)}",
                                          source="runtime.models_dir"))
        elif name == "model":
            spec.problem(codes.RUNTIME_MODELS_DIR_UNSET, "error",
                         f"{where}: {m.group(0)} has no value: the profile sets no runtime.models_dir",
                         fix=f"set runtime.models_dir to the host directory that holds {m.group(2)}/")
            unresolved = True
            return m.group(0)
        elif name in roles:
            bound.append(_bind(name, roles[name], where))
        else:
            unresolved = True  # storage.<name>.unnamed names this field
            return m.group(0)
        return bound[-1].container_path

    out = PLACEHOLDER_RE.sub(repl, text)
    if unresolved:
        return None
    for b in bound:
        spec.placeholders.append(b)
    if bound:
        spec.decide(where, f"{flag} {out}" if flag else out,
                    "; ".join(f"{b.placeholder} is {b.container_path} in the container, bound from {b.host_path} "
                              f"({b.source})" for b in bound))
    return out


def plan_runtime(config: Config, memory: MemoryPlan, placement: PlacementPlan, nccl: NcclPlan,
                 storage: StoragePlan) -> RuntimeSpec:
    profile, recipe = config.profile, config.recipe
    settings = profile.runtime
    image = settings.image or recipe.image or ""
    gpus = bool(placement.gpus)
    spec = RuntimeSpec(
        project=settings.project,
        image=image,
        api_host=settings.api_host,
        api_port=settings.api_port,
        api_key_env=settings.api_key_env,
        ipc="host" if gpus else "private",
        shm_size=None if gpus else NON_GPU_SHM,
        health_start_period_s=recipe.load_timeout_s,
        load_timeout_s=recipe.load_timeout_s,
        hang_timeout_s=recipe.hang_timeout_s,
        gpu_uuids=[g.uuid for g in placement.gpus],
        labels={"io.hostctl.profile": profile.name, "io.hostctl.recipe": recipe.id, "io.hostctl.phase": profile.phase},
    )
    if not image:
        spec.problem(codes.RUNTIME_NO_IMAGE, "error", "no runtime image: the recipe names none and the profile does not override it",
                     fix="set runtime.image in the profile")
    spec.decide("image", image or "-", "profile runtime.image" if settings.image else "the recipe's image")
    if gpus:
        spec.decide("IPC", "host", "tensor-parallel workers and NCCL share memory through /dev/shm; Docker ignores "
                    "shm_size under host IPC, so doctor checks the host's /dev/shm instead")
    else:
        spec.decide("IPC", f"private, shm {NON_GPU_SHM}", "no GPUs: a private IPC namespace with its own /dev/shm")
    spec.decide("network", f"host, API on {settings.api_host}:{settings.api_port}",
                "host networking (no Docker bridge); " + (
                    "the profile opts in to an exposed address with an API key" if settings.exposed
                    else "loopback only, so nothing outside this machine reaches the API"))

    if memory.limit_bytes:
        spec.mem_limit = docker_size(memory.limit_bytes)
        spec.mem_reservation = docker_size(memory.reservation_bytes or memory.limit_bytes)
        spec.memswap_limit = docker_size(memory.ram_swap_bytes or memory.limit_bytes)
    spec.cpuset = placement.cpuset
    spec.cap_add = dict(placement.cap_add)

    # Volumes.
    model_path = recipe.model
    if settings.model_dir:
        spec.volumes.append(Volume(source=settings.model_dir, target=MODEL_IN_CONTAINER, read_only=True,
                                   why="the checkpoint, read-only"))
        model_path = MODEL_IN_CONTAINER
    elif not recipe.model.startswith("/"):
        spec.problem(codes.RUNTIME_NO_MODEL_DIR, "error", f"the recipe's model {recipe.model!r} is not a path and the profile sets no runtime.model_dir",
                     fix="set runtime.model_dir to the checkpoint's directory on the host")
    if settings.models_dir:
        spec.volumes.append(Volume(source=settings.models_dir, target=MODELS_IN_CONTAINER, read_only=True,
                                   why="extra models named as {model:NAME}"))
    for target in storage.roles:
        spec.volumes.append(Volume(source=target.host_path, target=target.container_path,
                                   why=target.role.replace("_", " ")))
    roles = {t.role: t for t in storage.roles}
    model = None  # what a bare {model} means: the checkpoint the server loads
    if settings.model_dir:
        model = BoundPlaceholder(placeholder="{model}", field="", container_path=MODEL_IN_CONTAINER,
                                 host_path=settings.model_dir, source="runtime.model_dir")
    elif recipe.model.startswith("/"):
        model = BoundPlaceholder(placeholder="{model}", field="", container_path=recipe.model,
                                 host_path=recipe.model, source="a path inside the runtime image, nothing bound")
    store = storage.role("expert_store")
    for rank in storage.rank_stores:
        for name in rank.files:
            spec.volumes.append(Volume(source=f"{rank.host_dir}/{name}", target=f"{store.container_path}/{name}",
                                       why=f"rank {rank.rank}'s store file, read from drive {rank.drive}"))
    spec.required_mounts = list(storage.required_mounts)

    # Environment: the profile's (a box's env), then the recipe's over it (vLLM-MoET's merge order:
    # the recipe wins), then what this host's plan decides (it wins, and says so).
    for key, value in settings.env.items():
        spec.env[key] = value
        spec.env_sources[key] = "profile"
    for key, raw in recipe.env.items():
        value = _resolve(f"env.{key}", _env_text(raw), roles, settings.models_dir, model, spec)
        if value is None:
            continue  # an error on the plan, which nothing renders or starts
        if spec.env_sources.get(key) == "profile" and spec.env[key] != value:
            spec.decide(f"env {key}", value, f"the profile says {spec.env[key]}; the recipe's value wins")
        spec.env[key] = value
        spec.env_sources[key] = "recipe"
    if settings.env:
        spec.decide("profile env", ", ".join(sorted(k for k, src in spec.env_sources.items() if src == "profile"))
                    or "none", "the profile's runtime.env, under the recipe's (values in runtime.env, mode 0600)")
    passed = sorted(k for k, src in spec.env_sources.items() if src == "recipe")
    # Names only: the values go to runtime.env (0600), and a name is what says what it changes.
    spec.decide("recipe env", ", ".join(passed) if passed else "none",
                "the recipe's environment variables, passed to the runtime as it sets them (values in runtime.env, "
                "mode 0600); names hostctl owns or that change what runs, listens or authenticates are refused")
    for source, env in (("nccl", nccl.env), ("placement", placement.env), ("cache", CACHE_ENV)):
        for key, value in env.items():
            if key in spec.env and spec.env[key] != value:
                spec.decide(f"env {key}", value, f"the recipe says {spec.env[key]}; the {source} plan decides for this host")
            spec.env[key] = value
            spec.env_sources[key] = source

    # Server argv.
    args = recipe.args()
    kept: list[tuple[str, str | None]] = []
    for i, (flag, value) in enumerate(args.pairs):
        if flag in SECRET_FLAGS_TO_ENV and value is not None:
            # A secret on the command line shows in compose.yaml, `ps` and `docker inspect`; the
            # runtime reads the same value from its environment (the 0600 env file).
            var = SECRET_FLAGS_TO_ENV[flag]
            spec.env[var] = value
            spec.env_sources[var] = "recipe"
            spec.decide(flag, f"moved to the environment as {var}",
                        "a secret goes only to runtime.env (mode 0600), never into compose.yaml or the argv")
            continue
        if flag == "--max-model-len":
            continue  # config checked it equals the context, which hostctl passes itself
        if value is not None:
            value = _resolve(f"serve_args[{i}]", value, roles, settings.models_dir, model, spec, flag)
            if value is None:
                continue  # an error on the plan, which nothing renders or starts
        kept.append((flag, value))
    for flag in nccl.serve_flags:
        if flag not in {f for f, _ in kept}:
            kept.append((flag, None))
    spec.command = SERVER + [
        "--model", model_path,
        "--served-model-name", recipe.served_name,
        "--host", settings.api_host,
        "--port", str(settings.api_port),
        "--max-model-len", str(recipe.context),
    ] + ServeArgs(kept).argv()
    if settings.api_key_env:
        spec.decide("API key", f"${settings.api_key_env} -> VLLM_API_KEY",
                    "passed through the environment at start, never written into rendered files")
    return spec


def _env_text(value: object) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)
