"""The rendered project re-read before anything is written: each systemd unit must hold exactly
the keys its template writes (an injected newline would add `ExecStartPre=` to a root unit),
compose.yaml must parse into the structure the plan describes (same command, volumes, image and
environment names), and runtime.env must read back as exactly the plan's environment.

Config validation already refuses the characters that could do this (hostctl.safetext); this is
the second line, so a value that slips past a validator still cannot shape a rendered file.
Pure functions over the rendered text and the plan.
"""

from __future__ import annotations

import re
import shlex
from functools import cache

import yaml

from hostctl import paths
from hostctl.plan.records import Plan

_UNIT_KEY = re.compile(r"^([A-Za-z][A-Za-z0-9]*)=")
_SECTION = re.compile(r"^\[([A-Za-z][A-Za-z0-9 -]*)\]$")
_ENV_LINE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$")


@cache
def template_keys(template: str) -> tuple[frozenset[tuple[str, str]], frozenset[tuple[str, str]]]:
    """(every (section, key) the template can write, the ones it always writes), read from the
    template's own text: a key inside `{% if %}` is optional."""
    text = paths.template_path(template).read_text()
    allowed, required = set(), set()
    section, depth = "", 0
    for line in text.splitlines():
        stripped = line.strip()
        if re.match(r"^\{%-?\s*if\b", stripped):
            depth += 1
            continue
        if re.match(r"^\{%-?\s*endif\b", stripped):
            depth -= 1
            continue
        if m := _SECTION.match(stripped):
            section = m.group(1)
        elif m := _UNIT_KEY.match(stripped):
            allowed.add((section, m.group(1)))
            if depth == 0:
                required.add((section, m.group(1)))
    return frozenset(allowed), frozenset(required)


def unit_problems(name: str, text: str, template: str) -> list[str]:
    allowed, required = template_keys(template)
    seen: dict[tuple[str, str], int] = {}
    problems: list[str] = []
    section = ""
    for i, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", ";")):
            continue
        if m := _SECTION.match(stripped):
            section = m.group(1)
            continue
        m = _UNIT_KEY.match(stripped)
        if m is None or stripped.endswith("\\"):
            problems.append(f"{name} line {i} is neither a section, a comment nor one Key=value line: {stripped[:80]!r}")
            continue
        key = (section, m.group(1))
        if key not in allowed:
            problems.append(f"{name} line {i}: [{section}] {m.group(1)}= is not a key its template writes")
        seen[key] = seen.get(key, 0) + 1
    problems += [f"{name}: [{s}] {k}= appears {n} times; its template writes it once" for (s, k), n in seen.items()
                 if n > 1]
    problems += [f"{name}: [{s}] {k}= is missing" for (s, k) in sorted(required - set(seen))]
    return problems


_SPECIFIER = re.compile(r"%%|%")
_VARIABLE = re.compile(r"\$\$|\$")


def _single(pattern: re.Pattern, word: str) -> str | None:
    """`word` with each doubled sign read as one; None when a lone sign is left (an expansion)."""
    lone = []
    out = pattern.sub(lambda m: m.group()[0] if len(m.group()) == 2 else lone.append(m) or "", word)
    return None if lone else out


def exec_argv(value: str) -> list[str] | None:
    """The program and arguments systemd runs for an Exec*= value as hostctl writes it
    (systemd.service(5) "Command lines"): unquoted (double quotes, backslash escapes), `%%` read
    as `%` in every word (specifiers, at load), `$$` as `$` in the arguments (variables, when it
    runs; the program's path is not expanded). None when a word holds a lone `%` or, in an
    argument, a lone `$`: systemd would run something other than the text shows."""
    try:
        words = shlex.split(value)
    except ValueError:
        return None
    out = []
    for i, word in enumerate(words):
        read = _single(_SPECIFIER, word)
        if read is not None and i > 0:
            read = _single(_VARIABLE, read)
        if read is None:
            return None
        out.append(read)
    return out


def exec_problems(name: str, text: str, want: dict[str, list[str]]) -> list[str]:
    """Each Exec*= key in `want` must read back (exec_argv) as exactly its argv."""
    got = {k: exec_argv(v) for k, _, v in (ln.partition("=") for ln in text.splitlines()) if k in want}
    return [f"{name}: {k}= does not read back as {shlex.join(argv)[:200]} (systemd would run "
            + (shlex.join(got[k])[:200] if got.get(k) else "an expanded or unreadable command") + ")"
            for k, argv in want.items() if got.get(k) != argv]


def decode_env_value(raw: str) -> str:
    """Inverse of render._env_quote (the subset of Compose's env-file syntax hostctl writes)."""
    if len(raw) >= 2 and raw[0] == raw[-1] == "'":
        return raw[1:-1]
    if len(raw) >= 2 and raw[0] == raw[-1] == '"':
        out, i, body = [], 0, raw[1:-1]
        while i < len(body):
            ch = body[i]
            if ch == "\\" and i + 1 < len(body):
                out.append(body[i + 1])
                i += 2
            elif ch == "$" and body[i + 1:i + 2] == "$":
                out.append("$")
                i += 2
            else:
                out.append(ch)
                i += 1
        return "".join(out)
    return raw


