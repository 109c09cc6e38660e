"""The vLLM serve flags hostctl owns, and how argparse would read a token as one of them; the few
a recipe sets that hostctl reads (READ, last: tool calling, the output cap); and the runtime
environment variables a recipe may not set (OWNED_ENV, env_refusal).

hostctl decides where the server listens and what credentials it holds (DESIGN.md "Trust model
(root)"): a recipe, a tuning axis or anything else that contributes serve arguments may not set
these in any spelling vLLM's parser accepts. That parser is vLLM's FlexibleArgumentParser, which
rewrites argv before argparse sees it (vllm/utils/argparse_utils.py, parse_args), and argparse:
  - `--flag_name` is `--flag-name` (underscores up to the first `.` become dashes),
  - `-O<level>` / `-O=<level>` is `--optimization-level <level>`,
  - a token that starts with `-` and has a `.` before any `=` is a dotted key: `KEY.a.b VALUE`
    (or `KEY.a.b=VALUE`; `KEY.a+ V1,V2` for a list) is removed, with the token after it when no
    `=` is given, whatever that token is, and `KEY <json>` is appended at the END of argv, so it
    beats an earlier KEY: `--api-ke.x K` sets the API key, `--host.x H` replaces the host;
  - `--config FILE` reads flags from a YAML file (owned: hostctl cannot see what it sets);
  - argparse takes any unambiguous prefix of a long option (`--hos` is `--host`), `--flag=value`,
    and the short aliases vLLM defines (none for an owned flag in vLLM 0.32: SHORT_ALIASES).
A single-dash token reaches only single-dash option strings (argparse matches `-x...` against
the option strings that begin with `-x`, never against `--...`), so only SHORT_ALIASES matter.
`vllm_argv` is that rewrite; `normalise` is the option name one token ends up as; `owned` and
`effective` read tokens only through them.

Why refusing every prefix is safe without vLLM installed: a prefix of an owned flag either
resolves to it (unique in vLLM's parser: it must be refused) or is ambiguous there (vLLM itself
exits with an error: refusing it costs nothing). It would cost something only if a prefix of an
owned flag were itself one of vLLM's own option names; none is (checked against vLLM 0.32's
parser in the demo image: tests/system/test_serveflags_vllm.py, which also runs the rewrite).
"""

from __future__ import annotations

import ipaddress
import json
import re
from typing import NamedTuple

# Each owned flag and why hostctl, not a recipe, sets it.
OWNED: dict[str, str] = {
    "--host": "the address the API listens on: the profile decides it (loopback unless it opts in with a key)",
    "--port": "the port the API listens on: the profile's runtime.api_port",
    "--uds": "a Unix socket instead of host and port: another place the API would listen",
    "--api-key": "the API key: it reaches the server only as VLLM_API_KEY from the environment at start",
    "--hf-token": "a Hugging Face token: a secret on the command line shows in compose.yaml and `ps`",
    "--served-model-name": "the model id clients ask for: the recipe's served_name",
    "--model": "the checkpoint: the profile's runtime.model_dir, mounted read-only at /model",
    "--max-model-len": "the context: the recipe's context",
    "--config": "a YAML file of further flags, which could set any flag above unseen",
}
SHORT_ALIASES: dict[str, str] = {}
# On a member of one model across hosts, the cluster plan owns the rendezvous flags too
# (hostctl.cluster.plan.CLUSTER_FLAGS); these are vLLM 0.32's short aliases among them.
CLUSTER_ALIASES: dict[str, str] = {"-tp": "--tensor-parallel-size", "-pp": "--pipeline-parallel-size",
                                   "-n": "--nnodes", "-r": "--node-rank", "-dpa": "--data-parallel-address"}
# The canonical spellings a recipe may still write, and what hostctl does with each instead of
# passing it on: vLLM-MoET's recipes carry --max-model-len equal to their context (config checks
# it is), and --hf-token VALUE is moved out of argv into the 0600 env file as HF_TOKEN.
ACCEPTED_CANONICAL = ("--max-model-len", "--hf-token")


