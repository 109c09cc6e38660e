"""Docker checks: the engine is reachable, it has the `nvidia` runtime when GPUs serve, Compose
v2 is installed, and the API port is free or held by hostctl's own runtime container. They
read EngineFacts and PortFacts."""

from __future__ import annotations

from hostctl.doctor.registry import CheckContext, CheckResult, check, failed, passed, skipped, warned

ENGINE = "Docker Engine API (/info) over the engine's socket"


def _needs_engine(ctx: CheckContext):
    """fail with a profile (the runtime runs in Docker); warn without one (nothing is known to need it)."""
    return failed if ctx.config is not None else warned


@check("docker.engine", "Docker engine reachable")
def engine(ctx: CheckContext) -> CheckResult:
    e = ctx.facts.engine
    if e.available:
        return passed(f"engine {e.version} (API {e.api_version}), cgroup v{e.cgroup_version or '?'} "
                      f"({e.cgroup_driver or '?'})", source=ENGINE)
    return _needs_engine(ctx)(f"unreachable: {e.reason}", fix="install Docker Engine and start it "
                              "(systemctl enable --now docker); run hostctl as root or as a member of the docker group",
                              expected="a reachable engine", source=ENGINE)


def _no_gpu_container(ctx: CheckContext, why_not: str) -> CheckResult | None:
    """The skip of a check about GPU containers where there is none to judge, or None."""
    if ctx.plan is not None and not ctx.plan.runtime.gpu_uuids:
        return skipped("the runtime uses no GPU")
    if ctx.plan is None and not ctx.facts.gpus.available:
        return skipped(f"no GPU here, {why_not}")
    if not ctx.facts.engine.available:
        return skipped(f"the engine is unreachable: {ctx.facts.engine.reason}")
    return None


@check("docker.runtime.nvidia", "the engine has the nvidia runtime")
def nvidia_runtime(ctx: CheckContext) -> CheckResult:
    e = ctx.facts.engine
    if (skip := _no_gpu_container(ctx, "so containers need no nvidia runtime")) is not None:
        return skip
    observed = f"runtimes: {', '.join(e.runtimes) or 'none'} (default {e.default_runtime})"
    if "nvidia" in e.runtimes:
        return passed(observed, observed, "nvidia among the runtimes", ENGINE)
    make = failed if ctx.plan is not None else warned
    return make("the engine has no nvidia runtime: the runtime's GPU request (Compose `gpus:`) cannot be met",
                fix="install the NVIDIA Container Toolkit, run `nvidia-ctk runtime configure --runtime=docker`, then "
                "`systemctl restart docker`", observed=observed, expected="nvidia among the runtimes", source=ENGINE)


@check("docker.cgroup_driver", "the engine's cgroup driver and the daemon-reload risk")
def cgroup_driver(ctx: CheckContext) -> CheckResult:
    """Under the systemd cgroup driver a `systemctl daemon-reload` can take a running GPU
    container's devices away ("Failed to initialize NVML: Unknown Error" inside it;
    NVIDIA/nvidia-container-toolkit#48 and the toolkit's troubleshooting guide)."""
    e = ctx.facts.engine
    if (skip := _no_gpu_container(ctx, "so no GPU container is at risk")) is not None:
        return skip
    observed = f"cgroup driver {e.cgroup_driver or 'unknown'}, cgroup v{e.cgroup_version or '?'}"
    if e.cgroup_driver == "systemd":
        return warned("a `systemctl daemon-reload` (a package upgrade runs one) can take the GPUs away from the "
                      "running runtime under the systemd cgroup driver; `hostctl provision --only system` does not "
                      "reload while the GPU runtime is up, other tools do",
                      fix="create the /dev/char links the toolkit needs and keep them at boot: `nvidia-ctk system "
                      "create-dev-char-symlinks --create-all` with its udev rule (NVIDIA/nvidia-container-toolkit#48), "
                      "or set `\"exec-opts\": [\"native.cgroupdriver=cgroupfs\"]` in /etc/docker/daemon.json and "
                      "restart docker", observed=observed, expected="cgroupfs, or systemd with the /dev/char links",
                      source=ENGINE)
    if e.cgroup_driver == "cgroupfs":
        return passed(f"{observed}: a daemon-reload does not rewrite the containers' device cgroups", observed,
                      "cgroupfs, or systemd with the /dev/char links", ENGINE)
    return skipped(f"the engine reports no cgroup driver ({observed})", source=ENGINE)


@check("docker.compose", "Compose v2 installed")
def compose(ctx: CheckContext) -> CheckResult:
    e = ctx.facts.engine
    source = "docker compose version --short (the CLI plugin)"
    if e.compose_version:
        major = e.compose_version.split(".")[0]
        if major.isdigit() and int(major) >= 2:
            return passed(f"Compose {e.compose_version}", source=source)
        return _needs_engine(ctx)(f"Compose {e.compose_version} is not v2", fix="install the Compose v2 plugin "
                                  "(docker-compose-plugin)", expected=">= 2", source=source)
    return _needs_engine(ctx)(f"unavailable: {e.compose_reason}", fix="install the Compose v2 CLI plugin "
                              "(docker-compose-plugin, or the docker-compose binary in /usr/local/lib/docker/cli-plugins)",
                              expected="Compose v2", source=source)


@check("docker.api_port", "API port free or held by our runtime")
def api_port(ctx: CheckContext) -> CheckResult:
    if ctx.plan is None:
        return ctx.no_profile("the API address is unknown")
    rt = ctx.plan.runtime
    address = f"{rt.api_host}:{rt.api_port}"
    pf = ctx.facts.port(rt.api_port)
    source = "/proc/net/tcp, /proc/net/tcp6 (LISTEN), the holder's /proc/<pid>/fd and cgroup"
    if pf is None:
        return skipped(f"{address} was not probed (the facts describe no such port)")
    if pf.listening is None:
        return skipped(f"cannot tell whether {address} is taken: {pf.reason}", source=source)
    if not pf.listening:
        return passed(f"{address} is free", source=source)
    ours = ctx.runtime_containers()
    holder = f"PID {pf.pid} ({pf.process or '?'})" if pf.pid else "a process hostctl cannot see"
    observed = f"{pf.listen_address}:{pf.port} listened on by {holder}" + (
        f" in container {pf.container_id[:12]}" if pf.container_id else "")
    mine = next((c for c in ours if pf.container_id and c.id.startswith(pf.container_id[:12])), None)
    if mine is not None:
        return passed(f"{address} is held by our runtime container {mine.name} ({mine.state})", observed,
                      "free, or held by hostctl's runtime", source)
    running = [c for c in ours if c.state == "running"]
    if pf.pid is None and running:
        return passed(f"{address} is taken, most likely by our running runtime container {running[0].name} "
                      "(the listener's process is not visible: run as root to be sure)", observed,
                      "free, or held by hostctl's runtime", source)
    return failed(f"{address} is taken by {holder}" + (f" in container {pf.container_id[:12]}" if pf.container_id else ""),
                  fix="stop that process, or move the API: runtime.api_port in the profile", observed=observed,
                  expected="free, or held by hostctl's runtime", source=source)


CHECKS = (engine, nvidia_runtime, cgroup_driver, compose, api_port)
