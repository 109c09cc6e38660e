"""The provisioning runner: read facts, decide (storage.py), print the plan, ask consent, run the
actions in order, then read the host afresh and decide again until nothing is left to do.

Re-deciding after acting is the verification: a host is provisioned when a fresh look at it
yields no actions. It is also how a drive whose partition table the kernel had not loaded gets
the rest of its plan (round 2), and why an interrupted run converges on the next one: each
run starts from what the host is, not from what an earlier run meant to do.
"""

from __future__ import annotations

import fcntl
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import TextIO

from hostctl import paths
from hostctl.config import Config
from hostctl.errors import FailedError, HostctlError, RefusedError
from hostctl.facts.model import HostFacts
from hostctl.provision import consent, files, fstab, sysctl
from hostctl.provision.actions import Action
from hostctl.provision.storage import (
    DirState,
    DriveVerdict,
    Options,
    StorageProvision,
    SystemFiles,
    dir_requests,
    layout,
    plan_storage_provision,
    resolve_drives,
    role_dirs,
)
from hostctl.units import fmt_bytes

MAX_ROUNDS = 4
DISK_LOCK_WAIT_S = 10.0
LOCK_FILE = "provision.lock"


@dataclass
class Outcome:
    changed: int  # actions run
    rounds: int
    final: StorageProvision


def sudo_owner(env: dict[str, str] | None = None) -> tuple[int, int] | None:
    """The user who ran `sudo hostctl ...`: cache directories are theirs, not root's."""
    env = os.environ if env is None else env
    uid, gid = env.get("SUDO_UID", ""), env.get("SUDO_GID", "")
    return (int(uid), int(gid)) if uid.isdigit() and gid.isdigit() else None


def storage_facts(config: Config) -> HostFacts:
    """Disks, mounts, swap, memory and the directories the storage plan names: all that storage
    decisions read (a full collect would wait on NVML and the Docker socket, every round)."""
    from hostctl.facts import collect_storage
    from hostctl.plan import alias_requests, path_requests

    requests = path_requests(config) + [(d, False) for d in dir_requests(config)]
    seen: set[str] = set()
    return collect_storage([(p, listing) for p, listing in requests if not (p in seen or seen.add(p))],
                           alias_requests(config),
                           [(d.identity.kind, d.identity.value) for d in config.profile.drives])


def read_system_files(config: Config, facts: HostFacts) -> SystemFiles:
    dirs: dict[str, DirState] = {}
    for _, directory in role_dirs(config, facts)[1]:
        p = paths.system_path(directory)
        try:
            st = p.stat()
            dirs[directory] = DirState(p.is_dir(), (st.st_uid, st.st_gid))
        except FileNotFoundError:
            dirs[directory] = DirState(False)
    return SystemFiles(fstab=files.read_text(fstab.FSTAB), sysctl=files.read_text(sysctl.SYSCTL_FILE), plain_dirs=dirs)


# ---------------------------------------------------------------- presenting


def _layout_text(sp: StorageProvision, name: str) -> str:
    d = next(x for x in sp.drives if x.drive.name == name).drive
    return " + ".join(f"{s.role} {fmt_bytes(s.size)}" if s.size else f"{s.fs} data (the rest) at {d.mount}"
                      for s in layout(d))


def plan_text(sp: StorageProvision, *, heading: str | None = None) -> str:
    lines = [heading or f"storage plan for profile {sp.profile} (phase {sp.phase}):"]
    n = 0

    def _action(a: Action) -> None:
        nonlocal n
        n += 1
        first, *rest = a.describe.splitlines()
        lines.append(f"    {n:>2}. {'[destructive] ' if a.destructive else ''}{first}")
        lines.extend(f"          {r}" for r in rest)

    if not sp.drives:
        lines.append("  the profile names no drives")
    for d in sp.drives:
        state = {"ready": "ready, nothing to do", "converge": "converge to the layout",
                 "create": "lay out", "erase": "ERASE and lay out", "relabel": "relabel (the profile renamed it; nothing is formatted)",
                 "refused": "REFUSED"}[d.status]
        lines.append(f"  drive {d.where()}: {d.found}; {state}")
        if d.status != "refused":
            lines.append(f"    layout: {_layout_text(sp, d.drive.name)}")
        for r in d.reasons:
            lines.append(f"    refused: {r}")
        if d.fix and d.refused:
            lines.append(f"    fix: {d.fix}")
        for a in d.actions:
            _action(a)
        if d.replan:
            lines.append("    then: its partitions are read again and the rest of its plan is made")
    if sp.system:
        lines.append("  system files and directories:")
        for a in sp.system:
            _action(a)
    elif sp.replan:
        lines.append("  system files (fstab, sysctl) are planned once every drive's partitions are known")
    for note in sp.notes:
        lines.append(f"  note: {note}")
    return "\n".join(lines) + "\n"


def _refusal(sp: StorageProvision, ran: int) -> RefusedError:
    refused = sp.refused
    first = refused[0]
    message = f"drive {first.where()} refused: {'; '.join(first.reasons)}"
    if len(refused) > 1:
        message += f" (and {len(refused) - 1} more drive(s))"
    message += "; " + ("nothing was changed" if ran == 0 else f"{ran} earlier action(s) ran, nothing more was changed")
    details = []
    for i, d in enumerate(refused):
        if i:
            details += [f"drive {d.where()} refused: {r}" for r in d.reasons]
        if d.fix:
            details.append(f"fix for {d.drive.name}: {d.fix}")
    return RefusedError(message, details=details)


