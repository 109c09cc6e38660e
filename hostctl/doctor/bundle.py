"""The support bundle (`doctor --bundle FILE`): one tar.gz with everything needed to help with a
host from afar — doctor's JSON, the facts and the plan, the profile and recipe, the rendered
Compose project and units, recent runtime logs, a kernel log excerpt, and the log given with
--log — every file redacted (hostctl.secrets.redact) before it is packed.

Each part that cannot be collected is listed with its reason in MANIFEST.txt; a bundle is
still written.
"""

from __future__ import annotations

import io
import os
import tarfile
import time
from pathlib import Path

from pydantic import Field

from hostctl.data import Data
from hostctl import safefs
from hostctl.config import Config
from hostctl.secrets import MASK, count, redact
from hostctl.errors import InputError
from hostctl.facts.records import HostFacts
from hostctl.plan.records import Plan

KERNEL_TAIL = 400  # kernel log lines kept besides every OOM and Xid line
RUNTIME_TAIL = 2000
LOG_TAIL_BYTES = 4 * 1024 * 1024


class BundleContents(Data):
    files: dict[str, str] = Field(default_factory=dict)  # archive name -> text (not yet redacted)
    missing: list[str] = Field(default_factory=list)  # "what: why"

    def add(self, name: str, text: str) -> None:
        self.files[name] = text


def _kernel_excerpt(facts: HostFacts, live: bool) -> tuple[str | None, str | None]:
    """(text, why not)."""
    k = facts.kernel_log
    events = [e.line for e in k.events] if k is not None and k.available else []
    tail: list[str] = []
    if live:
        from hostctl.facts.kernel_log import kernel_log_tail

        read = kernel_log_tail(KERNEL_TAIL)
        tail = read.lines or []
        if read.lines is None and not events:
            return None, read.why
    elif not events:
        return None, "the facts snapshot carries no kernel log"
    head = ["# OOM kills and Xid errors since boot (hostctl.kernel_events)"] + (events or ["(none)"])
    if tail:
        head += ["", f"# the last {len(tail)} kernel log lines"] + tail
    return "\n".join(head) + "\n", None


def gather(*, doctor_json: str, facts: HostFacts, plan: Plan | None, config: Config | None, live: bool,
           log_path: Path | None = None) -> BundleContents:
    b = BundleContents()
    b.add("doctor.json", doctor_json)
    b.add("facts.json", facts.model_dump_json(indent=2) + "\n")
    if plan is not None:
        b.add("plan.json", plan.model_dump_json(indent=2) + "\n")
        try:
            from hostctl.service.render import render_files

            for name, text in render_files(plan).items():
                b.add(f"rendered/{name}", text)
        except Exception as exc:  # a plan with errors may not render; the bundle still helps
            b.missing.append(f"rendered files: {exc.__class__.__name__}: {exc}")
    else:
        b.missing.append("plan.json and rendered files: no host profile")
    if config is not None:
        src = Path(config.source)
        if config.source_text:  # the text validated, not the path re-read (it may lead elsewhere now)
            b.add(f"profile/{src.name}", config.source_text)
        else:
            b.missing.append(f"profile {src}: not read from a file")
        b.add("profile/recipe.json", config.recipe.model_dump_json(indent=2) + "\n")
    kernel, why = _kernel_excerpt(facts, live)
    if kernel is not None:
        b.add("kernel.log", kernel)
    else:
        b.missing.append(f"kernel.log: {why}")
    ours = [c for c in facts.engine.containers if c.labels.get("io.hostctl.profile")]
    if not live:
        b.missing.append("runtime logs: facts from a snapshot, not this host's engine")
    elif not facts.engine.available:
        b.missing.append(f"runtime logs: Docker engine unreachable ({facts.engine.reason})")
    elif not ours:
        b.missing.append("runtime logs: no hostctl runtime container exists")
    for c in ours:
        try:
            from hostctl.facts.engine import container_logs

            b.add(f"runtime/{c.name}.log", container_logs(c.id, tail=RUNTIME_TAIL))
        except Exception as exc:
            b.missing.append(f"runtime/{c.name}.log: {exc.__class__.__name__}: {exc}")
    if log_path is not None:
        try:
            from hostctl.doctor.diagnose import read_log

            text = read_log(log_path)
            b.add(f"input/{log_path.name}", text[-LOG_TAIL_BYTES:])
        except InputError as exc:
            b.missing.append(f"input log: {exc.message}")
    return b


