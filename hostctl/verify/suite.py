"""The checks `hostctl verify` runs, generated from the plan: for each part, first the
convergence proof (the part's own pure decide() on fresh facts and files yields no action, as
after `provision`), then what a person would check by hand, read through testinfra on the
target: mounts with their sources and options, swaps with their priorities, the fstab block,
the sysctl file and live values, the cache directories, the installed profile and units and
their enablement, the GPU power limits enforced (NVML, through the facts), the runtime container
running with its caps, and its endpoint answering /health and /v1/models with the served name.

A check is a value (id, part, kind, what it checks) with a function that returns pass, fail or
skip (with the reason); listing the suite needs no access to the host.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Literal

from hostctl.data import Data
from hostctl.config import Config
from hostctl.errors import HostctlError
from hostctl.facts.records import HostFacts
from hostctl.plan.records import Plan
from hostctl.bytesizes import docker_size, parse_size

Status = Literal["pass", "fail", "skip", "not-run"]
PARTS = ("storage", "system", "gpu", "runtime")
HIDDEN_OPTIONS = {"defaults", "auto", "noauto", "nofail", "rw", "user_xattr", "acl", "_netdev"}


class VerifyResult(Data):
    status: Status
    found: str
    expected: str | None = None
    fix: str | None = None


def ok(found: str) -> VerifyResult:
    return VerifyResult(status="pass", found=found)


def bad(found: str, expected: str | None = None, fix: str | None = None) -> VerifyResult:
    return VerifyResult(status="fail", found=found, expected=expected, fix=fix)


def skip(why: str) -> VerifyResult:
    return VerifyResult(status="skip", found=why)


class VerifyCheck:
    """One check of `verify`: a plain class, it holds the function that runs it."""

    def __init__(self, id: str, part: str, kind: Literal["convergence", "testinfra", "nvml"], title: str,
                 run: Callable[[Ctx], VerifyResult]) -> None:
        self.id, self.part, self.kind, self.title, self.run = id, part, kind, title, run


class Ctx:
    """What the checks read: the profile, the target's facts and plan, the connection (a plain
    class: it holds the open connection and a cache of what the checks computed)."""

    def __init__(self, *, config: Config, facts: HostFacts, plan: Plan, target: Any) -> None:
        self.config = config
        self.facts = facts
        self.plan = plan
        self.target = target  # hostctl.verify.connection.Target
        self._cache: dict[str, Any] = {}

    def storage(self):
        """The storage decision on fresh facts and files (computed once; several checks read it)."""
        if "storage" not in self._cache:
            from hostctl.provision import storage
            from hostctl.provision.storage_part import read_system_files

            files = read_system_files(self.config, self.facts, self.target)
            self._cache["storage"] = storage.decide(self.config, self.facts, files, storage.StorageOptions())
        return self._cache["storage"]


# ---------------------------------------------------------------- convergence


def _actions_left(d) -> VerifyResult:
    if d.refusals:
        return bad("; ".join(f"{r.id}: {r.reason}" for r in d.refusals), "no drive refused",
                   "see `hostctl provision --dry-run`")
    if d.actions or d.pending:
        listed = "; ".join(f"{a.id}: {a.describe.splitlines()[0]}" for a in d.actions[:6])
        more = f" (and {len(d.actions) - 6} more)" if len(d.actions) > 6 else ""
        return bad(f"a fresh decide yields {len(d.actions)} action(s): {listed}{more}", "no action",
                   f"run `hostctl provision --only {d.part}` (or --dry-run to read the whole plan)")
    if d.failures:
        return bad("; ".join(d.failures), "no failure")
    return ok(f"a fresh decide on this host's facts yields no action ({len(d.settled)} item(s) as desired)")


def _converged(part: str) -> Callable[[Ctx], VerifyResult]:
    def run(ctx: Ctx) -> VerifyResult:
        try:
            if part == "storage":
                d = ctx.storage()
            elif part == "system":
                from hostctl.provision import system

                d = system.decide(ctx.config, ctx.plan, system.read_system(ctx.config, ctx.plan, ctx.target))
            else:
                from hostctl.provision import gpu

                snap = gpu.read_gpu(ctx.config, ctx.facts, ctx.target, look_for_torch=False, read_acs=False)
                d = gpu.decide(ctx.config, snap, hostctl_bin=_power_unit_bin(ctx))
        except HostctlError as exc:
            return bad(exc.message, "the part decides without an error", exc.fix)
        return _actions_left(d)

    return run


# ---------------------------------------------------------------- storage


def _verdict(ctx: Ctx, name: str):
    sp = ctx.storage().detail
    return next(v for v in sp.drives if v.drive.name == name)


def _same_device(ctx: Ctx, a: str, b: str) -> bool:
    if a == b:
        return True
    r = ctx.target.cmd("readlink -f -- %s %s", a, b)
    lines = r.stdout.split()
    return r.rc == 0 and len(lines) == 2 and lines[0] == lines[1]


def _mount(name: str) -> Callable[[Ctx], VerifyResult]:
    def run(ctx: Ctx) -> VerifyResult:
        drive = ctx.config.profile.drive(name)
        v = _verdict(ctx, name)
        if v.refused or "data" not in v.fs_facts:
            return bad(f"drive {name} is not laid out here: {'; '.join(v.reasons) or v.found}",
                       f"hostctl-data-{name} mounted at {drive.mount}", "hostctl provision --only storage")
        device = v.fs_facts["data"][0]
        mp = ctx.target.host.mount_point(drive.mount)
        if not mp.exists:
            return bad(f"nothing is mounted at {drive.mount}", f"{device} ({drive.filesystem}) mounted there",
                       f"`mount {drive.mount}` (fstab has it), or hostctl provision --only storage")
        want_opts = ["noatime", *[o for o in drive.mount_options if o != "defaults"]]
        found = f"{mp.device} ({mp.filesystem}, {','.join(mp.options)}) at {drive.mount}"
        if not _same_device(ctx, mp.device, device) or mp.filesystem != drive.filesystem:
            return bad(found, f"{device} ({drive.filesystem}) at {drive.mount}", "unmount it and run provision")
        # fstab-only words and defaults the kernel does not list in /proc/mounts are not looked for
        missing = [o for o in want_opts if o not in mp.options and o not in HIDDEN_OPTIONS]
        if missing:
            return bad(found, f"options {','.join(want_opts)}", "remount with the profile's options (provision)")
        return ok(found)

    return run


def _swaps(ctx: Ctx) -> dict[str, int]:
    if "swaps" not in ctx._cache:
        text = ctx.target.cmd("cat /proc/swaps").stdout
        out: dict[str, int] = {}
        for line in text.splitlines()[1:]:
            fields = line.split()
            if len(fields) >= 5:
                out[fields[0]] = int(fields[4])
        ctx._cache["swaps"] = out
    return ctx._cache["swaps"]


def _swap(name: str) -> Callable[[Ctx], VerifyResult]:
    def run(ctx: Ctx) -> VerifyResult:
        drive = ctx.config.profile.drive(name)
        v = _verdict(ctx, name)
        want = f"swap on hostctl-swap-{name} at priority {drive.swap_priority}"
        if v.refused or "swap" not in v.fs_facts:
            return bad(f"drive {name} is not laid out here", want, "hostctl provision --only storage")
        device = v.fs_facts["swap"][0]
        active = _swaps(ctx)
        hit = next((d for d in active if _same_device(ctx, d, device)), None)
        if hit is None:
            return bad(f"{device} is not active swap (active: {', '.join(active) or 'none'})", want,
                       f"`swapon --priority {drive.swap_priority} {device}`, or hostctl provision --only storage")
        if active[hit] != drive.swap_priority:
            return bad(f"{device} is active at priority {active[hit]}", want, "hostctl provision --only storage")
        return ok(f"{device} active at priority {active[hit]}")

    return run


def _fstab(ctx: Ctx) -> VerifyResult:
    from hostctl.provision import fstab

    sp = ctx.storage().detail
    if sp.refused or sp.replan:
        return bad("the drives are not all laid out, so the block cannot be judged", "hostctl's block", None)
    entries = [e for v in sorted(sp.drives, key=lambda v: v.drive.mount.count("/")) for e in v.entries]
    text = (ctx.target.read_bytes(fstab.FSTAB) or b"").decode(errors="replace")
    try:
        block = fstab.current_block(text)
    except HostctlError as exc:
        return bad(exc.message, fix=exc.fix)
    want = [e.line() for e in entries]
    if block != want:
        return bad(f"{fstab.FSTAB} block: {block or 'none'}", f"{want}", "hostctl provision --only storage")
    return ok(f"{fstab.FSTAB}: hostctl's block holds {len(want)} line(s), by UUID with nofail")


def _sysctl_file(ctx: Ctx) -> VerifyResult:
    from hostctl.provision import sysctl

    profile = ctx.config.profile
    want = sysctl.render(profile, sysctl.desired(profile))
    got = ctx.target.read_bytes(sysctl.SYSCTL_FILE)
    if got is None:
        return bad(f"{sysctl.SYSCTL_FILE} does not exist", "hostctl's swap sysctl file", "hostctl provision --only storage")
    if got.decode(errors="replace") != want:
        return bad(f"{sysctl.SYSCTL_FILE} differs from what the profile renders", want.strip().splitlines()[-1],
                   "hostctl provision --only storage")
    return ok(f"{sysctl.SYSCTL_FILE} holds the swap sysctls for phase {profile.phase}")


def _sysctl_live(key: str) -> Callable[[Ctx], VerifyResult]:
    def run(ctx: Ctx) -> VerifyResult:
        from hostctl.provision import sysctl

        want = sysctl.desired(ctx.config.profile)[key]
        got = ctx.target.host.sysctl(key)
        if got != want:
            return bad(f"{key} = {got}", f"{key} = {want}", f"`sysctl -w {key}={want}`, or hostctl provision --only storage")
        return ok(f"{key} = {got}")

    return run


def _dir(directory: str, mount: str | None) -> Callable[[Ctx], VerifyResult]:
    """A role's directory: on its drive's filesystem (mount), or a plain one under the sysroot."""

    def run(ctx: Ctx) -> VerifyResult:
        st = ctx.target.stat(directory) if mount is None else ctx.target.stat_real(directory)
        if st is None or not st.is_dir:
            return bad(f"{directory} does not exist", "a directory", "hostctl provision --only storage")
        found = f"{directory} is a directory (owner {st.uid}:{st.gid})"
        if mount is not None:
            on = ctx.target.cmd("findmnt -n -o TARGET -T %s", directory).stdout.strip()
            if on != mount:
                return bad(f"{found} on {on or '?'}", f"on the drive's filesystem at {mount}",
                           "mount the drive (the directory would fill the filesystem below it)")
            found += f" on {mount}"
        return ok(found)

    return run


# ---------------------------------------------------------------- system


def _file(host_path: str, data: bytes) -> Callable[[Ctx], VerifyResult]:
    def run(ctx: Ctx) -> VerifyResult:
        import hashlib

        got = ctx.target.read_bytes(host_path)
        if got is None:
            return bad(f"{host_path} does not exist", f"{len(data)} bytes", "hostctl provision --only system")
        if got != data:
            return bad(f"{host_path}: sha256 {hashlib.sha256(got).hexdigest()[:12]}…",
                       f"sha256 {hashlib.sha256(data).hexdigest()[:12]}… (what this profile renders)",
                       "hostctl provision --only system")
        return ok(f"{host_path} holds what the profile renders ({len(data)} bytes)")

    return run


def _enabled(unit: str) -> Callable[[Ctx], VerifyResult]:
    def run(ctx: Ctx) -> VerifyResult:
        from hostctl.facts.sysfiles import systemctl_argv

        rc, out = ctx.target.run(systemctl_argv(ctx.target.sysroot, "is-enabled", unit))
        state = out.strip() or f"exit {rc}"
        if rc == 127:
            return bad("systemctl is not installed", "enabled")
        if state != "enabled":
            return bad(f"{unit} is {state}", "enabled", "hostctl provision --only system")
        return ok(f"{unit} is enabled")

    return run


# ---------------------------------------------------------------- gpu


def _power_unit_bin(ctx: Ctx) -> str | None:
    """The hostctl the installed power unit calls (provision writes the one it ran as)."""
    from hostctl.provision.gpu import UNIT_PATH

    text = (ctx.target.read_bytes(UNIT_PATH) or b"").decode(errors="replace")
    for line in text.splitlines():
        if line.startswith("ExecStart="):
            return line.removeprefix("ExecStart=").split()[0]
    return None


def _power_unit(ctx: Ctx) -> VerifyResult:
    from hostctl.provision.gpu import UNIT_NAME, UNIT_PATH, WANTS_LINK, render_power_unit
    from hostctl.service.render import INSTALLED_PROFILE

    binary = _power_unit_bin(ctx)
    if binary is None:
        return bad(f"{UNIT_PATH} does not exist (or has no ExecStart)", "hostctl's power unit",
                   "hostctl provision --only gpu")
    want = render_power_unit(ctx.plan, hostctl_bin=binary, config_path=INSTALLED_PROFILE)
    if (ctx.target.read_bytes(UNIT_PATH) or b"").decode(errors="replace") != want:
        return bad(f"{UNIT_PATH} differs from what this profile renders", "the rendered unit",
                   "hostctl provision --only gpu")
    if ctx.target.stat_real(binary) is None:
        return bad(f"the unit calls {binary}, which does not exist", "an installed hostctl",
                   "re-run `hostctl provision --only gpu` with the installed hostctl")
    from hostctl.facts.sysfiles import systemctl_argv, systemd_running

    if systemd_running(ctx.target):
        rc, out = ctx.target.run(systemctl_argv("/", "is-enabled", UNIT_NAME))
        enabled = out.strip() == "enabled"
    else:
        enabled = ctx.target.readlink(WANTS_LINK) == UNIT_PATH
    if not enabled:
        return bad(f"{UNIT_NAME} is not enabled", "enabled for multi-user.target", "hostctl provision --only gpu")
    return ok(f"{UNIT_PATH} is current and enabled; it calls {binary}")


def _power(index: int) -> Callable[[Ctx], VerifyResult]:
    def run(ctx: Ctx) -> VerifyResult:
        from hostctl.plan.power import TOLERANCE_W, desired_limit

        gpus = ctx.facts.gpus
        if not gpus.available:
            return skip(f"no driver: {gpus.reason}")
        gpu = gpus.by_index(index)
        if gpu is None:
            return bad(f"no GPU {index} on this host", "the GPU the plan names")
        want = desired_limit(ctx.config, gpu.index, gpu.uuid)
        if want is None:
            return skip("the profile sets no limit for this GPU")
        enforced = gpu.power.enforced_w
        found = f"GPU {index} ({gpu.uuid}): limit {gpu.power.limit_w:g} W, enforced {enforced:g} W" \
            if enforced is not None and gpu.power.limit_w is not None else f"GPU {index}: limit unknown"
        if enforced is None or abs(enforced - want) > TOLERANCE_W:
            return bad(found, f"{want:g} W enforced", "hostctl provision --only gpu (another limiter may be lower)")
        return ok(found + " (NVML)")

    return run


# ---------------------------------------------------------------- runtime

# Runs on the target (this machine, or the --host over ssh), so it can read the target's own
# socket tables: the same proof hostctl.service.apipeer makes for its local clients (the server
# end of this very connection must be root's: the runtime's container) is made here before the
# key is sent. It cannot import hostctl (the target may have none), hence its own few lines.
# HTTP/1.0 over a plain socket: the answer ends when the server closes; at most 1 MiB is read.
_GET = """import json, os, socket, sys
url, key_env = sys.argv[1], sys.argv[2]
hostport, _, path = url.split("://", 1)[1].partition("/")
host, _, port = hostport.rpartition(":")
host, port = host.strip("[]"), int(port)
def hx(a):
    if ":" in a[0]:
        raw = socket.inet_pton(socket.AF_INET6, a[0])
        words = "".join(raw[i:i + 4][::-1].hex() for i in range(0, 16, 4))
    else:
        words = socket.inet_aton(a[0])[::-1].hex()
    return ("%s:%04X" % (words, a[1])).upper()