class Owned(NamedTuple):
    flag: str          # the owned flag the token resolves to (or may resolve to)
    value: str | None  # the value given with `=`, if any


def _first_pass(token: str) -> list[str]:
    """What vLLM's first pass makes of one token, before dotted keys: the name of a `--` token
    with its underscores (up to the first `.`) as dashes; `-O<level>` as two tokens."""
    if token.startswith("--"):
        name, eq, value = token.partition("=")
        head, dot, tail = name[2:].partition(".")
        return ["--" + head.replace("_", "-") + dot + tail + eq + value]
    if token.startswith("-O") and token != "-O":
        return ["--optimization-level", token[3:] if token[2] == "=" else token[2:]]
    return [token]


def _dotted(token: str) -> bool:
    # vLLM's test: starts with '-' and has a '.' (one only in the value after '=' does not count)
    return token.startswith("-") and "." in token.partition("=")[0]


def normalise(token: str) -> tuple[str, str | None]:
    """(option, value after '=') as argparse receives a token from vLLM's rewrite: a dotted key
    is its KEY (`--api-ke.x` is `--api-ke`), underscores in a `--` name are dashes; the value is
    kept as written (a dotted key's real value is JSON: vllm_argv)."""
    name, eq, value = token.partition("=")
    if _dotted(token):
        name = name.split(".", 1)[0]
    if name.startswith("--"):
        name = "--" + name[2:].replace("_", "-")
    return name, (value if eq else None)


def _merge(into: dict, new: dict) -> None:
    # vLLM merges the dotted values of one KEY: dicts recursively, lists concatenated, else the later wins
    for k, v in new.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        elif isinstance(v, list) and isinstance(into.get(k), list):
            into[k] = into[k] + v
        else:
            into[k] = v


_SIZE = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")


def _leaf(value: str) -> object:
    """A dotted key's value as vLLM reads it: JSON, else a size (`80g` is 80*10**9, `2K` is
    2*2**10; a decimal with a binary unit is not one) or an integer, else the string."""
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        pass
    text = value.strip()
    size = _SIZE.fullmatch(text)
    if size:
        number, unit = size.groups()
        if unit in "kmgt":
            return int(float(number) * 10 ** (3 * ("kmgt".index(unit) + 1)))
        return int(number) * 2 ** (10 * ("KMGT".index(unit) + 1)) if "." not in number else value
    try:
        return int(text)
    except ValueError:
        return value


def vllm_argv(argv: list[str]) -> list[str]:
    """argv as vLLM 0.32's FlexibleArgumentParser hands it to argparse (module docstring): the
    first pass, then each dotted key (and the token it takes as its value) removed and appended
    at the end as `KEY <json>`. A dotted key with nothing after it makes vLLM fail; here its
    value is the empty string."""
    first: list[str] = []
    for i, token in enumerate(argv):
        if token == "-O" and i + 1 < len(argv) and argv[i + 1] in ("0", "1", "2", "3"):
            first.append("--optimization-level")
        else:
            first += _first_pass(token)
    out: list[str] = []
    dicts: dict[str, dict] = {}
    i = 0
    while i < len(first):
        token = first[i]
        if not _dotted(token):
            out.append(token)
            i += 1
            continue
        name, eq, value = token.partition("=")
        if not eq:
            value = first[i + 1] if i + 1 < len(first) else ""
            i += 1
        i += 1
        leaf: object
        if name.endswith("+"):
            name, leaf = name[:-1], value.split(",")
        else:
            leaf = _leaf(value)
        key, *path = name.split(".")
        for part in reversed(path):
            leaf = {part: leaf}
        _merge(dicts.setdefault(key, {}), leaf if isinstance(leaf, dict) else {})
    for key, value in dicts.items():
        out += [key, json.dumps(value)]
    return out