def check_target(path: Path) -> None:
    """Refuse a --bundle path that cannot take an archive, before any work (exit 2)."""
    from hostctl import safepaths

    shown = str(path)[:200]
    problem = safepaths.lexical_problem(os.path.abspath(path))
    if problem:
        raise InputError(f"--bundle {shown}: {problem}", fix="name a file such as support.tar.gz")
    try:
        if path.is_dir():
            raise InputError(f"--bundle {shown} is a directory; expected the archive's file name",
                             fix=f"e.g. --bundle {shown.rstrip('/')}/hostctl-support.tar.gz")
        if not path.parent.is_dir():
            raise InputError(f"--bundle {shown}: the folder {path.parent} does not exist")
        safefs.check_dir(path.parent)  # refused before any work (exit 3) when another user can steer it
    except OSError as exc:
        raise InputError(f"--bundle {shown}: {exc.strerror or exc}") from None
    absolute = os.path.abspath(path)
    if any(absolute.startswith(p + "/") for p in ("/proc", "/sys", "/dev")):
        raise InputError(f"--bundle {shown} is on a kernel pseudo-filesystem, which cannot hold files")


def write(path: Path, contents: BundleContents) -> dict[str, int]:
    """Redact every file (its name too) and write the archive atomically; returns redactions per file."""
    check_target(path)
    redactions: dict[str, int] = {}
    members: list[tuple[str, bytes]] = []
    for raw_name, text in sorted(contents.files.items()):
        name = redact(raw_name).replace(MASK, "REDACTED")
        redactions[name] = count(text)
        members.append((name, redact(text).encode()))
    manifest = ["hostctl support bundle", f"written {time.strftime('%Y-%m-%dT%H:%M:%S%z')}", "",
                "files, each redacted (API keys, tokens, passwords, Authorization headers, API key arguments):"]
    manifest += [f"  {name}  ({len(data)} bytes, {redactions[name]} secret(s) redacted)" for name, data in members]
    if contents.missing:
        manifest += ["", "not included:"] + [f"  {redact(m)}" for m in contents.missing]
    # The manifest's reasons quote exceptions and paths, which can carry a secret: it is redacted
    # like every member (its own words hold none).
    members.insert(0, ("MANIFEST.txt", redact("\n".join(manifest) + "\n").encode()))
    root = path.name.removesuffix(".gz").removesuffix(".tar").removesuffix(".tgz") or "hostctl-bundle"
    root = redact(root).replace(MASK, "REDACTED")
    # In the folder's fd (safefs): a link another user put on the way, or in place of the folder,
    # must not steer where root writes an archive of the host's logs and configs.
    with safefs.opened_dir(path.parent) as dfd:
        with safefs.staged_temp(dfd, path.name, 0o600) as (fd, tmp):  # logs and configs: the owner's only
            with os.fdopen(fd, "wb") as raw:
                with tarfile.open(fileobj=raw, mode="w:gz") as tar:
                    now = time.time()
                    for name, data in members:
                        info = tarfile.TarInfo(f"{root}/{name}")
                        info.size, info.mtime, info.mode = len(data), now, 0o600
                        tar.addfile(info, io.BytesIO(data))
                os.fchmod(raw.fileno(), 0o600)
                raw.flush()
                os.fsync(raw.fileno())
            safefs.commit_temp(dfd, tmp, path.name)
    return redactions
