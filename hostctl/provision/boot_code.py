"""Whether the code a boot unit runs is root's alone: a pure decision on the facts
hostctl/facts/executable.py reads (the executable the units call, the links to it, its
interpreter, the Python environment and the hostctl package behind it).

systemd runs the units as root at every boot, so whoever can write any of those files or swap any
directory on the way runs code as root. hostctl trusts root and the invoking user for what it
reads, but not for this: the user's own venv is exactly what must not be behind a root unit. The
account that runs provision is trusted too (root, in real use): its own files are no escalation.
The system and gpu parts refuse (exit 3) before writing a unit; doctor reports the same finding.
"""

from __future__ import annotations

import stat

from pydantic import ConfigDict

from hostctl.data import Data
from hostctl.errors import FailedError, RefusedError
from hostctl.facts.executable import ExecChain

INSTALL_ROUTE = ("install hostctl as root: `sudo ./install.sh` in a hostctl checkout (a venv in /opt/hostctl "
                 "owned by root, linked from /usr/local/bin/hostctl; README \"On a real host\"), then run provision again")
SHOWN = 5  # findings listed in an error; the count says how many more


class Writable(Data):
    """One file or directory behind the executable that someone other than root can change."""

    model_config = ConfigDict(frozen=True)

    path: str
    role: str
    who: str  # "owned by nobody (uid 65534)", "writable by every user (mode 0777)", ...

    def text(self) -> str:
        return f"{self.path} ({self.role}): {self.who}"


def _who(chain: ExecChain, uid: int, gid: int, mode: int, acl: bool) -> str | None:
    trusted = {0, chain.euid}
    if uid not in trusted:
        return f"owned by {chain.users.get(uid, uid)} (uid {uid})"
    if stat.S_ISLNK(mode):
        return None  # a link's own mode means nothing; its owner and its folder do
    # A sticky folder (/tmp) lets others add names, not replace root's: what is in it is
    # judged by its own owner.
    if stat.S_ISDIR(mode) and mode & stat.S_ISVTX:
        return None
    if mode & stat.S_IWOTH:
        return f"writable by every user (mode {stat.S_IMODE(mode):04o})"
    if mode & stat.S_IWGRP and gid != 0:
        return f"writable by group {chain.groups.get(gid, gid)} (gid {gid}, mode {stat.S_IMODE(mode):04o})"
    if mode & stat.S_IWGRP and acl:
        return f"writable by the users or groups its access ACL names (mode {stat.S_IMODE(mode):04o}; see getfacl)"
    return None


def writable_by_others(chain: ExecChain) -> list[Writable]:
    """Every entry of the chain that someone other than root (or provision's own account) can change."""
    out = []
    for e in chain.entries:
        who = _who(chain, e.uid, e.gid, e.mode, e.acl)
        if who is not None:
            out.append(Writable(path=e.path, role=e.role, who=who))
    return out


def render_warning(chain: ExecChain) -> str | None:
    """For `render`, which writes units but installs none: what to know before installing them
    (only code others can change; a hostctl not installed yet is provision's to report)."""
    found = problem(chain)
    if not isinstance(found, RefusedError):
        return None
    return f"warning: {found.message}; do not install these units until then: {found.fix}"


def problem(chain: ExecChain) -> FailedError | RefusedError | None:
    """Why a unit must not call chain.path, as the error to raise (None: it may). A missing
    executable fails (exit 1: the units would not start); code others can change, or a chain
    that cannot be read to the end, is refused (exit 3)."""
    if chain.missing is not None:
        where = "" if chain.missing.endswith(chain.path) else f" ({chain.missing} is missing on the way)"
        return FailedError(f"the units would call {chain.path}, which does not exist{where}: they would fail "
                           "at every boot", fix=INSTALL_ROUTE)
    if chain.unreadable is not None:
        return RefusedError(f"the units would run {chain.path} as root at boot, and what it runs could not be "
                            f"followed to the end: {chain.unreadable}", fix=INSTALL_ROUTE)
    found = writable_by_others(chain)
    if not found:
        return None
    more = [f"... and {len(found) - SHOWN} more"] if len(found) > SHOWN else []
    return RefusedError(
        f"the units would run {chain.path} as root at boot, and {len(found)} file(s) or folder(s) behind it can be "
        f"changed by someone other than root (first: {found[0].text()})",
        details=[w.text() for w in found[:SHOWN]] + more, fix=INSTALL_ROUTE)