def owner(local, peer):
    want = (hx(peer), hx(local))
    for t in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(t).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) > 7 and (f[1], f[2]) == want:
                return int(f[7])
    return None
try:
    s = socket.create_connection((host, port), timeout=10)
    uid = owner(s.getsockname(), s.getpeername())
    if uid != 0:
        s.close()
        who = "no socket table lists its server end" if uid is None else "the process listening runs as uid %d, not root" % uid
        print(json.dumps({"status": None, "error": "refused %s:%d: %s; nothing was sent (no API key)" % (host, port, who)}))
        sys.exit(0)
    key = os.environ.get(key_env) if key_env else None
    head = "GET /%s HTTP/1.0\\r\\nHost: %s\\r\\n" % (path, hostport) + ("Authorization: Bearer %s\\r\\n" % key if key else "")
    s.sendall((head + "\\r\\n").encode())
    data = b""
    while len(data) <= 1 << 20:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    status_line, _, rest = data.partition(b"\\r\\n")
    body = rest.partition(b"\\r\\n\\r\\n")[2][:1 << 20]
    print(json.dumps({"status": int(status_line.split()[1]), "body": body.decode(errors="replace")}))
except Exception as e:
    print(json.dumps({"status": None, "error": e.__class__.__name__ + ": " + str(e)}))
