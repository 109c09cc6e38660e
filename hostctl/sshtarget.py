"""SSH targets: the one parser of `ssh://[user@]host[:port]` (`verify --host`, a cluster member's
`ssh`), the ssh command line hostctl builds for one, and the check of an ssh config file that
hostctl is told to use.

hostctl runs as root, and the text of an ssh:// URL comes from a profile or the command line.
So the URL is data only: a user, a host and a port, each checked against a strict shape and
handed to ssh as option *arguments* (`-l USER -p PORT -- HOST`), never as text ssh could read as
an option of its own. Query strings and fragments are refused (testinfra read `?ssh_config=` and
`?ssh_identity_file=` from them, so a profile could make root run another user's ProxyCommand);
the only options ssh gets are the ones ssh_argv() writes. A password in the URL is refused and
never shown (urldisplay.display masks it in the error).

An ssh config file is accepted only as hostctl's own option (`verify --ssh-config`, a cluster
member's `ssh_config`), and only when hostctl.safefs finds it and the way to it root's or the
invoking user's and writable by no one else: the file can run commands (ProxyCommand, Match
exec, LocalCommand), and root runs them.
"""

from __future__ import annotations

import ipaddress
import os
import re
import stat

from pydantic import ConfigDict

from hostctl.data import Data
from hostctl import safefs
from hostctl.errors import InputError
from hostctl.safetext import control_problem
from hostctl.urldisplay import display

# POSIX portable user names (what useradd accepts by default): no leading '-', no '@', no '%'
# (ssh expands %-tokens in some places) and no shell metacharacters.
USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}")
# One DNS label; a host name is labels joined by dots (checked label by label: no nested repetition).
LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
FORM = "ssh://[user@]host[:port]"