def owned(token: str, flags=OWNED, aliases: dict[str, str] | None = None) -> Owned | None:
    """The flag of `flags` (default: OWNED) vLLM's parser could read `token` as, or None. An
    ambiguous prefix (`--h`, `--p`) names the first owned flag it could be: vLLM would refuse it
    anyway. A token vLLM's first pass splits (`-O--host=x`) is owned if any part is."""
    aliases = SHORT_ALIASES if aliases is None else aliases
    for part in _first_pass(token):
        hit = _owned_one(part, flags, aliases)
        if hit is not None:
            return hit
    return None


def _owned_one(token: str, flags, aliases: dict[str, str]) -> Owned | None:
    if not token.startswith("-"):
        return None
    name, value = normalise(token)
    if name in ("-", "--"):
        return None
    if not name.startswith("--"):
        if name in aliases:
            return Owned(aliases[name], value)
        # -xVALUE: argparse splits a short option from its glued value
        for alias, flag in aliases.items():
            if name.startswith(alias):
                return Owned(flag, name[len(alias):])
        return None
    if len(name) <= 2:
        return None
    for flag in flags:
        if flag.startswith(name):
            return Owned(flag, value)
    return None


def refusal(token: str) -> str | None:
    """Why a token a recipe contributes to the server's argv cannot be there, or None."""
    hit = owned(token)
    if hit is None:
        return None
    shown = token if hit.value is None else token.split("=", 1)[0] + "=..."
    spelled = "" if shown.split("=", 1)[0] == hit.flag else f" (vLLM reads it as {hit.flag})"
    return f"{shown[:80]!r}{spelled} is a flag hostctl sets itself: {OWNED[hit.flag]}"


def effective(argv: list[str]) -> dict[str, str | None]:
    """What vLLM's parser ends up with for each owned flag in a rendered argv: the last value
    given in any spelling (argparse keeps the last) after vLLM's rewrite (vllm_argv: a dotted
    key's JSON comes last and wins, and the token it swallows is no flag), or None when the flag
    is absent. A flag with no value following counts as the empty string."""
    out: dict[str, str | None] = {flag: None for flag in OWNED}
    argv = vllm_argv(argv)
    i = 0
    while i < len(argv):
        # already rewritten: read each token once more would split `-O...` a second time
        hit = _owned_one(argv[i], OWNED, SHORT_ALIASES)
        if hit is not None:
            if hit.value is not None:
                out[hit.flag] = hit.value
            else:
                out[hit.flag] = argv[i + 1] if i + 1 < len(argv) else ""
                i += 1
        i += 1
    return out


# ---------------------------------------------------------------- options hostctl only reads

class ReadOption(NamedTuple):
    shortest: str      # the shortest prefix vLLM's parser takes as the option: no other option begins with it
    takes_value: bool  # False: a switch (argparse's BooleanOptionalAction, `--x` / `--no-x`)


# vLLM 0.32 options a recipe may set that hostctl reads (hostctl.service.clientconfig tells clients
# what the server does). The prefixes are checked against vLLM's own parser, as is what `last`
# reads (tests/system/test_serveflags_vllm.py).
READ: dict[str, ReadOption] = {
    "--enable-auto-tool-choice": ReadOption("--enable-a", False),
    "--no-enable-auto-tool-choice": ReadOption("--no-enable-a", False),
    "--override-generation-config": ReadOption("--override-g", True),
}


def last(argv: list[str], flags: tuple[str, ...]) -> tuple[str, str | None] | None:
    """The last of `flags` (keys of READ) that vLLM's parser reads in argv, in any spelling it
    accepts (after vllm_argv: underscores, dotted keys, a prefix no shorter than READ's), with its
    value (after `=` or the next token; None for a switch); None when none is given. argparse keeps
    the last occurrence of an option, and of a `--x` / `--no-x` pair, the last of the two."""
    found: tuple[str, str | None] | None = None
    argv = vllm_argv(argv)
    i = 0
    while i < len(argv):
        name, value = normalise(argv[i])
        flag = next((f for f in flags if name.startswith(READ[f].shortest) and f.startswith(name)), None)
        if flag is not None:
            if READ[flag].takes_value and value is None:
                value = argv[i + 1] if i + 1 < len(argv) else ""
                i += 1
            found = (flag, value)
        i += 1
    return found