"""


def _get(ctx: Ctx, path: str) -> dict:
    from hostctl.service import preflight

    url = preflight.endpoint(ctx.plan) + path
    # `python -c` looks up imports in its cwd first (hostctl's, or the login's, which another user may
    # have left a json.py in): -I drops the cwd, PYTHON* and the user site; `cd /` for a Python too old for -I.
    r = ctx.target.cmd("cd / && %s -I -c %s %s %s", ctx.target.python, _GET, url, ctx.plan.runtime.api_key_env or "")
    try:
        return {"url": url, **json.loads(r.stdout.strip().splitlines()[-1])}
    except (ValueError, IndexError):
        return {"url": url, "status": None, "error": (r.stderr or r.stdout).strip()[-300:] or f"exit {r.rc}"}


def _inspect(ctx: Ctx) -> dict | VerifyResult:
    from hostctl.service.lifecycle import container_name

    if "inspect" not in ctx._cache:
        name = container_name(ctx.plan)
        r = ctx.target.cmd("docker inspect -- %s", name)
        if r.rc == 127:
            ctx._cache["inspect"] = bad("docker is not installed", f"container {name}")
        elif r.rc != 0:
            ctx._cache["inspect"] = bad(f"no container {name}: {r.stderr.strip()[-200:]}", "running",
                                        "hostctl up (the runtime is expected up: `up` ran and `down` did not)")
        else:
            ctx._cache["inspect"] = json.loads(r.stdout)[0]
    return ctx._cache["inspect"]


def _container(ctx: Ctx) -> VerifyResult:
    doc = _inspect(ctx)
    if isinstance(doc, VerifyResult):
        return doc
    st = doc.get("State", {})
    health = (st.get("Health") or {}).get("Status")
    found = f"{doc.get('Name', '').lstrip('/')}: {st.get('Status')}" + (f", health {health}" if health else "")
    if not st.get("Running") or st.get("Restarting"):
        extra = f", exit code {st.get('ExitCode')}" + (", OOM-killed" if st.get("OOMKilled") else "")
        return bad(found + extra, "running", "hostctl logs, then hostctl up")
    if health == "unhealthy":
        return bad(found, "healthy", "hostctl logs; hostctl doctor")
    return ok(found)


def _caps(ctx: Ctx) -> VerifyResult:
    doc = _inspect(ctx)
    if isinstance(doc, VerifyResult):
        return doc
    rt, hc = ctx.plan.runtime, doc.get("HostConfig", {})
    want = {"Memory": parse_size(rt.mem_limit) if rt.mem_limit else 0,
            "MemoryReservation": parse_size(rt.mem_reservation) if rt.mem_reservation else 0,
            "MemorySwap": parse_size(rt.memswap_limit) if rt.memswap_limit else 0,
            "CapAdd": sorted(rt.cap_add), "Privileged": False, "NetworkMode": "host"}
    got = {"Memory": hc.get("Memory") or 0, "MemoryReservation": hc.get("MemoryReservation") or 0,
           "MemorySwap": hc.get("MemorySwap") or 0, "CapAdd": sorted(hc.get("CapAdd") or []),
           "Privileged": bool(hc.get("Privileged")), "NetworkMode": hc.get("NetworkMode")}
    if not rt.mem_limit:
        for k in ("Memory", "MemoryReservation", "MemorySwap"):
            want.pop(k), got.pop(k)
    wrong = {k: (got[k], v) for k, v in want.items() if got[k] != v}
    socket = [m.get("Source") for m in doc.get("Mounts", []) if str(m.get("Source", "")).endswith("docker.sock")]
    if socket:
        wrong["docker.sock"] = (socket, [])
    shown = ", ".join(f"{k}={docker_size(v) if k.startswith('Mem') and isinstance(v, int) and v > 0 else v}"
                      for k, v in got.items())
    if wrong:
        return bad(shown, ", ".join(f"{k}={docker_size(v[1]) if k.startswith('Mem') and v[1] else v[1]}"
                                    for k, v in wrong.items()), "hostctl down; hostctl up (re-renders)")
    return ok(shown)


def _health(ctx: Ctx) -> VerifyResult:
    r = _get(ctx, "/health")
    if r.get("status") != 200:
        return bad(f"{r['url']}: {r.get('error') or r.get('status')}", "HTTP 200", "hostctl status; hostctl logs")
    return ok(f"{r['url']}: HTTP 200")


def _models(ctx: Ctx) -> VerifyResult:
    recipe = ctx.config.recipe
    r = _get(ctx, "/v1/models")
    if r.get("status") != 200:
        return bad(f"{r['url']}: {r.get('error') or r.get('status')}", f"HTTP 200 listing {recipe.served_name}",
                   "hostctl status; hostctl logs")
    try:
        models = json.loads(r["body"]).get("data", [])
    except (ValueError, AttributeError):
        return bad(f"{r['url']}: not JSON", "the OpenAI model list")
    served = {m.get("id"): m for m in models if isinstance(m, dict)}
    if recipe.served_name not in served:
        return bad(f"{r['url']} lists {', '.join(map(str, served)) or 'nothing'}", recipe.served_name,
                   "the runtime serves another model: hostctl down; hostctl up")
    length = served[recipe.served_name].get("max_model_len")
    if length is not None and length != recipe.context:
        return bad(f"{recipe.served_name} with max_model_len {length}", f"max_model_len {recipe.context}",
                   "hostctl down; hostctl up")
    return ok(f"{r['url']} serves {recipe.served_name}" + (f" (max_model_len {length})" if length else ""))


# ---------------------------------------------------------------- the suite


def suite(config: Config, facts: HostFacts, plan: Plan, parts: tuple[str, ...] = PARTS) -> list[VerifyCheck]:
    """Every check for these parts, from the profile and the plan (listing reads nothing)."""
    from hostctl.provision import storage, sysctl

    checks: list[VerifyCheck] = []
    profile = config.profile
    if "storage" in parts:
        checks.append(VerifyCheck("storage/converged", "storage", "convergence",
                            "the storage part decides no action on fresh facts", _converged("storage")))
        for d in profile.drives:
            checks.append(VerifyCheck(f"storage/{d.name}/mount", "storage", "testinfra",
                                f"hostctl-data-{d.name} ({d.filesystem}) mounted at {d.mount} with noatime",
                                _mount(d.name)))
            if d.swap > 0:
                checks.append(VerifyCheck(f"storage/{d.name}/swap", "storage", "testinfra",
                                    f"hostctl-swap-{d.name} active at priority {d.swap_priority}", _swap(d.name)))
        if profile.drives:
            checks.append(VerifyCheck("storage/fstab", "storage", "testinfra",
                                "/etc/fstab: hostctl's block, every filesystem by UUID with nofail", _fstab))
        if any(d.swap > 0 for d in profile.drives):
            checks.append(VerifyCheck("storage/sysctl", "storage", "testinfra", f"{sysctl.SYSCTL_FILE} as rendered",
                                _sysctl_file))
            for key, value in sysctl.desired(profile).items():
                checks.append(VerifyCheck(f"storage/sysctl/{key}", "storage", "testinfra", f"live {key} = {value}",
                                    _sysctl_live(key)))
        on_drive, plain = storage.role_dirs(config, facts)
        for name, dirs in on_drive.items():
            mount = profile.drive(name).mount
            for role, directory in dirs:
                checks.append(VerifyCheck(f"storage/dirs/{role.replace(' ', '-')}", "storage", "testinfra",
                                    f"{directory} exists on drive {name} ({mount})", _dir(directory, mount)))
        for role, directory in plain:
            checks.append(VerifyCheck(f"storage/dirs/{role}", "storage", "testinfra", f"{directory} exists",
                                _dir(directory, None)))
    if "system" in parts:
        from hostctl.provision import system

        checks.append(VerifyCheck("system/converged", "system", "convergence",
                            "the system part decides no action on fresh files", _converged("system")))
        if not plan.errors:
            for host_path, data in system.desired_files(config, plan).items():
                checks.append(VerifyCheck(f"system/file{host_path}", "system", "testinfra", f"{host_path} as rendered",
                                    _file(str(host_path), data)))
            for unit in system.UNITS:
                checks.append(VerifyCheck(f"system/enabled/{unit}", "system", "testinfra", f"{unit} enabled",
                                    _enabled(unit)))
    if "gpu" in parts:
        from hostctl.provision import gpu

        checks.append(VerifyCheck("gpu/converged", "gpu", "convergence",
                            "the gpu part decides no action on fresh facts", _converged("gpu")))
        if gpu.configured(config):
            checks.append(VerifyCheck("gpu/power-unit", "gpu", "testinfra", f"{gpu.UNIT_PATH} as rendered, enabled",
                                _power_unit))
            indices = [s.index for s in plan.power.gpus] or [g.index for g in facts.gpus.devices] or [0]
            for index in indices:
                checks.append(VerifyCheck(f"gpu/power/{index}", "gpu", "nvml",
                                    f"GPU {index}: the profile's power limit enforced", _power(index)))
    if "runtime" in parts:
        from hostctl.service.lifecycle import container_name

        name = container_name(plan)
        checks.append(VerifyCheck("runtime/container", "runtime", "testinfra", f"container {name} running, not unhealthy",
                            _container))
        checks.append(VerifyCheck("runtime/caps", "runtime", "testinfra",
                            "memory caps, capabilities, host network, not privileged, no Docker socket", _caps))
        checks.append(VerifyCheck("runtime/health", "runtime", "testinfra", "/health answers 200", _health))
        checks.append(VerifyCheck("runtime/models", "runtime", "testinfra",
                            f"/v1/models serves {config.recipe.served_name} (max_model_len {config.recipe.context})",
                            _models))
    return checks