class SshTarget(Data):
    """A checked target: nothing in it can start with '-' or hold a character ssh treats specially."""

    model_config = ConfigDict(frozen=True)

    host: str  # a host name or an IP address (IPv6 without brackets)
    user: str | None = None
    port: int | None = None

    def display(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"ssh://{self.user + '@' if self.user else ''}{host}{':' + str(self.port) if self.port else ''}"


def _bad(field: str, spec: str, why: str, fix: str | None = None) -> InputError:
    return InputError(f"{field}: {why} (got {display(spec)!r})",
                      fix=fix or f"write the target as {FORM}, e.g. ssh://admin@gpu-box or ssh://root@10.0.0.2:2222")


def _host_problem(host: str) -> str | None:
    if not host:
        return "no host"
    if host.startswith("-"):
        return f"the host {host[:60]!r} starts with '-': ssh would read it as an option"
    if "%" in host:  # a %-escape, or an IPv6 zone id: ssh expands %-tokens in some of its options
        return f"the host {host[:60]!r} holds '%': write the name or address itself (no escapes, no zone id)"
    try:
        ipaddress.ip_address(host)
        return None
    except ValueError:
        pass
    labels = host[:-1].split(".") if host.endswith(".") else host.split(".")
    if len(host) > 253 or not all(LABEL.fullmatch(lb) for lb in labels) or labels[-1].isdigit():
        return (f"the host {host[:60]!r} is not a host name (letters, digits, '-' and '.') "
                "or an IP address")
    return None


def parse(spec: object, field: str) -> SshTarget:
    """The target `spec` names, or InputError (exit 2) naming `field` and what is wrong."""
    if not isinstance(spec, str):
        raise InputError(f"{field}: expected {FORM}, got {type(spec).__name__}")
    problem = control_problem(spec)
    if problem:  # urllib drops a line break or tab silently: ssh would get another host than the one written
        raise _bad(field, spec, problem)
    if not spec.startswith("ssh://"):
        raise _bad(field, spec, f"expected {FORM}")
    rest = spec[len("ssh://"):]
    for ch, what in (("?", "a query string"), ("#", "a fragment")):
        if ch in rest:
            raise _bad(field, spec, f"{what} is not accepted: ssh gets only the options hostctl sets",
                       fix="drop it; an ssh config file goes in --ssh-config (verify) or the member's "
                           "ssh_config (cluster.toml), and must belong to root or you")
    if rest.endswith("/"):
        rest = rest[:-1]
    if "/" in rest:
        raise _bad(field, spec, "a path is not accepted after the host")
    if any(c.isspace() for c in rest):
        raise _bad(field, spec, "a space is not accepted in an ssh target")
    user = None
    if "@" in rest:
        userinfo, _, rest = rest.partition("@")
        if "@" in rest:  # urllib and testinfra split 'a@b@c' at different '@': refuse it outright
            raise _bad(field, spec, "'@' appears more than once: a user and a host hold no '@'")
        if ":" in userinfo:
            raise _bad(field, spec, "a password in the URL is not accepted (it would show in ps, logs and "
                                    "reports)", fix="log in with a key (ssh-agent or the ssh config's IdentityFile)")
        if userinfo.startswith("-"):
            raise _bad(field, spec, f"the user {userinfo[:40]!r} starts with '-': ssh would read it as an option")
        if not USER.fullmatch(userinfo):
            raise _bad(field, spec, f"the user {userinfo[:40]!r} is not a user name (letters, digits, '_', "
                                    "'.', '-'; at most 32; not starting with '-' or '.')")
        user = userinfo
    port_text = None
    if rest.startswith("["):
        host, close, after = rest[1:].partition("]")
        if not close or (after and not after.startswith(":")):
            raise _bad(field, spec, "an IPv6 address goes in brackets: ssh://user@[2001:db8::1]:22")
        try:
            if ipaddress.ip_address(host).version != 6:
                raise ValueError
        except ValueError:
            raise _bad(field, spec, f"{host[:60]!r} in brackets is not an IPv6 address") from None
        port_text = after[1:] if after else None
    else:
        host, colon, port_text = rest.partition(":")
        port_text = port_text if colon else None
    problem = _host_problem(host)
    if problem:
        raise _bad(field, spec, problem)
    port = None
    if port_text is not None:
        if not (port_text.isascii() and port_text.isdigit() and len(port_text) <= 5 and 1 <= int(port_text) <= 65535):
            raise _bad(field, spec, f"the port {port_text[:20]!r} is not a number from 1 to 65535")
        port = int(port_text)
    return SshTarget(host=host, user=user, port=port)


def ssh_argv(target: SshTarget, command: str | None, *, config: str | None = None,
             control_path: str | None = None, timeout_s: int = 15, persist_s: int = 60,
             control: str | None = None) -> list[str]:
    """The whole ssh command line for one remote `command`: hostctl's options, then the user and
    port as option arguments and the host after `--` (after `--` ssh reads no more options, and
    it does not re-read the words after the host as options either). `control`: an `-O` command
    to the master connection (`exit`) instead of a remote command."""
    argv = ["ssh"]
    if config:
        argv += ["-F", config]
    # BatchMode: no password or host-key prompt can hang a root command; the host key must be known.
    argv += ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={timeout_s}"]
    if control_path:
        argv += ["-o", "ControlMaster=auto", "-o", f"ControlPersist={persist_s}s", "-o", f"ControlPath={control_path}"]
    if target.user:
        argv += ["-l", target.user]
    if target.port:
        argv += ["-p", str(target.port)]
    if control:
        argv += ["-O", control]
    return argv + ["--", target.host] + ([command] if command is not None else [])


def trusted_config(path: str, field: str) -> str:
    """The real path of the ssh config `path` names, once hostctl.safefs finds the way to it and
    the file itself safe (every folder and the file root's or the invoking user's, writable by no
    one else; a sticky folder such as /tmp is fine for their own entries). Exit 2 when the file is
    missing or not a file; exit 3 (safefs.UntrustedPathError, naming the path, its owner and mode)
    otherwise. ssh then reads that real path: nothing on the way to it can be swapped."""
    problem = control_problem(path)
    if problem or not path:
        raise InputError(f"{field}: the path {path!r} {problem or 'is empty'}")
    real = os.path.realpath(os.path.expanduser(path))
    try:
        with safefs.opened_dir(os.path.dirname(real)) as fd:
            st = os.stat(os.path.basename(real), dir_fd=fd, follow_symlinks=False)
            if not stat.S_ISREG(st.st_mode):
                raise InputError(f"{field}: {real} is not a regular file",
                                 fix="name an ssh config file (see ssh_config(5))")
            safefs.check_file_stat(real, st, real)
    except safefs.UntrustedPathError as exc:
        exc.message = (f"{field}: {exc.message}; ssh runs the commands an ssh config names (ProxyCommand, "
                       "Match exec) as root, so hostctl uses one only when no one but root and you can change it")
        exc.fix = ("write your own ssh config (owned by root or you, mode 0600, in a folder only you can write) and "
                   "name that one; do not copy this one without reading what it runs")
        raise
    except OSError as exc:
        raise InputError(f"{field}: cannot read the ssh config {path}: {exc.strerror}",
                         fix="name an existing ssh config file (see ssh_config(5))") from None
    return real
