"""doctor's cross-host checks: every member serves the same image, model and recipe, its cluster
NIC is up with a known speed and the same MTU as the others, and the clocks agree within a
second.

Facts (`MemberFacts`) are read through a small MemberReader -- `run(argv) -> (rc, text)` and
`read_bytes(path)` -- which is this machine, or another host through the SSH transport of
`verify --host` (hostctl.verify.connection.Target has both). The checks are pure functions over
those snapshots, so they are tested on snapshots of hosts this machine is not.
"""

from __future__ import annotations

import hashlib
import subprocess
import time
from typing import Protocol

from hostctl.cluster.plan import ClusterPlan, MemberPlan
from hostctl.data import Data
from hostctl.facts.manifest import SMALL_FILE_MAX
from hostctl.safefs import read_bounded

SCHEMA = "hostctl.cluster-doctor/v1"
CLOCK_SKEW_S = 1.0
# Below this the activations of pipeline parallel (and replicas' answers) crawl; a warning, not a failure.
SLOW_NIC_MBPS = 10_000


class MemberReader(Protocol):
    def run(self, argv: list[str]) -> tuple[int, str]: ...
    def read_bytes(self, host_path: str) -> bytes | None: ...


class LocalMemberReader:
    def run(self, argv: list[str]) -> tuple[int, str]:
        try:
            res = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return 127, str(exc)
        return res.returncode, res.stdout

    def read_bytes(self, host_path: str) -> bytes | None:
        try:
            # bounded: the model folder's manifest is whatever its owner made it (a sparse file
            # of any size); past the cap it reads as unreadable, never whole
            return read_bounded(host_path, max_bytes=SMALL_FILE_MAX)
        except (OSError, ValueError):
            return None


class NicFacts(Data):
    name: str
    operstate: str | None = None  # up, down, unknown (loopback reads "unknown")
    speed_mbps: int | None = None  # None: the driver does not say (virtual NICs, loopback)
    mtu: int | None = None


class MemberFacts(Data):
    member: str
    clock_offset_s: float | None = None  # the member's clock minus this machine's, at the read
    image_id: str | None = None
    model_manifest_sha256: str | None = None
    recipe_sha256: str | None = None
    nic: NicFacts | None = None
    notes: list[str] = []


def _text(reader: MemberReader, path: str) -> str | None:
    raw = reader.read_bytes(path)
    return None if raw is None else raw.decode(errors="replace").strip()


def read_member(mp: MemberPlan, ifname: str, reader: MemberReader) -> MemberFacts:
    f = MemberFacts(member=mp.member.name)
    before = time.time()
    rc, out = reader.run(["date", "+%s.%N"])
    after = time.time()
    try:
        f.clock_offset_s = float(out.strip()) - (before + after) / 2 if rc == 0 else None
    except ValueError:
        f.notes.append(f"clock: `date +%s.%N` printed {out.strip()[:40]!r}")
    nic = NicFacts(name=ifname)
    base = f"/sys/class/net/{ifname}"
    nic.operstate = _text(reader, f"{base}/operstate")
    for attr in ("speed", "mtu"):
        value = _text(reader, f"{base}/{attr}")
        if value and value.lstrip("-").isdigit() and int(value) > 0:
            setattr(nic, "speed_mbps" if attr == "speed" else "mtu", int(value))
    f.nic = nic
    if mp.plan is not None:
        rc, out = reader.run(["docker", "image", "inspect", "--format", "{{.Id}}", mp.plan.runtime.image])
        f.image_id = out.strip() if rc == 0 and out.strip() else None
        if f.image_id is None:
            f.notes.append(f"image {mp.plan.runtime.image}: not in the engine")
        model_dir = mp.config.profile.runtime.model_dir
        if model_dir:
            from hostctl.model.manifest import manifest_path

            raw = reader.read_bytes(str(manifest_path(model_dir)))
            f.model_manifest_sha256 = hashlib.sha256(raw).hexdigest() if raw is not None else None
        else:
            f.notes.append("model: baked into the image (no runtime.model_dir); the image id covers it")
    if mp.identity is not None:
        f.recipe_sha256 = mp.identity.recipe_sha256
    return f


# ---------------------------------------------------------------- pure checks


def _result(id_: str, status: str, summary: str, fix: str | None = None, observed: dict | None = None) -> dict:
    return {"id": id_, "status": status, "summary": summary, "fix": fix, "observed": observed or {}}