# ---------------------------------------------------------------- the runtime's environment

# A recipe's `env` reaches the server's process as it is. These names are hostctl's to set, or
# change what runs in the root container, where the server listens or who may call it: no recipe
# (and no tuning axis) sets them. Each with why (vLLM 0.32's vllm/envs.py in the demo image).
OWNED_ENV: dict[str, str] = {
    "VLLM_API_KEY": "the API key: hostctl passes it from the profile's runtime.api_key_env, where plan, redaction "
                    "and the exposure check see it; a second key here would be none of those",
    "VLLM_SERVER_DEV_MODE": "registers /collective_rpc, /sleep, /reset_prefix_cache, /update_weights ... outside "
                            "the paths the API key guards",
    "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "lets any caller load a LoRA adapter from any path at run time",
    "VLLM_PLUGINS": "loads plugin entry points: code chosen at start runs in the root container",
    "VLLM_ALLOW_INSECURE_SERIALIZATION": "lets vLLM's internal channels unpickle, which runs code",
    "VLLM_LOGGING_CONFIG_PATH": "a logging dictConfig file, which can construct any class (run code)",
    "VLLM_DEBUG_LOG_API_SERVER_RESPONSE": "writes every response into the container log that doctor bundles collect",
    "VLLM_PORT": "the base of vLLM's internal ports: where it listens",
    "VLLM_LOOPBACK_IP": "the address vLLM's internal sockets use: where it listens",
    "VLLM_DP_MASTER_IP": "the data-parallel rendezvous address: where it listens (the cluster plan sets it)",
    "VLLM_DP_MASTER_PORT": "the data-parallel rendezvous port: where it listens (the cluster plan sets it)",
    "VLLM_NIXL_SIDE_CHANNEL_HOST": "the NIXL KV-transfer side channel's address: another listener",
    "VLLM_NIXL_SIDE_CHANNEL_PORT": "the NIXL KV-transfer side channel's port: another listener",
    "VLLM_EC_SIDE_CHANNEL_HOST": "the encoder-cache side channel's address: another listener",
    "VLLM_EC_SIDE_CHANNEL_PORT": "the encoder-cache side channel's port: another listener",
    "VLLM_P2P_SIDE_CHANNEL_HOST": "the P2P KV side channel's address: another listener",
    "VLLM_P2P_SIDE_CHANNEL_PORT": "the P2P KV side channel's port: another listener",
    "VLLM_MOONCAKE_BOOTSTRAP_PORT": "the Mooncake bootstrap server's port: another listener",
    "PATH": "which python3 the server command runs",
    "HF_HUB_OFFLINE": "the runtime runs offline, on the checkpoint hostctl checked (the image sets it)",
    "TRANSFORMERS_OFFLINE": "the runtime runs offline, on the checkpoint hostctl checked (the image sets it)",
}
OWNED_ENV_PREFIXES: dict[str, str] = {
    "LD_": "the dynamic loader (LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT) loads code into the server",
    "PYTHON": "Python's start-up (PYTHONPATH, PYTHONSTARTUP, PYTHONHOME) loads code into the server",
}
# VLLM_HOST_IP is where vLLM's internal (distributed) sockets bind: a recipe may keep them on
# loopback, as the demo recipe does; any other address is the cluster plan's to set.
LOOPBACK_ONLY_ENV = ("VLLM_HOST_IP",)


def env_refusal(name: str, value: object = None) -> str | None:
    """Why the runtime's environment variable `name` (set to `value`) cannot come from a recipe, or None."""
    if name in LOOPBACK_ONLY_ENV:
        try:
            if ipaddress.ip_address(str(value)).is_loopback:
                return None
        except ValueError:
            pass
        return (f"{name} outside loopback is where vLLM's internal sockets listen; a recipe may set it to 127.0.0.1 "
                "only (the cluster plan sets a member's address)")
    why = OWNED_ENV.get(name) or next((w for p, w in OWNED_ENV_PREFIXES.items() if name.startswith(p)), None)
    return f"{name} is not a recipe's to set: {why}" if why else None