def env_problems(text: str, expected: dict[str, str]) -> list[str]:
    problems: list[str] = []
    got: dict[str, str] = {}
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = _ENV_LINE.match(line)
        if m is None:
            problems.append(f"runtime.env line {i} is not NAME=value")
            continue
        if m.group(1) in got:
            problems.append(f"runtime.env: {m.group(1)} is set twice")
        got[m.group(1)] = decode_env_value(m.group(2))
    if set(got) != set(expected):
        extra, missing = sorted(set(got) - set(expected)), sorted(set(expected) - set(got))
        problems.append("runtime.env does not hold the plan's variables"
                        + (f"; extra: {', '.join(extra)}" if extra else "") + (f"; missing: {', '.join(missing)}" if missing else ""))
    problems += [f"runtime.env: {k} does not read back as the plan's value" for k in sorted(set(got) & set(expected))
                 if got[k] != expected[k]]
    return problems


def _unescape(value: object) -> object:
    return value.replace("$$", "$") if isinstance(value, str) else value


@cache
def _service_keys() -> tuple[frozenset[str], frozenset[str]]:
    text = paths.template_path("compose.yaml.j2").read_text()
    allowed, required, depth = set(), set(), 0
    for line in text.splitlines():
        stripped = line.strip()
        if re.match(r"^\{%-?\s*if\b", stripped):
            depth += 1
        elif re.match(r"^\{%-?\s*endif\b", stripped):
            depth -= 1
        elif m := re.match(r"^ {4}([a-z_]+):", line):
            allowed.add(m.group(1))
            if depth == 0:
                required.add(m.group(1))
    return frozenset(allowed), frozenset(required)


def compose_problems(text: str, plan: Plan, env: dict[str, str]) -> list[str]:
    from hostctl.safeload import yaml_loader

    try:
        doc = yaml.load(text, Loader=yaml_loader())  # noqa: S506 - the SafeLoader subclass that refuses duplicate keys
    except yaml.YAMLError as exc:
        return [f"compose.yaml does not parse: {' '.join(str(exc).split())[:200]}"]
    rt = plan.runtime
    if not isinstance(doc, dict) or set(doc) != {"name", "services"}:
        return [f"compose.yaml: top-level keys {sorted(doc) if isinstance(doc, dict) else type(doc).__name__} are "
                "not name and services"]
    services = doc["services"]
    if not isinstance(services, dict) or set(services) != {rt.service}:
        return [f"compose.yaml: services are not exactly {rt.service!r}"]
    svc = services[rt.service]
    problems: list[str] = []
    allowed, required = _service_keys()
    keys = set(svc) if isinstance(svc, dict) else set()
    if keys - allowed:
        problems.append(f"compose.yaml: the service has keys its template never writes: {', '.join(sorted(keys - allowed))}")
    if required - keys:
        problems.append(f"compose.yaml: the service lacks {', '.join(sorted(required - keys))}")
    if problems:
        return problems
    checks = {
        "name": (_unescape(doc["name"]), rt.project),
        "image": (_unescape(svc["image"]), rt.image),
        "command": ([_unescape(a) for a in svc["command"]], rt.command),
        "volumes": ([(_unescape(v.get("source")), v.get("target")) for v in svc["volumes"]],
                    [(v.source, v.target) for v in rt.volumes]),
        "labels": ({k: _unescape(v) for k, v in svc["labels"].items()}, rt.labels),
        "environment": (sorted(svc.get("environment") or {}), ["VLLM_API_KEY"] if rt.api_key_env else []),
        "env_file": (svc["env_file"], ["runtime.env"]),
    }
    for key, (got, want) in checks.items():
        if got != want:
            problems.append(f"compose.yaml: {key} is not what the plan says")
    problems += command_problems([str(_unescape(a)) for a in svc["command"]], plan)
    return problems


def command_problems(argv: list[str], plan: Plan) -> list[str]:
    """The server's argv read the way vLLM's argparse reads the flags hostctl owns
    (hostctl.serveflags: prefixes, `=`, underscores, the last one wins): it must listen where the
    plan says and carry no credential, so `plan` and the runtime cannot disagree about the address."""
    from hostctl import serveflags

    rt = plan.runtime
    got = serveflags.effective(argv)
    problems: list[str] = []
    # A follower runs headless (no API): its plan's address is the leader's, which it waits for.
    if rt.labels.get("io.hostctl.role") != "follower":
        for flag, want in (("--host", rt.api_host), ("--port", str(rt.api_port))):
            if got[flag] != want:
                problems.append(f"compose.yaml: the server's argv makes vLLM use {flag} {got[flag]!r}, "
                                f"the plan says {want!r}")
    for flag in ("--uds", "--config", "--api-key", "--hf-token"):
        if got[flag] is not None:
            problems.append(f"compose.yaml: the server's argv sets {flag} ({serveflags.OWNED[flag]})")
    return problems


def project_problems(files: dict[str, str], plan: Plan, env: dict[str, str], templates: dict[str, str]) -> list[str]:
    """Every problem with a rendered project; empty when each file is what its template and the
    plan say."""
    problems: list[str] = []
    for name, text in files.items():
        if name.endswith(".service"):
            problems += unit_problems(name, text, templates[name])
        elif name == "runtime.env":
            problems += env_problems(text, env)
        elif name == "compose.yaml":
            problems += compose_problems(text, plan, env)
    return problems