def _same(id_: str, what: str, values: dict[str, str | None], fix: str) -> dict:
    known = {k: v for k, v in values.items() if v is not None}
    unknown = sorted(set(values) - set(known))
    if len(set(known.values())) > 1:
        groups: dict[str, list[str]] = {}
        for k, v in known.items():
            groups.setdefault(v, []).append(k)
        shown = "; ".join(f"{', '.join(sorted(ms))}: {v.removeprefix('sha256:')[:12]}" for v, ms in groups.items())
        return _result(id_, "fail", f"the {what} differs between hosts ({shown})", fix, values)
    if unknown:
        return _result(id_, "warn", f"the {what} is unknown on {', '.join(unknown)}",
                       "run doctor where every host can be read", values)
    return _result(id_, "pass", f"the same {what} on every host", observed=values)


def checks(cp: ClusterPlan, facts: list[MemberFacts]) -> list[dict]:
    serving = [f for f in facts if cp.member(f.member).member.role != "router"]
    out = [
        _same("cluster.image", "runtime image id", {f.member: f.image_id for f in serving},
              "build or load the same image on every host (`docker image inspect` shows its id)"),
        _same("cluster.recipe", "recipe", {f.member: f.recipe_sha256 for f in serving},
              "point every host's profile at the same recipe file"),
    ]
    manifests = {f.member: f.model_manifest_sha256 for f in serving}
    if any(v is not None for v in manifests.values()) or any(
            cp.member(f.member).config and cp.member(f.member).config.profile.runtime.model_dir for f in serving):
        out.append(_same("cluster.model", "model manifest", manifests,
                         "run `hostctl model pull` with the same revision on every host"))
    else:
        out.append(_result("cluster.model", "skip", "the model is baked into the image on every host: "
                           "cluster.image covers it"))
    for f in facts:
        nic = f.nic
        cid = f"cluster.nic.{f.member}"
        if nic is None or nic.operstate is None:
            out.append(_result(cid, "fail", f"{f.member}: interface {cp.cluster.socket_ifname} does not exist",
                               "set socket_ifname in cluster.toml to the interface of the cluster network"))
        elif nic.operstate not in ("up", "unknown"):
            out.append(_result(cid, "fail", f"{f.member}: {nic.name} is {nic.operstate}",
                               f"bring it up (ip link set {nic.name} up) and check the cable", nic.model_dump()))
        elif cp.mode == "multi-node" and nic.speed_mbps is not None and nic.speed_mbps < SLOW_NIC_MBPS:
            out.append(_result(cid, "warn", f"{f.member}: {nic.name} links at {nic.speed_mbps} Mb/s",
                               f"pipeline parallel sends activations every step: {SLOW_NIC_MBPS // 1000} Gb/s or "
                               "faster keeps that from dominating", nic.model_dump()))
        else:
            speed = f"{nic.speed_mbps} Mb/s" if nic.speed_mbps else "speed not reported"
            out.append(_result(cid, "pass", f"{f.member}: {nic.name} {nic.operstate}, {speed}, MTU {nic.mtu}",
                               observed=nic.model_dump()))
    mtus = {f.member: f.nic.mtu for f in facts if f.nic and f.nic.mtu}
    if len(set(mtus.values())) > 1:
        out.append(_result("cluster.mtu", "fail", "the MTU differs between hosts (" +
                           ", ".join(f"{k} {v}" for k, v in sorted(mtus.items())) + ")",
                           "set one MTU on every host's cluster interface (a mismatch drops large frames)", mtus))
    else:
        out.append(_result("cluster.mtu", "pass", f"one MTU on every host ({next(iter(mtus.values()), '?')})",
                           observed=mtus))
    offsets = {f.member: f.clock_offset_s for f in facts if f.clock_offset_s is not None}
    spread = (max(offsets.values()) - min(offsets.values())) if offsets else 0.0
    if spread > CLOCK_SKEW_S:
        out.append(_result("cluster.clock", "fail", f"the clocks differ by {spread:.2f} s (more than "
                           f"{CLOCK_SKEW_S:g} s)", "run NTP (systemd-timesyncd or chrony) on every host",
                           {k: round(v, 3) for k, v in offsets.items()}))
    else:
        out.append(_result("cluster.clock", "pass", f"clocks within {spread:.2f} s",
                           observed={k: round(v, 3) for k, v in offsets.items()}))
    return out


def report(cp: ClusterPlan, facts: list[MemberFacts], extra: list[dict] | None = None) -> dict:
    results = checks(cp, facts) + list(extra or [])
    return {"schema": SCHEMA, "cluster": cp.cluster.name, "facts": [f.model_dump() for f in facts],
            "checks": results, "ok": not any(r["status"] == "fail" for r in results)}


def text(doc: dict) -> str:
    lines = [f"cluster {doc['cluster']}:"]
    for r in doc["checks"]:
        lines.append(f"  {r['status']:<4} {r['id']}: {r['summary']}" + (f"\n       fix: {r['fix']}" if r["fix"] and
                                                                       r["status"] != "pass" else ""))
    return "\n".join(lines) + "\n"
