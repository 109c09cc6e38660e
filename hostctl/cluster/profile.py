"""The cluster profile (`cluster.toml`): which hosts take part, how, and the checks that need no
host at all (schema, roles, ranks, addresses, ports, the API key's source).

Two shapes, both served by existing engines (README "More than one host"):
  - replicas: `replica` hosts each serve the whole recipe; one `router` host runs vllm-router
    in front of them;
  - one model across hosts: a `leader` (node rank 0, serves the API) and `follower`s (ranks
    1..N-1, headless) run one vLLM with tensor parallel inside a host and pipeline parallel
    across hosts (`--nnodes/--node-rank/--master-addr/--master-port`).

Everything here is pure: `parse_cluster(dict)` on a snapshot of the file. What needs the
members' host profiles and recipes (TP, the service identity) is hostctl.cluster.plan.
"""

from __future__ import annotations

import ipaddress
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, model_validator

from hostctl import safetext
from hostctl.config import KeyEnvName, Written, _format_validation
from hostctl.errors import InputError
from hostctl.safepaths import HostDir
from hostctl.safetext import ImageRef, Printable

MemberRole = Literal["leader", "follower", "replica", "router"]
MULTI_NODE_ROLES = ("leader", "follower")
REPLICA_ROLES = ("replica", "router")
# What hostctl passes the key to Compose as when the profile names a file (never written to disk).
KEY_FILE_VAR = "HOSTCTL_CLUSTER_API_KEY"
DEFAULT_STATE_ROOT = "/var/lib/hostctl/cluster"
ROUTER_PORT = 30000
MASTER_PORT = 29501
# Private means RFC 1918 and IPv6 unique-local (RFC 4193), not Python's `is_private`, which also
# counts documentation and benchmark ranges that a real private network never uses.
PRIVATE_NETS = tuple(ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7"))


def address_problem(text: str) -> str | None:
    """Why an address cannot carry cluster traffic (None: it can)."""
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return f"expected an IP address such as 192.168.1.20 or 127.0.0.1, got {text!r}"
    if ip.is_unspecified or ip.is_multicast:
        return f"{text} is not one host's address"
    if getattr(ip, "ipv4_mapped", None):
        return f"{text}: write the IPv4 address itself ({ip.ipv4_mapped})"
    if not (ip.is_loopback or any(ip.version == n.version and ip in n for n in PRIVATE_NETS)):
        return (f"{text} is not a private or loopback address: the traffic between hosts (the API, vLLM's "
                "TCPStore, NCCL and Gloo) is unencrypted, and the engines warn that their distributed "
                "channel can be made to run code; keep the cluster on a private network")
    return None


def _ssh_target(v: str) -> str:
    from hostctl import sshtarget

    try:
        sshtarget.parse(v, "ssh")
    except InputError as exc:
        raise ValueError(exc.message.removeprefix("ssh: ")) from None
    return v


def _absolute(v: str) -> str:
    if not v.startswith("/"):
        raise ValueError(f"expected an absolute path, got {v!r}")
    return v


# A file named by an absolute path (checked where it is used: owner and mode).
AbsoluteFile = Annotated[Printable, AfterValidator(_absolute)]
Address = Annotated[str, safetext.rule(address_problem)]


class Member(Written):
    name: str = Field(pattern=r"^[a-z][a-z0-9-]{0,23}$", description="the member's name (--member NAME)")
    role: MemberRole
    address: Address = Field(description="the host's private or loopback address")
    profile: Printable | None = Field(default=None, max_length=4000,
                                      description="its host profile (TOML), relative to cluster.toml; not for the router")
    facts: Printable | None = Field(default=None, max_length=4000,
                                    description="a facts snapshot of that host, for `plan` run elsewhere")
    rank: int | None = Field(default=None, ge=0, le=63, description="node rank (leader 0, followers 1..N-1)")
    api_port: int | None = Field(default=None, ge=1, le=65535,
                                 description="the API port (router: its port); default the profile's")
    state_dir: HostDir | None = Field(default=None, description="where this member keeps its state and project")
    ssh: Annotated[str, AfterValidator(_ssh_target)] | None = Field(
        default=None, max_length=1000,
        description="ssh://[user@]host[:port]: how doctor and the group take-down reach this host "
        "(the SSH transport of `verify --host`; no query options)")
    ssh_config: AbsoluteFile | None = Field(default=None, max_length=4000,
                                            description="an ssh config file for `ssh` (absolute; owned by root or the "
                                            "invoking user and writable by no one else, checked when it is used)")

    @model_validator(mode="after")
    def _fields_for_role(self) -> "Member":
        if self.role == "router":
            if self.profile is not None:
                raise ValueError("profile: a router serves no model; remove it (the router's settings are [router])")
        elif self.profile is None:
            raise ValueError(f"profile: required for a {self.role} (the host profile it serves with)")
        if self.role in MULTI_NODE_ROLES:
            if self.rank is None:
                raise ValueError(f"rank: required for a {self.role} (its node rank; the leader is 0)")
            if self.role == "leader" and self.rank != 0:
                raise ValueError(f"rank: the leader is node rank 0, got {self.rank}")
            if self.role == "follower" and self.rank == 0:
                raise ValueError("rank: node rank 0 is the leader's; a follower has 1..N-1")
        elif self.rank is not None:
            raise ValueError(f"rank: only leader and follower have a node rank, not a {self.role}")
        if self.ssh_config is not None and self.ssh is None:
            raise ValueError("ssh_config: only for a host reached over `ssh`; add ssh or remove ssh_config")
        return self


class RouterSettings(Written):
    image: ImageRef = Field(default="hostctl/vllm-router:0.1.17", description="the router image (hostctl.images router)")
    policy: Literal["round_robin", "random", "power_of_two", "cache_aware"] = "round_robin"
    health_check_interval_s: int = Field(default=10, ge=1, le=3600,
                                         description="seconds between the router's health checks of each replica")
    health_failure_threshold: int = Field(default=2, ge=1, le=100,
                                          description="failed checks before a replica is taken out")
    metrics_port: int = Field(default=29000, ge=1, le=65535,
                              description="vllm-router's Prometheus port (on 127.0.0.1)")
    internal_port: int = Field(default=29001, ge=1, le=65535,
                               description="vllm-router's own port (on 127.0.0.1), behind hostctl's gate on the "
                                           "router's address")


class ClusterProfile(Written):
    name: str = Field(pattern=r"^[a-z][a-z0-9-]{0,23}$")
    description: str = Field(default="", max_length=1000)
    socket_ifname: str = Field(default="lo", pattern=r"^[A-Za-z0-9_.:-]{1,15}$",
                               description="the interface NCCL and Gloo use (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME)")
    master_port: int = Field(default=MASTER_PORT, ge=1024, le=65535,
                             description="the leader's port for vLLM's multi-node rendezvous")
    collective_timeout_s: int = Field(default=120, ge=5, le=3600,
                                      description="doctor --level full: how long a member's all-reduce waits for "
                                      "every other member to join")
    api_key_env: KeyEnvName | None = Field(default=None, description="the environment variable holding the API key")
    api_key_file: AbsoluteFile | None = Field(default=None, description="a file (mode 0600) holding the API key")
    router: RouterSettings = Field(default_factory=RouterSettings)
    hosts: list[Member] = Field(min_length=1, max_length=64)

    @model_validator(mode="after")
    def _cluster(self) -> "ClusterProfile":
        _check_members(self)
        return self

    # ------------------------------------------------------------ views

    @property
    def mode(self) -> Literal["multi-node", "replicas"]:
        return "multi-node" if self.hosts[0].role in MULTI_NODE_ROLES else "replicas"

    def member(self, name: str) -> Member:
        for m in self.hosts:
            if m.name == name:
                return m
        raise InputError(f"--member: {name!r} is not a host of cluster {self.name}",
                         details=[f"hosts: {', '.join(m.name for m in self.hosts)}"],
                         fix="pass --member with one of the names above")

    def by_role(self, *roles: str) -> list[Member]:
        return [m for m in self.hosts if m.role in roles]

    @property
    def leader(self) -> Member | None:
        return next((m for m in self.hosts if m.role == "leader"), None)

    @property
    def router_member(self) -> Member | None:
        return next((m for m in self.hosts if m.role == "router"), None)

    @property
    def key_var(self) -> str | None:
        """The variable the rendered files read the key from (${VAR:?...})."""
        return self.api_key_env or (KEY_FILE_VAR if self.api_key_file else None)

    def state_dir(self, member: Member) -> str:
        return member.state_dir or f"{DEFAULT_STATE_ROOT}/{self.name}/{member.name}"

    def project(self, member: Member) -> str:
        return f"hc-{self.name}-{member.name}"[:41]

    def api_port(self, member: Member, profile_port: int | None = None) -> int:
        if member.api_port is not None:
            return member.api_port
        if member.role == "router":
            return ROUTER_PORT
        return profile_port or 8000


def _check_members(c: ClusterProfile) -> None:
    """Rules across hosts; each message names the field (hosts[i].FIELD)."""
    names: dict[str, int] = {}
    for i, m in enumerate(c.hosts):
        if m.name in names:
            raise ValueError(f"hosts[{i}].name: {m.name!r} is already hosts[{names[m.name]}]'s; each host needs its own")
        names[m.name] = i
    roles = {m.role for m in c.hosts}
    if roles & set(MULTI_NODE_ROLES) and roles & set(REPLICA_ROLES):
        raise ValueError("hosts[].role: a cluster is either one model across hosts (leader, follower) or replicas "
                         f"behind a router (replica, router), not both (found {', '.join(sorted(roles))}); write "
                         "two cluster profiles")
    if roles & set(MULTI_NODE_ROLES):
        leaders = [i for i, m in enumerate(c.hosts) if m.role == "leader"]
        if len(leaders) != 1:
            raise ValueError(f"hosts[].role: one model across hosts needs exactly one leader, found {len(leaders)}")
        if len(c.hosts) < 2:
            raise ValueError("hosts: one model across hosts needs a leader and at least one follower")
        seen: dict[int, int] = {}
        for i, m in enumerate(c.hosts):
            if m.rank in seen:
                raise ValueError(f"hosts[{i}].rank: node rank {m.rank} is already hosts[{seen[m.rank]}]'s; "
                                 "each host needs its own rank")
            seen[m.rank] = i
        missing = sorted(set(range(len(c.hosts))) - set(seen))
        if missing:
            raise ValueError(f"hosts[].rank: {len(c.hosts)} hosts need ranks 0..{len(c.hosts) - 1}; missing "
                             f"{', '.join(map(str, missing))} (found {', '.join(map(str, sorted(seen)))})")
    else:
        routers = [m for m in c.hosts if m.role == "router"]
        if len(routers) != 1:
            raise ValueError(f"hosts[].role: replicas need exactly one router, found {len(routers)}")
        if not any(m.role == "replica" for m in c.hosts):
            raise ValueError("hosts[].role: a router needs at least one replica behind it")
    if c.api_key_env and c.api_key_file:
        raise ValueError("api_key_env, api_key_file: give one source for the API key, not both")
    needs_key = roles & set(REPLICA_ROLES) or any(not ipaddress.ip_address(m.address).is_loopback for m in c.hosts)
    if needs_key and not (c.api_key_env or c.api_key_file):
        why = ("the router authorises itself to the replicas with it" if roles & set(REPLICA_ROLES)
               else "the API is reachable beyond this machine")
        raise ValueError(f"api_key_env: required ({why}); name the environment variable that holds the key, or set "
                         "api_key_file")
    # Ports on one address are shared: the API ports, the router's, and the master port.
    taken: dict[tuple[str, int], str] = {}
    for i, m in enumerate(c.hosts):
        if m.api_port is None:
            continue
        key = (m.address, m.api_port)
        if key in taken:
            raise ValueError(f"hosts[{i}].api_port: {m.address}:{m.api_port} is already {taken[key]}'s")
        taken[key] = f"hosts[{names[m.name]}] ({m.name})"
    router = next((m for m in c.hosts if m.role == "router"), None)
    if router is not None and router.api_port == c.router.metrics_port:
        raise ValueError(f"router.metrics_port: {c.router.metrics_port} is also the router's api_port")
    if router is not None and ("127.0.0.1", c.router.metrics_port) in taken:
        raise ValueError(f"router.metrics_port: 127.0.0.1:{c.router.metrics_port} is already "
                         f"{taken[('127.0.0.1', c.router.metrics_port)]}'s API port")
    if router is not None:
        port = c.router.internal_port
        if port in (c.api_port(router), c.router.metrics_port):
            raise ValueError(f"router.internal_port: {port} is also the router's "
                             + ("api_port" if port == c.api_port(router) else "metrics_port"))
        if ("127.0.0.1", port) in taken:
            raise ValueError(f"router.internal_port: 127.0.0.1:{port} is already {taken[('127.0.0.1', port)]}'s API port")
    leader = next((m for m in c.hosts if m.role == "leader"), None)
    if leader is not None and (leader.address, c.master_port) in taken:
        raise ValueError(f"master_port: {leader.address}:{c.master_port} is also "
                         f"{taken[(leader.address, c.master_port)]}'s API port")
    dirs: dict[str, str] = {}
    for i, m in enumerate(c.hosts):
        if m.state_dir is None:
            continue
        key = f"{m.address} {m.state_dir}"
        if key in dirs:
            raise ValueError(f"hosts[{i}].state_dir: {m.state_dir} is already {dirs[key]}'s on {m.address}")
        dirs[key] = m.name


def parse_cluster(data: Any, source: str = "cluster profile") -> ClusterProfile:
    if not isinstance(data, dict):
        raise InputError(f"{source} is not valid", details=[f"expected a table at the top level, got {type(data).__name__}"])
    from pydantic import ValidationError

    try:
        return ClusterProfile.model_validate(data)
    except ValidationError as exc:
        raise _format_validation(exc, source) from None


def load_cluster(path: Path) -> ClusterProfile:
    from hostctl.safeload import load_toml

    if not path.is_file():
        raise InputError(f"cluster profile {str(path)[:200]} does not exist", fix="pass --cluster PATH to a cluster.toml")
    return parse_cluster(load_toml(path, "cluster profile"), str(path))


def read_key(cluster: ClusterProfile, environ: dict[str, str] | None = None) -> str:
    """The API key's value, from the variable or the file the profile names (never printed)."""
    env = os.environ if environ is None else environ
    if cluster.api_key_env:
        value = (env.get(cluster.api_key_env) or "").strip()
        if not value:
            raise InputError(f"api_key_env: {cluster.api_key_env} is not set (or empty)",
                             fix=f"export {cluster.api_key_env} with the cluster's API key")
        return value
    if cluster.api_key_file:
        from hostctl import safefs

        p = Path(cluster.api_key_file)
        try:
            # a key file another user owns or can write (or reached through their link) is refused
            # (exit 3): whoever can change it chooses the key root's router uses
            raw = safefs.read_trusted(p, max_bytes=4096)
            st = os.stat(p)
        except (OSError, safefs.TooLargeError, safefs.NotRegularFileError) as exc:
            raise InputError(f"api_key_file: cannot read {p}: {getattr(exc, 'strerror', None) or exc}") from None
        value = raw.decode("utf-8", "replace").strip()
        if st.st_mode & 0o077:
            raise InputError(f"api_key_file: {p} is readable by others (mode {st.st_mode & 0o777:o})",
                             fix=f"chmod 600 {p}")
        if len(value) < 6 or not re.fullmatch(r"[\x21-\x7e]+", value):
            raise InputError(f"api_key_file: {p} does not hold one key of at least 6 printable characters")
        return value
    return ""