# ---------------------------------------------------------------- running


def _consent_request(d: DriveVerdict) -> consent.Request:
    where = d.disk.path if d.disk else "?"
    what = (f"ERASES {d.found.removeprefix('erase: ')} on {where}" if d.status == "erase"
            else f"writes a partition table or filesystems on {where}")
    return consent.Request(d.drive.name, str(d.drive.identity), d.drive.identity.value, what)


@contextmanager
def _lock() -> Iterator[None]:
    directory = paths.state_dir()
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise FailedError(f"another `hostctl provision` is running (lock {directory / LOCK_FILE} is held)",
                              fix="wait for it to finish, then re-run") from None
        yield
    finally:
        os.close(fd)


@contextmanager
def _disk_lock(path: str) -> Iterator[None]:
    """An exclusive BSD lock on the whole disk while hostctl writes to it: the convention of
    systemd's block-device locking, which udev honours (it does not probe a locked disk) and which
    keeps a second hostctl (another state directory) or a partitioning tool that locks off it.
    udev's own short shared locks are waited out."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise FailedError(f"cannot open {path} to lock it: {exc.strerror or exc}") from exc
    try:
        deadline = time.monotonic() + DISK_LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise FailedError(f"{path} is locked by another process (a second `hostctl provision`, or a "
                                      f"partitioning tool) for more than {DISK_LOCK_WAIT_S:g} s",
                                      fix=f"find it with `fuser -v {path}` or `lslocks`, wait for it, then re-run") from None
                time.sleep(0.1)
        yield
    finally:
        os.close(fd)


def _ran_before(i: int, total: int) -> str:
    return (f"{i - 1} of {total} action(s) ran before this one failed; re-running `hostctl provision` "
            "continues from what the host is now")


def run_actions(actions: list[Action], err: TextIO) -> int:
    """Run in order, progress on stderr; stop at the first failure (a re-run continues from there)."""
    total = len(actions)
    for i, a in enumerate(actions, 1):
        err.write(f"[{i}/{total}] {a.step}: {a.describe.splitlines()[0]}\n")
        err.flush()
        t0 = time.monotonic()
        try:
            a.run()
        except HostctlError as exc:
            exc.details = [*exc.details, _ran_before(i, total)]
            raise
        except OSError as exc:  # a directory or file edit (the commands report through the runner)
            raise FailedError(f"{a.step}: {exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else ""),
                              details=[_ran_before(i, total)]) from exc
        err.write(f"        done in {time.monotonic() - t0:.2f} s\n")
    return total


def provision_storage(
    config: Config,
    *,
    dry_run: bool = False,
    yes: bool = False,
    erase: tuple[str, ...] | list[str] = (),
    stdin: TextIO | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
    opts: Options | None = None,
    read_facts: Callable[[Config], HostFacts] = storage_facts,
) -> Outcome:
    stdin, out, err = stdin or sys.stdin, out or sys.stdout, err or sys.stderr
    opts = opts or Options(erase=tuple(erase), owner=sudo_owner())
    if dry_run:
        facts = read_facts(config)
        sp = plan_storage_provision(config, facts, read_system_files(config, facts), opts)
        out.write(plan_text(sp))
        if sp.refused:
            raise _refusal(sp, 0)
        out.write("storage: no changes needed\n" if not sp.actions else
                  f"dry run: {len(sp.actions)} action(s) shown, nothing was changed\n")
        return Outcome(0, 1, sp)

    with _lock(), ExitStack() as held:
        consented: set[str] = set()
        locked: set[str] = set()
        ran, expect_done = 0, False
        for round_no in range(1, MAX_ROUNDS + 1):
            facts = read_facts(config)
            for disk in resolve_drives(config, facts)[0].values():
                if disk.path not in locked:
                    held.enter_context(_disk_lock(disk.path))
                    locked.add(disk.path)
            sp = plan_storage_provision(config, facts, read_system_files(config, facts), opts)
            if expect_done and sp.actions:
                raise FailedError(
                    f"storage did not converge: after {ran} action(s) a fresh look at the host still needs "
                    f"{len(sp.actions)}",
                    details=[f"{a.step}: {a.describe.splitlines()[0]}" for a in sp.actions],
                    fix="look at the step named above (its command ran without an error); re-run to retry",
                )
            if round_no == 1:
                out.write(plan_text(sp))
            elif sp.actions or sp.refused:
                out.write(plan_text(sp, heading="re-planned with the partitions the kernel has loaded now:"))
            if sp.refused:
                raise _refusal(sp, ran)
            if not sp.actions:
                out.write("storage: no changes\n" if ran == 0 else f"storage: {ran} action(s) run; verified: "
                          "a fresh look at the host needs nothing more\n")
                return Outcome(ran, round_no, sp)
            need = [_consent_request(d) for d in sp.drives if d.destructive and d.drive.name not in consented]
            consent.obtain(need, yes=yes, stdin=stdin, stderr=err)
            consented |= {r.drive for r in need}
            ran += run_actions(sp.actions, err)
            expect_done = not sp.replan
        raise FailedError(f"storage did not converge in {MAX_ROUNDS} rounds", details=[a.step for a in sp.actions])
