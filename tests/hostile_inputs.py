"""A generator of hostile but honest inputs: bad profiles, recipes, facts snapshots, files that are
not what they claim, and paths that point where nothing should be written, each run in-process
through the CLI's main(argv) so thousands take seconds.

Every case has a class (what kind of bad input it is), the argv, the files it writes, and what
must happen: the exit codes allowed (2 for bad input: refused, the field named; 0 for benign
inputs that must keep working) and a text the error must name. A case fails when hostctl crashes
(exit 70, a traceback, an exception out of main), accepts a harmful value (exit 0/1 where 2 was
due), refuses a benign one, or does not name the field.

`python3 benchmarks/hostile_inputs.py` runs every case; tests/unit/test_hostile_inputs.py keeps
one case per class.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
HOSTS = ROOT / "runtime" / "hosts"
RECIPES = ROOT / "runtime" / "recipes"
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
REFUSED = frozenset({2})
OK = frozenset({0})


@dataclass
class Case:
    cls: str  # the class of bad input, e.g. "profile/bool-as-number"
    argv: list[str]  # "{w}" is replaced by the case's work directory
    files: dict[str, bytes] = field(default_factory=dict)  # name in {w} -> content
    expect: frozenset[int] = REFUSED
    names: str | None = None  # a text the stderr must contain (the field)
    what: str = ""  # one line: the value tried
    max_s: float | None = None  # input that costs too much: a bound on the run (generous, ~100x)

    def label(self) -> str:
        return f"{self.cls}: {self.what}"


@dataclass
class Result:
    case: Case
    code: int | None
    stdout: str
    stderr: str
    seconds: float
    crashed: str | None = None  # an exception that escaped main

    @property
    def problem(self) -> str | None:
        if self.crashed:
            return f"exception out of main: {self.crashed}"
        if self.code == 70 or "Traceback (most recent call last)" in self.stderr:
            return f"internal error (exit {self.code}): {self.stderr.strip().splitlines()[:2]}"
        if self.code not in self.case.expect:
            kind = "accepted a harmful value" if self.case.expect == REFUSED else "refused a benign input"
            return f"{kind}: exit {self.code}, expected {sorted(self.case.expect)}; {self.stderr.strip()[-300:]!r}"
        if self.case.names and self.case.names not in self.stderr:
            return f"does not name {self.case.names!r}: {self.stderr.strip()[-300:]!r}"
        if self.case.max_s is not None and self.seconds > self.case.max_s:
            return f"took {self.seconds:.1f} s (bound {self.case.max_s} s): input that costs too much"
        return None


# ---------------------------------------------------------------- writing the inputs


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # JSON's escapes are TOML basic-string escapes
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(type(v))


def toml_text(data: dict) -> str:
    lines = [f"{json.dumps(k)} = {toml_value(v)}" for k, v in data.items() if not isinstance(v, (dict, list))
             or (isinstance(v, list) and not all(isinstance(x, dict) for x in v))]
    for k, v in data.items():
        if isinstance(v, dict):
            lines.append(f"\n[{k}]")
            lines += [f"{json.dumps(kk)} = {toml_value(vv)}" for kk, vv in v.items()]
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            for item in v:
                lines.append(f"\n[[{k}]]")
                lines += [f"{json.dumps(kk)} = {toml_value(vv)}" for kk, vv in item.items()]
    return "\n".join(lines) + "\n"


def base_profile() -> dict:
    return {
        "name": "hostile",
        "recipe": "recipe.yaml",
        "drives": [{"name": "d1", "identity": "serial:S1HOSTILE", "swap": "1GiB"}],
        "memory": {"host_reserve": "4GiB"},
        "storage": {"compile_cache": "/var/lib/hostctl/compile-cache"},
        "runtime": {"api_host": "127.0.0.1", "api_port": 18599},
    }


_RECIPE = yaml.safe_load((RECIPES / "demo-cpu-tiny-moe.yaml").read_text())


def base_recipe() -> dict:
    return copy.deepcopy(_RECIPE)


FACTS = (HOSTS / "demo-cpu.facts.json").read_bytes()


def plan_case(cls: str, what: str, *, profile: dict | None = None, recipe: dict | None = None,
              profile_text: str | bytes | None = None, recipe_text: str | bytes | None = None,
              expect=REFUSED, names: str | None = None, command: tuple[str, ...] = ("plan", "--json")) -> Case:
    files = {"facts.json": FACTS}
    p = profile_text if profile_text is not None else toml_text(profile or base_profile())
    # Escaped, not raw: a raw NEL or U+2028 is a line break to YAML and would reach hostctl as a space.
    r = recipe_text if recipe_text is not None else yaml.dump(recipe or base_recipe(), Dumper=_DUMPER, sort_keys=False,
                                                              allow_unicode=False)
    files["hostctl.toml"] = p.encode() if isinstance(p, str) else p
    files["recipe.yaml"] = r.encode() if isinstance(r, str) else r
    return Case(cls, [*command, "--config", "{w}/hostctl.toml", "--facts", "{w}/facts.json"], files, expect, names, what)


def with_path(data: dict, dotted: str, value) -> dict:
    d = copy.deepcopy(data)
    cur = d
    parts = dotted.split(".")
    for p in parts[:-1]:
        cur = cur[int(p)] if isinstance(cur, list) else cur.setdefault(p, {})
    if isinstance(cur, list):
        cur[int(parts[-1])] = value
    else:
        cur[parts[-1]] = value
    return d


# ---------------------------------------------------------------- the payloads

CONTROL = ["\n", "\r", "\t", "\x00", "\x1b", "\x7f", "\u2028", "\x85", "\ufeff"]
# Each control character at the start, in the middle and at the end of a value.
INJECT = [f"x{c}ExecStartPre=/bin/sh -c id" for c in ("\n", "\r\n")] + [
    form.format(c) for c in CONTROL for form in ("x{}y", "{}xy", "xy{}")]
SYSTEM_DIRS = ["/", "/etc", "/usr", "/usr/local/models", "/bin", "/sbin", "/lib", "/lib64", "/boot", "/proc",
               "/sys", "/dev", "/dev/shm/x", "/run", "/run/user/0", "/root", "/root/models", "/var", "/home",
               "/var/lib", "/var/lib/docker", "/var/lib/docker/volumes/x", "/var/run/docker.sock", "/tmp", "/mnt",
               "/srv", "/opt", "/etc/hostctl"]
PATH_FORMS = [lambda p: p, lambda p: p + "/", lambda p: "/." + p, lambda p: "//" + p.lstrip("/"),
              lambda p: "/mnt/hostctl/../.." + p if p != "/" else "/mnt/..", lambda p: p + "/."]
BAD_PATHS = ["relative/dir", "", "/mnt/a/../b", "/mnt/" + "a" * 300, "/" + "a/" * 2500, "~/models", "./x"]
BOOLS = [True, False]
# ssh:// targets that would hand ssh an option (in the user, the host, either side of a second '@',
# percent-encoded), ssh options by the query, a password, and every malformed part.
SSH_HOSTILE = [
    "http://x", "ssh://", "ssh://u@h:99999", "ssh://u@h\nProxyCommand=id", "ssh://-oProxyCommand=id", "u@h",
    "ssh://-oProxyCommand=id@h", "ssh://u@-oProxyCommand=id", "ssh://u@-oProxyCommand=id@h", "ssh://a@b@h",
    "ssh://-oProxyCommand=id@b@h", "ssh://%2doProxyCommand=id@h", "ssh://u@%2doProxyCommand=id",
    "ssh://u@h?ssh_config=/tmp/x", "ssh://u@h?ssh_identity_file=/tmp/k", "ssh://u@h?ssh_extra_args=-oProxyCommand=id",
    "ssh://u@h#x", "ssh://u@h/x", "ssh://u:PASSWORD@h", "ssh://:PASSWORD@h", "ssh://u@h:0", "ssh://u@h:-22",
    "ssh://u@h:+22", "ssh://u@h:22x", "ssh://u@h:22:22", "ssh://u@[::1", "ssh://u@[127.0.0.1]:22",
    "ssh://u@h x", "ssh://u@h;id", "ssh://u@$(id)", "ssh://`id`@h", "ssh://u%41@h", "ssh://u@h_x", "ssh://u@1.2.3",
    "ssh://@h", "ssh://u@", "ssh://u@:22", "ssh://u@[fe80::1%25eth0]", "ssh://u@[fe80::1%eth0]:22", "ssh://" + "a" * 300, "SSH://u@h", "x" * 1001,
    *(f"ssh://u@h{c}x" for c in CONTROL)]
SSH_BENIGN = ["ssh://root@127.0.0.1:2222", "ssh://admin@gpu-box.example.com", "ssh://gpu-box", "ssh://[::1]:22",
              "ssh://ops_user.2@10.0.0.2", "ssh://root@gpu-box."]


def profile_cases() -> Iterator[Case]:
    base = base_profile()
    # booleans taken as numbers, and numbers of the wrong kind
    for path in ["runtime.api_port", "storage.swappiness_converting", "storage.swappiness_serving",
                 "storage.page_cluster", "drives.0.swap_priority", "gpu.power_limit_w"]:
        for v in BOOLS:
            yield plan_case("profile/bool-as-number", f"{path} = {v}", profile=with_path(base, path, v),
                            names=path.replace(".0.", "[0]."))
        for v in [8000.0, "8000", [1], {"a": 1}]:
            if path == "gpu.power_limit_w" and isinstance(v, float):
                continue
            yield plan_case("profile/wrong-type", f"{path} = {v!r}", profile=with_path(base, path, v),
                            names=path.replace(".0.", "[0]."))
    # out of range
    for path, values in {"runtime.api_port": [0, -1, 65536, 10**12], "storage.swappiness_serving": [-1, 201, 10**9],
                         "storage.page_cluster": [-1, 11], "drives.0.swap_priority": [-2, 40000],
                         "gpu.power_limit_w": [0, -300, 1e6, 10**7]}.items():
        for v in values:
            yield plan_case("profile/out-of-range", f"{path} = {v}", profile=with_path(base, path, v),
                            names=path.replace(".0.", "[0]."))
    # values that turn a guard off, and absurd sizes
    for key in ["container_ram", "container_ram_swap", "host_reserve"]:
        for v in [0, "0", "0GiB", "0g", 1, "1k", "100m", "1e308GiB", "inf", "nan", "-1GiB", "99999999999999TiB",
                  "1.5e3g", True, 1.5]:
            yield plan_case("profile/guard-disabled-or-absurd-size", f"memory.{key} = {v!r}",
                            profile=with_path(base, f"memory.{key}", v), names=f"memory.{key}")
    for raw in ["inf", "nan", "-inf", "1e308", "+inf"]:
        text = toml_text(base).replace("[gpu]", "") + f"\n[gpu]\npower_limit_w = {raw}\n"
        yield plan_case("profile/infinity", f"gpu.power_limit_w = {raw}", profile_text=text, names="gpu.power_limit_w")
        text = toml_text(with_path(base, "gpu.power_limits_w", {})).replace("\"power_limits_w\" = {}", "") \
            + f"power_limits_w = {{\"0\" = {raw}}}\n"
        yield plan_case("profile/infinity", f"gpu.power_limits_w.0 = {raw}", profile_text=text, names="power_limits_w")
    # api_key_env names that break Compose's ${VAR:?} guard or are guessable
    for v in ["MY-KEY", "1KEY", "KEY WITH SPACE", "KEY}", "$KEY", "KEY:-default", "", "PATH", "HOME", "USER", "PWD",
              "K" * 200, "KEY\n"]:
        p = with_path(with_path(base, "runtime.api_key_env", v), "runtime.api_host", "0.0.0.0")
        yield plan_case("profile/api-key-env-name", f"api_key_env = {v!r}", profile=p, names="runtime.api_key_env")
    # injection into strings that reach rendered files
    for path in ["name", "runtime.image", "runtime.project", "runtime.api_host", "description", "recipe",
                 "drives.0.name", "drives.0.mountpoint", "storage.compile_cache", "runtime.model_dir"]:
        for payload in INJECT:
            value = ("/mnt/" + payload) if path in ("drives.0.mountpoint", "storage.compile_cache",
                                                     "runtime.model_dir") else payload
            yield plan_case("profile/injection", f"{path} = {value!r}", profile=with_path(base, path, value),
                            names=path.split(".")[-1])
    for payload in INJECT + ["discard,ro", "ro remount", "x=y z"]:
        yield plan_case("profile/injection", f"drives[0].mount_options = [{payload!r}]",
                        profile=with_path(base, "drives.0.mount_options", [payload]), names="mount_options")
    for v in ["Hostctl:Upper", "img name", "img;rm -rf /", "img$HOME", "img`id`", "-rm", "img:tag@sha256:bad",
              "a" * 300]:
        yield plan_case("profile/image-reference", f"runtime.image = {v!r}", profile=with_path(base, "runtime.image", v),
                        names="runtime.image")
    for v in ["/mnt/a b", "/mnt/%h", "/mnt/x'y", '/mnt/x"y', "/mnt/x\\y", "/mnt/$HOME", "/mnt/a;b"]:
        yield plan_case("profile/unit-path-characters", f"drives[0].mountpoint = {v!r}",
                        profile=with_path(base, "drives.0.mountpoint", v), names="mountpoint")
    # system directories as mountpoints, bind sources and the project directory
    for where in ["drives.0.mountpoint", "storage.compile_cache", "storage.planes_cache", "runtime.model_dir",
                  "runtime.models_dir", "runtime.project_dir"]:
        for d in SYSTEM_DIRS:
            for form in PATH_FORMS:
                value = form(d)
                yield plan_case("profile/system-directory", f"{where} = {value!r}", profile=with_path(base, where, value),
                                names=where.split(".")[-1])
        for value in BAD_PATHS:
            if where == "storage.compile_cache" and not value.startswith("/") and value and "/" not in value:
                continue
            yield plan_case("profile/bad-path", f"{where} = {value[:60]!r}", profile=with_path(base, where, value),
                            names=where.split(".")[-1])
    # drive identities
    for ident in ["path:/dev/../etc/passwd", "path:/etc/passwd", "path:/dev/", "path:/dev/./sda", "path:/dev//sda",
                  "path:/dev/sda\n", "path:relative", "by-id:../../nvme0n1", "by-id:a/b", "by-id:..", "by-id:",
                  "by-id:/dev/disk/by-id/../../sda", "serial:a\nb", "serial:", "wwn:x\x00", "uuid:1234", "/dev/sda",
                  "serial:" + "x" * 300]:
        yield plan_case("profile/drive-identity", f"identity = {ident!r}",
                        profile=with_path(base, "drives.0.identity", ident), names="identity")
    for v in ["GPU-x\ny", "GPU-$(id)", "0; rm", "9999", True]:
        yield plan_case("profile/gpu-device-id", f"gpu.devices = [{v!r}]", profile=with_path(base, "gpu.devices", [v]),
                        names="gpu.devices")
    # unknown keys and structure
    for path, v in [("runtime.api_prot", 1), ("memorry.host_reserve", "1GiB"), ("drives", "d1"), ("storage", [1]),
                    ("runtime", "x")]:
        yield plan_case("profile/structure", f"{path} = {v!r}", profile=with_path(base, path, v), names=path.split(".")[0])


def recipe_cases() -> Iterator[Case]:
    base = base_recipe()
    for key, payloads in {"id": INJECT + ["a b", "%h", "../x", "x/../y", "$X", "'q'", "a" * 200, "-x"],
                          "served_name": INJECT + ["a b", "'", "${X}", "x\"y", "a" * 300],
                          "model": [f"/opt/m{c}x" for c in CONTROL],
                          "summary": INJECT, "role": INJECT,
                          "image": INJECT + ["UPPER/img", "img name", "img$X"]}.items():
        for v in payloads:
            yield plan_case("recipe/injection", f"{key} = {v!r}", recipe=with_path(base, key, v), names=key)
    for key, values in {"context": [True, False, 0, -1, 2**40, 1e30, "2048", 2048.0, None],
                        "load_timeout_s": [True, 0, -5, 10**9, 1e308, "300"],
                        "watchdog_s": [False, 0, 10**9],
                        "requires.gpus": [True, -1, 1000, 1.5],
                        "requires.vram_gb": [float("inf"), float("nan"), 1e308, -1, True],
                        "requires.host_ram_gb": [float("inf"), 1e308, True],
                        "conversion.host_ram_swap_gib": [float("inf"), float("nan"), 1e308, -1],
                        "conversion.cache_free_gib": [float("inf"), 1e308],
                        "conversion.layers": [0, True, 10**6]}.items():
        for v in values:
            yield plan_case("recipe/number", f"{key} = {v!r}", recipe=with_path(base, key, v), names=key.split(".")[-1])
    # env: names, non-strings, control characters
    for name in ["MY-VAR", "1X", "A B", "X=Y", "", "X\nY", "Ä"]:
        r = copy.deepcopy(base)
        r["env"] = {name: "1"}
        yield plan_case("recipe/env-name", f"env key {name!r}", recipe=r, names="env")
    # env names hostctl owns or that change what runs, listens or authenticates (hostctl.serveflags.OWNED_ENV)
    for name, value in [("VLLM_SERVER_DEV_MODE", "1"), ("VLLM_API_KEY", "second-key"), ("LD_PRELOAD", "/model/x.so"),
                        ("PYTHONPATH", "/model"), ("VLLM_PLUGINS", "evil"), ("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "1"),
                        ("VLLM_HOST_IP", "0.0.0.0"), ("VLLM_NIXL_SIDE_CHANNEL_HOST", "0.0.0.0")]:
        r = copy.deepcopy(base)
        r["env"][name] = value
        yield plan_case("recipe/env-owned", f"env.{name} = {value!r}", recipe=r, names=f"env.{name}")
    for v in [True, False, 8, 1.1, None, [1], {"a": 1}]:
        r = copy.deepcopy(base)
        r["env"]["VLLM_X"] = v
        yield plan_case("recipe/env-not-a-string", f"env.VLLM_X = {v!r}", recipe=r, names="env.VLLM_X")
    for c in CONTROL:
        r = copy.deepcopy(base)
        r["env"]["VLLM_X"] = f"a{c}VLLM_Y=b"
        yield plan_case("recipe/env-control-character", f"env value with {c!r}", recipe=r, names="env.VLLM_X")
    text = (RECIPES / "demo-cpu-tiny-moe.yaml").read_text()
    for raw in ["no", "yes", "on", "off", "010", "1.10", "0x1F", "1_000", "~", "null", "true", "1e3", ".5"]:
        yaml_text = text.replace('VLLM_CPU_KVCACHE_SPACE: "1"', f"VLLM_CPU_KVCACHE_SPACE: {raw}")
        expect = OK if raw in ("1e3",) else REFUSED  # PyYAML reads 1e3 as the string "1e3"
        yield plan_case("recipe/yaml11-rewrite", f"env value {raw} unquoted", recipe_text=yaml_text, expect=expect,
                        names=None if expect == OK else "VLLM_CPU_KVCACHE_SPACE")
    # serve_args
    for entry in [f"--max-num-seqs 2{c}--x" for c in CONTROL] + ["--x\ny 1", "max-num-seqs 2", "--bad$flag 1",
                                                                 "--api-token abcdefghij", "--db-password hunter22",
                                                                 "-- 1"]:
        r = copy.deepcopy(base)
        r["serve_args"] = [*r["serve_args"], entry]
        yield plan_case("recipe/serve-args", f"serve_args += {entry!r}", recipe=r, names="serve_args")
    # serve flags hostctl owns (hostctl.serveflags), in every spelling vLLM's argparse accepts
    owned = [f"{f} {v}" for f in ("--host", "--hos", "--ho", "--h", "--HOST") for v in ("0.0.0.0",)]
    owned += ["--host=0.0.0.0", "--hos=0.0.0.0", "--port 80", "--por=80", "--po 80", "--api-key sk-hostile",
              "--api-ke hostile-key", "--api_key hostile-key", "--api-k=hostile-key", "--hf-tok hf_abcdefghijklmnop",
              "--hf_token=hf_abcdefghijklmnop", "--served-model-name other", "--served 1", "--model /etc",
              "--mod /etc", "--uds /tmp/x.sock", "--config /tmp/x.yaml", "--conf=/tmp/x.yaml", "--max_model_len 2048",
              "--max-model 2048", "--enforce-eager --hos=0.0.0.0", "--enforce-eager --port=1"]
    # vLLM's dotted keys: KEY.sub VALUE is rewritten to KEY <json> at the end of argv (hostctl.serveflags)
    owned += ["--api-ke.x hostile-key", "--api_key.x=hostile-key", "--uds.x /tmp/x.sock", "--host.x 0.0.0.0",
              "--ho.x=0.0.0.0", "--port.x 80", "--hf-token.x hf_abcdefghijklmnop", "--served-model-name.x other",
              "--model.x /etc", "--config.x /tmp/x.yaml", "--max-model-len.x 2048", "--enforce-eager --uds.x=/tmp/s"]
    for entry in owned:
        r = copy.deepcopy(base)
        r["serve_args"] = [*r["serve_args"], entry]
        expect = OK if entry == "--HOST 0.0.0.0" else REFUSED  # argparse is case-sensitive: not vLLM's --host
        yield plan_case("recipe/owned-flag", f"serve_args += {entry!r}", recipe=r, expect=expect,
                        names=None if expect == OK else "serve_args[")
        yield plan_case("recipe/owned-flag-render", f"render, serve_args += {entry!r}", recipe=r, expect=expect,
                        names=None if expect == OK else "serve_args[", command=("render", "--out", "{w}/out"))
    for entry in ["--max-model-len 2048", "--hf-config-path /models/x", "--headless", "--hf-overrides {}",
                  "--compilation-config.mode 3", "--hf-overrides.a.b 1"]:
        r = copy.deepcopy(base)
        r["serve_args"] = [*r["serve_args"], entry]
        yield plan_case("benign/serve-flag", f"serve_args += {entry!r}", recipe=r, expect=OK)
    for v in [1, True, None, ["--x"]]:
        r = copy.deepcopy(base)
        r["serve_args"] = [*r["serve_args"], v]
        yield plan_case("recipe/serve-args-type", f"serve_args += {v!r}", recipe=r, names="serve_args")
    for ph in ["{model:../../etc}", "{model:a/b}", "{model:..}", "{nope}", "{model:x y}"]:
        r = copy.deepcopy(base)
        r["env"]["VLLM_P"] = ph
        yield plan_case("recipe/placeholder", f"env value {ph}", recipe=r, names="env.VLLM_P")
    for k, v in [("smoke.0.max_completion_tokens", True), ("smoke.1.max_completion_tokens", 10**9),
                 ("smoke.1.kind", "shell")]:
        yield plan_case("recipe/smoke", f"{k} = {v!r}", recipe=with_path(base, k, v), names="smoke")
    r = copy.deepcopy(base)
    r["smoke"] = [{"name": "needle", "kind": "needle", "expect": "x", "tokens": 10**6}]
    yield plan_case("recipe/smoke", "needle tokens beyond the context", recipe=r, names="smoke")
    # YAML shapes: duplicate keys, alias bombs, deep nesting, not a mapping
    yield plan_case("recipe/duplicate-key", "context twice", recipe_text=text + "context: 999999\n", names="duplicate key")
    yield plan_case("recipe/duplicate-key", "env key twice",
                    recipe_text=text.replace("env:\n", "env:\n  VLLM_HOST_IP: 0.0.0.0\n"), names="duplicate key")
    for levels, width in [(9, 9), (12, 4), (20, 2), (6, 30)]:
        lines = ["a0: &a0 [x, y, z]"]
        for i in range(1, levels):
            lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
        bomb = text + "warmup:\n" + "\n".join("  " + line for line in lines) + "\n"
        yield plan_case("recipe/alias-bomb", f"{levels} levels x {width}", recipe_text=bomb, names="alias")
    for depth in [40, 500, 5000]:
        deep = text + "warmup:\n  x: " + "[" * depth + "]" * depth + "\n"
        yield plan_case("recipe/deep-nesting", f"{depth} levels", recipe_text=deep, names="nests deeper")
        deep_map = text + "warmup:\n  x: " + "{a: " * depth + "1" + "}" * depth + "\n"
        yield plan_case("recipe/deep-nesting", f"{depth} mapping levels", recipe_text=deep_map, names="nests deeper")
    yield plan_case("recipe/recursive-anchor", "an anchor inside itself", recipe_text=text + "warmup: &w\n  self: *w\n")
    for top in ["- a\n- b\n", "just a string\n", "", "42\n", "---\n...\n", "? [a, b]\n: 1\n", "!!python/object:os.system {}\n"]:
        yield plan_case("recipe/not-a-mapping", f"top level {top[:20]!r}", recipe_text=top)


ENCODINGS = {
    "utf-16": lambda t: t.encode("utf-16"),
    "utf-16-be-bom": lambda t: b"\xfe\xff" + t.encode("utf-16-be"),
    "utf-32": lambda t: t.encode("utf-32"),
    "latin-1": lambda t: t.replace("CPU demo", "CPU démo").replace("tiny MoE", "tiny MoE é").encode("latin-1"),
    "binary": lambda t: b"\x7fELF\x02\x01\x01\x00" + os.urandom(64),
    "nul-inside": lambda t: t.encode()[:40] + b"\x00" + t.encode()[40:],
    "utf-16-no-bom": lambda t: t.encode("utf-16-le"),
    "huge": lambda t: t.encode() + b"#" * (1024 * 1024 + 10),
}


def file_cases() -> Iterator[Case]:
    profile = toml_text({**base_profile(), "description": "CPU demo, tiny MoE"})
    recipe = (RECIPES / "demo-cpu-tiny-moe.yaml").read_text()
    for name, enc in ENCODINGS.items():
        yield plan_case("file/profile-encoding", name, profile_text=enc(profile), names="hostctl.toml")
        yield plan_case("file/recipe-encoding", name, recipe_text=enc(recipe), names="recipe.yaml")
    # a UTF-8 BOM is what editors on Windows write: accepted
    yield plan_case("file/utf8-bom", "profile", profile_text=b"\xef\xbb\xbf" + profile.encode(), expect=OK)
    yield plan_case("file/utf8-bom", "recipe", recipe_text=b"\xef\xbb\xbf" + recipe.encode(), expect=OK)
    for depth in [50, 5000]:
        yield plan_case("file/profile-deep-nesting", f"{depth} levels",
                        profile_text=profile + "x = " + "[" * depth + "]" * depth + "\n", names="nests deeper")
    yield plan_case("file/profile-duplicate-key", "name twice", profile_text=profile + 'name = "again"\n',
                    names="hostctl.toml")
    facts = {"facts.json": FACTS, "hostctl.toml": profile.encode(), "recipe.yaml": recipe.encode()}
    special = [("a directory", "{w}"), ("/dev/zero", "/dev/zero"), ("/proc/self/mem", "/proc/self/mem"),
               ("a 5000-character path", "/tmp/" + "a" * 5000), ("a missing file", "{w}/missing.toml"),
               ("a path through a file", "{w}/hostctl.toml/x"), ("/dev/null", "/dev/null"), ("empty", "")]
    for what, path in special:
        yield Case("file/config-path", ["plan", "--config", path, "--facts", "{w}/facts.json"], dict(facts), REFUSED,
                   None, what)
        yield Case("file/facts-path", ["plan", "--config", "{w}/hostctl.toml", "--facts", path], dict(facts), REFUSED,
                   None, what)
        yield Case("file/log-path", ["doctor", "--config", "{w}/hostctl.toml", "--facts", "{w}/facts.json", "--log", path],
                   dict(facts), REFUSED, "--log", what)


def facts_cases() -> Iterator[Case]:
    good = json.loads(FACTS)
    desktop = json.loads((HOSTS / "pro6000x2-desktop.facts.json").read_bytes())
    profile = toml_text(base_profile()).encode()
    recipe = (RECIPES / "demo-cpu-tiny-moe.yaml").read_bytes()
    desktop_profile = (HOSTS / "pro6000x2-desktop.toml").read_text().replace(
        'recipe = "dsv4-flash-0731-tp2-400k"', f'recipe = "{RECIPES / "dsv4-flash-0731-tp2-400k.yaml"}"').encode()

    def case(what: str, data, *, names=None, raw: bytes | None = None, on_desktop=False, expect=REFUSED) -> Case:
        files = {"facts.json": raw if raw is not None else json.dumps(data).encode(),
                 "hostctl.toml": desktop_profile if on_desktop else profile, "recipe.yaml": recipe}
        return Case("facts/" + what.split(":")[0], ["plan", "--config", "{w}/hostctl.toml", "--facts", "{w}/facts.json"],
                    files, expect, names, what)

    for topo in ["FOO", "", "nvlink", 3, "PHB?"]:
        d = copy.deepcopy(desktop)
        d["gpus"]["pairs"][0]["topology"] = topo
        yield case(f"unknown-topology: {topo!r}", d, names="topology", on_desktop=True)
    for depth in [40, 5000, 100000]:
        yield case(f"deep-nesting: {depth}", None, raw=b'{"notes": ' + b"[" * depth + b"]" * depth + b"}",
                   names="nests deeper")
    for raw, what in [(b'{"memory": NaN}', "nan"), (b'{"memory": Infinity}', "infinity"), (b"[1, 2]", "a list"),
                      (b"", "empty"), (b"{", "truncated"), ('{"hostname": "caf\xe9"}'.encode("latin-1"), "latin-1"),
                      ('{"hostname": "x"}'.encode("utf-16"), "utf-16"), (b'{"schema": "hostctl.facts/v9"}', "schema")]:
        yield case(f"not-a-snapshot: {what}", None, raw=raw)
    for path, v in [("memory.mem_total_bytes", -1), ("memory.mem_total_bytes", "lots"), ("numa.cpu_count", 1e308),
                    ("gpus.devices", "none"), ("engine.containers", [{"id": 1}]), ("extra_key", 1),
                    ("memory.swap_total_bytes", None)]:
        d = with_path(good, path, v)
        yield case(f"bad-field: {path} = {v!r}", d, names=path.split(".")[0])


def output_cases() -> Iterator[Case]:
    profile = toml_text(base_profile()).encode()
    recipe = (RECIPES / "demo-cpu-tiny-moe.yaml").read_bytes()
    files = {"facts.json": FACTS, "hostctl.toml": profile, "recipe.yaml": recipe, "afile": b"x"}
    for out in ["/proc", "/proc/x", "/sys/kernel/x", "/dev/null/x", "/dev/shm/x", "{w}/afile", "{w}/afile/sub", "/",
                "/etc", "/etc/hostctl/project", "/usr/local/x", "/tmp/" + "b" * 5000, "/var", "/home"]:
        yield Case("output/render-out", ["render", "--config", "{w}/hostctl.toml", "--facts", "{w}/facts.json",
                                         "--out", out], dict(files), REFUSED, None, out[:60])
    for bundle in ["{w}", "/proc/x", "/dev/null/x", "/tmp/" + "c" * 5000, "{w}/missing-dir/b.tar.gz", "/sys/x.tgz"]:
        yield Case("output/doctor-bundle", ["doctor", "--config", "{w}/hostctl.toml", "--facts", "{w}/facts.json",
                                            "--bundle", bundle], dict(files), REFUSED, "--bundle", bundle[:60])


def verify_cases() -> Iterator[Case]:
    """`verify --host`: refused (exit 2, --host named) before any connection is tried."""
    files = {"hostctl.toml": toml_text(base_profile()).encode(),
             "recipe.yaml": yaml.dump(base_recipe(), Dumper=_DUMPER, sort_keys=False).encode()}
    for v in SSH_HOSTILE:
        yield Case("verify/host", ["verify", "--config", "{w}/hostctl.toml", "--host", v], dict(files), REFUSED,
                   "--host", v[:60])


def benign_cases() -> Iterator[Case]:
    """Inputs that look odd and are fine: they must keep working (through render and its checks)."""
    base = base_recipe()
    for v in ["it's", 'say "hi"', "a $HOME b", "100%", "a#b #c", " lead and trail ", "x'y\"z$w\\v", "naïve ünïcode",
              "{\"json\": [1, 2]}", "", "=", "a=b=c"]:
        r = copy.deepcopy(base)
        r["env"]["VLLM_ODD"] = v
        yield plan_case("benign/env-value", f"env.VLLM_ODD = {v!r}", recipe=r, expect=OK,
                        command=("render", "--out", "{w}/out"))
    r = copy.deepcopy(base)
    r["serve_args"] = [*r["serve_args"], "--hf-token hf_abcdefghijklmnopqrstuvwxyz12"]
    yield plan_case("benign/secret-serve-arg", "--hf-token moved to the env file", recipe=r, expect=OK,
                    command=("render", "--out", "{w}/out"))
    yield plan_case("benign/served-name", "org/Model-Name", recipe=with_path(base, "served_name", "org/Model-Name_v1.2"),
                    expect=OK)
    yield plan_case("benign/recipe-id", "vLLM-MoET style id", recipe=with_path(base, "id", "deepseek-v4-flash/pro6000x2-tp2"),
                    expect=OK)
    p = base_profile()
    for d in ["/srv/hostctl/cache", "/mnt/nvme0/compile", "/var/lib/hostctl/cc", "/home/user/cache", "/tmp/hc-cache",
              "/srv/cache/", "/srv/./cache"]:
        yield plan_case("benign/bind-source", d, profile=with_path(p, "storage.compile_cache", d), expect=OK)
    for ident in ["by-id:nvme-Samsung_SSD_990_PRO_4TB_S7KGNU0X123456", "path:/dev/nvme0n1",
                  "by-id:/dev/disk/by-id/nvme-Model_S1", "wwn:eui.0025388b31b0e6a1", "serial:WD-WX12A3456789"]:
        yield plan_case("benign/drive-identity", ident, profile=with_path(p, "drives.0.identity", ident), expect=OK)


# ---------------------------------------------------------------- the cluster profile (cluster.toml)


def base_replicas() -> dict:
    member = {"address": "127.0.0.1", "profile": "hostctl.toml", "facts": "facts.json"}
    return {"name": "hostile-c", "api_key_env": "HC_HOSTILE_KEY",
            "router": {"health_check_interval_s": 2, "health_failure_threshold": 1},
            "hosts": [{"name": "gw", "role": "router", "address": "127.0.0.1", "api_port": 30100},
                      {"name": "r1", "role": "replica", **member, "api_port": 8201},
                      {"name": "r2", "role": "replica", **member, "api_port": 8202}]}


def base_multinode() -> dict:
    member = {"address": "127.0.0.1", "profile": "hostctl.toml", "facts": "facts.json"}
    return {"name": "hostile-pp", "master_port": 29600, "socket_ifname": "lo",
            "hosts": [{"name": "lead", "role": "leader", "rank": 0, **member, "api_port": 8211},
                      {"name": "follow", "role": "follower", "rank": 1, **member, "api_port": 8212}]}


def cluster_case(cls: str, what: str, cluster: dict | None = None, *, text: str | bytes | None = None,
                 expect=REFUSED, names: str | None = None, command: tuple[str, ...] = ("plan", "--json"),
                 member: str | None = None) -> Case:
    """`hostctl COMMAND --cluster {w}/cluster.toml`, every member a demo host profile on the demo
    facts snapshot (no host is read)."""
    c = text if text is not None else toml_text(cluster or base_replicas())
    files = {"cluster.toml": c.encode() if isinstance(c, str) else c, "facts.json": FACTS,
             "hostctl.toml": toml_text(base_profile()).encode(),
             "recipe.yaml": yaml.dump(base_recipe(), Dumper=_DUMPER, sort_keys=False).encode()}
    argv = [*command, "--cluster", "{w}/cluster.toml", *(["--member", member] if member is not None else [])]
    return Case(cls, argv, files, expect, names, what)


def field(path: str) -> str:
    """hosts.1.api_port -> hosts[1].api_port, as the errors name it."""
    import re

    return re.sub(r"\.(\d+)\.", r"[\1].", path)


def cluster_cases() -> Iterator[Case]:
    rep, mn = base_replicas(), base_multinode()
    for path in ["hosts.1.api_port", "hosts.1.rank", "master_port", "router.health_check_interval_s",
                 "router.health_failure_threshold", "router.metrics_port", "collective_timeout_s"]:
        base = mn if path in ("master_port", "hosts.1.rank", "collective_timeout_s") else rep
        for v in BOOLS:
            yield cluster_case("cluster/bool-as-number", f"{path} = {v}", with_path(base, path, v), names=field(path))
        for v in [8000.5, "8000", [1], {"a": 1}]:
            yield cluster_case("cluster/wrong-type", f"{path} = {v!r}", with_path(base, path, v), names=field(path))
    for path, values in {"hosts.1.api_port": [0, -1, 65536, 10**12], "master_port": [0, 80, 65536],
                         "hosts.1.rank": [-1, 64, 10**9], "router.health_check_interval_s": [0, -1, 10**6],
                         "router.health_failure_threshold": [0, 101], "router.metrics_port": [0, 70000],
                         "collective_timeout_s": [0, 4, 10**6]}.items():
        base = mn if path in ("master_port", "hosts.1.rank", "collective_timeout_s") else rep
        for v in values:
            yield cluster_case("cluster/out-of-range", f"{path} = {v}", with_path(base, path, v), names=field(path))
    # addresses: public, unspecified, multicast, not an address, with a payload
    for v in ["8.8.8.8", "1.1.1.1", "0.0.0.0", "::", "224.0.0.1", "ff02::1", "::ffff:192.168.1.2", "localhost",
              "192.168.1", "192.168.1.300", "", "2001:4860::8888", "100.64.0.1", "169.254.1.1",
              *(f"192.168.1.2{c}" for c in CONTROL)]:
        yield cluster_case("cluster/address", f"hosts[1].address = {v!r}", with_path(rep, "hosts.1.address", v),
                           names="hosts[1].address")
    # names: the member's name reaches Compose project names, container names, unit names
    for where, base in (("name", rep), ("hosts.1.name", rep)):
        for v in [*INJECT, "UPPER", "a b", "-x", "1x", "x" * 25, "", "a/b", "a..b", "a_b", "a;b", "a$b", "ä"]:
            yield cluster_case("cluster/name", f"{where} = {v!r}", with_path(base, where, v), names=field(where))
    for v in [*INJECT, "a b", "x" * 16, "", "eth0;id", "$IF"]:
        yield cluster_case("cluster/socket-ifname", f"socket_ifname = {v!r}", with_path(mn, "socket_ifname", v),
                           names="socket_ifname")
    for v in ["MY-KEY", "1KEY", "KEY WITH SPACE", "KEY}", "$KEY", "", "PATH", "HOME", "KEY\n"]:
        yield cluster_case("cluster/api-key-env-name", f"api_key_env = {v!r}", with_path(rep, "api_key_env", v),
                           names="api_key_env")
    for v in ["relative.key", "", *(f"/etc/k{c}y" for c in CONTROL)]:
        c = {k: x for k, x in rep.items() if k != "api_key_env"}
        yield cluster_case("cluster/api-key-file", f"api_key_file = {v!r}", {**c, "api_key_file": v},
                           names="api_key_file")
    yield cluster_case("cluster/api-key-source", "both api_key_env and api_key_file",
                       {**rep, "api_key_file": "/etc/hostctl/k"}, names="api_key_env, api_key_file")
    yield cluster_case("cluster/api-key-source", "no key for replicas",
                       {k: v for k, v in rep.items() if k != "api_key_env"}, names="api_key_env")
    for v in ["Hostctl:Upper", "img name", "img;rm -rf /", "img$HOME", "img`id`", "-rm", *INJECT[:4]]:
        yield cluster_case("cluster/router-image", f"router.image = {v!r}", with_path(rep, "router.image", v),
                           names="router.image")
    for v in ["least_busy", "", "ROUND_ROBIN", 1]:
        yield cluster_case("cluster/router-policy", f"router.policy = {v!r}", with_path(rep, "router.policy", v),
                           names="router.policy")
    for v in SSH_HOSTILE:
        yield cluster_case("cluster/ssh", f"hosts[1].ssh = {v[:60]!r}", with_path(rep, "hosts.1.ssh", v),
                           names="hosts[1].ssh")
    for v in SSH_BENIGN:
        yield cluster_case("cluster/ssh-benign", f"hosts[1].ssh = {v!r}", with_path(rep, "hosts.1.ssh", v), expect=OK)
    with_ssh = with_path(rep, "hosts.1.ssh", "ssh://root@10.0.0.2")
    for v in ["relative/ssh_config", "~/.ssh/config", "", *(f"/etc/ssh/c{c}x" for c in CONTROL[:4])]:
        yield cluster_case("cluster/ssh-config", f"hosts[1].ssh_config = {v!r}",
                           with_path(with_ssh, "hosts.1.ssh_config", v), names="hosts[1].ssh_config")
    yield cluster_case("cluster/ssh-config", "ssh_config without ssh",
                       with_path(rep, "hosts.1.ssh_config", "/root/.ssh/config"), names="ssh_config")
    for d in ["/", "/etc", "/usr", "/proc/x", "/dev/shm", "relative/dir", "/var/lib/docker", "/mnt/a/../b", "~/x",
              *(f"/srv/a{c}b" for c in CONTROL[:4])]:
        yield cluster_case("cluster/state-dir", f"hosts[1].state_dir = {d!r}", with_path(rep, "hosts.1.state_dir", d),
                           names="hosts[1].state_dir")
    for v in [*(f"host{c}x.toml" for c in CONTROL), "missing.toml", "/proc/self/mem", "/dev/zero", "", "x" * 4001]:
        yield cluster_case("cluster/profile-path", f"hosts[1].profile = {v[:40]!r}",
                           with_path(rep, "hosts.1.profile", v), names="hosts[1].profile")
    for v in [*(f"facts{c}.json" for c in CONTROL[:4]), "missing.json", "/dev/zero", "hostctl.toml"]:
        yield cluster_case("cluster/facts-path", f"hosts[1].facts = {v!r}", with_path(rep, "hosts.1.facts", v))
    # rules across hosts: roles, ranks, names, ports, state directories
    across = {
        "a duplicate name": (with_path(rep, "hosts.2.name", "r1"), "hosts[2].name"),
        "a duplicate API port": (with_path(rep, "hosts.2.api_port", 8201), "hosts[2].api_port"),
        "the metrics port on the router's port": (with_path(rep, "router.metrics_port", 30100), "router.metrics_port"),
        "the metrics port on a replica's port": (with_path(rep, "router.metrics_port", 8201), "router.metrics_port"),
        "two routers": (with_path(rep, "hosts.1.role", "router"), "hosts[1]"),
        "no router": (with_path(rep, "hosts.0", {**rep["hosts"][2], "name": "r0", "api_port": 8200}), "hosts[].role"),
        "a router with a profile": (with_path(rep, "hosts.0.profile", "hostctl.toml"), "profile"),
        "a replica without a profile": ({**rep, "hosts": [rep["hosts"][0], {k: v for k, v in rep["hosts"][1].items()
                                                                           if k != "profile"}]}, "profile"),
        "a replica with a rank": (with_path(rep, "hosts.1.rank", 1), "rank"),
        "an unknown role": (with_path(rep, "hosts.1.role", "worker"), "hosts[1].role"),
        "roles mixed": (with_path(rep, "hosts.2.role", "leader"), "hosts[2]"),
        "a duplicate rank": (with_path(mn, "hosts.1.rank", 0), "rank"),
        "a missing rank": (with_path(mn, "hosts.1.rank", 2), "hosts[].rank"),
        "no leader": (with_path(with_path(mn, "hosts.0.role", "follower"), "hosts.0.rank", 2), "hosts[].role"),
        "a leader alone": ({**mn, "hosts": mn["hosts"][:1]}, "hosts"),
        "the master port on the leader's API port": (with_path(mn, "master_port", 8211), "master_port"),
        "a duplicate state directory": (with_path(with_path(rep, "hosts.1.state_dir", "/srv/hc/x"),
                                                  "hosts.2.state_dir", "/srv/hc/x"), "hosts[2].state_dir"),
        "no hosts": ({**rep, "hosts": []}, "hosts"),
        "65 hosts": ({**rep, "hosts": [rep["hosts"][0]] + [{**rep["hosts"][1], "name": f"r{i}", "api_port": 9000 + i}
                                                            for i in range(64)]}, "hosts"),
        "an unknown key": ({**rep, "routr": {"x": 1}}, "routr"),
        "an unknown member key": (with_path(rep, "hosts.1.adress", "127.0.0.1"), "hosts[1].adress"),
        "hosts not a list": ({**rep, "hosts": "gw"}, "hosts"),
        "router not a table": ({**rep, "router": "x"}, "router"),
    }
    for what, (doc, name) in across.items():
        yield cluster_case("cluster/across-hosts", what, doc, names=name)
    # the service identity: another recipe or image on one host
    other = toml_text({**base_profile(), "runtime": {**base_profile()["runtime"], "image": "hostctl/other:1"}})
    c = cluster_case("cluster/identity", "another image on r2", with_path(rep, "hosts.2.profile", "other.toml"),
                     names="hosts[2].profile")
    c.files["other.toml"] = other.encode()
    yield c
    # the file itself: encodings, nesting, duplicate keys, not TOML
    text = toml_text({**rep, "description": "CPU demo, tiny MoE"})  # non-ASCII once the latin-1 form rewrites it
    for enc_name, enc in ENCODINGS.items():
        yield cluster_case("cluster/file-encoding", enc_name, text=enc(text), names="cluster.toml")
    for depth in [50, 5000]:
        yield cluster_case("cluster/deep-nesting", f"{depth} levels", text=text.replace(
            '"name" = "hostile-c"', '"name" = "hostile-c"\nx = ' + "[" * depth + "]" * depth, 1), names="nests deeper")
    yield cluster_case("cluster/duplicate-key", "name twice", text='name = "again"\n' + text, names="cluster.toml")
    for raw in ["[[hosts]\n", "hosts = [", "= 1\n", "\x00"]:
        yield cluster_case("cluster/not-toml", f"{raw!r}", text=text + raw, names="cluster.toml")
    # every command that reads a cluster profile refuses a bad one the same way, and --member is checked
    bad = with_path(rep, "hosts.1.address", "8.8.8.8")
    for command in [("plan",), ("render", "--out", "{w}/out"), ("doctor", "--json"), ("status", "--json"),
                    ("down",)]:
        yield cluster_case("cluster/every-command", f"{command[0]} with a public address", bad, command=command,
                           names="hosts[1].address")
    for command in [("plan",), ("status", "--json"), ("down",), ("up",)]:
        for v in ["nope", "R1", "r1\n", "", "x" * 300]:
            yield cluster_case("cluster/member", f"{command[0]} --member {v[:30]!r}", rep, command=command, member=v,
                               names="--member")
    # benign: both examples' shapes plan, render and report status
    for what, doc in (("replicas", rep), ("one model across hosts", mn)):
        yield cluster_case("benign/cluster", f"plan {what}", doc, expect=OK)
    # (rendering replicas needs the key's variable set for `docker compose config`: not in-process here)
    yield cluster_case("benign/cluster", "render one model across hosts", mn, expect=OK,
                       command=("render", "--out", "{w}/out"))
    yield cluster_case("benign/cluster", "private addresses, another host's member",
                       with_path(with_path(rep, "hosts.2.address", "10.1.2.3"), "hosts.1.address", "192.168.7.8"),
                       expect=OK)


def _tune_case(cls: str, what: str, tuned: str, names: str) -> Case:
    """`tune --dry-run --recipe {w}/tuned.yaml`: the profile's own recipe is the benign demo one, so
    only tune's own load of --recipe meets the value."""
    case = plan_case(cls, what, names=names, command=("tune", "--dry-run", "--recipe", "{w}/tuned.yaml"))
    case.files["tuned.yaml"] = tuned.encode()
    return case


HUGE_INTS = {"5,000 digits": "9" * 5000, "0x and 5,000 hex digits": "0x" + "f" * 5000, "2**64": str(2 ** 64),
             "-(2**63) - 1": str(-(2 ** 63) - 1)}
MIB = 1024 * 1024


def bounded_cases() -> Iterator[Case]:
    """Input that costs too much (issue 26, class 8): integers past 64 bits, alias bombs on every
    YAML route (tune --recipe, bench --suite), logs whose lines a quadratic pattern would take
    minutes over. Each is refused with exit 2 naming the field, or (a log) classified in time.
    (bench --suite reads the host first: tests/unit/test_bounded_input.py loads a suite bomb directly.)"""
    import re

    recipe = (RECIPES / "demo-cpu-tiny-moe.yaml").read_text()
    profile = toml_text(base_profile())
    for what, v in HUGE_INTS.items():
        yield plan_case("profile/huge-integer", f"api_port = {what}",
                        profile_text=profile.replace('"api_port" = 18599', f'"api_port" = {v}'), names="api_port")
        yield plan_case("recipe/huge-integer", f"context: {what}",
                        recipe_text=re.sub(r"(?m)^context: .*$", f"context: {v}", recipe), names="context")
        yield _tune_case("tune/huge-integer", f"context: {what}", re.sub(r"(?m)^context: .*$", f"context: {v}", recipe),
                         "context")
        c = toml_text(base_replicas()).replace('"api_port" = 8201', f'"api_port" = {v}')
        yield cluster_case("cluster/huge-integer", f"hosts[1].api_port = {what}", text=c, names="api_port")
        facts = re.sub(r'"mem_total_bytes": \d+', f'"mem_total_bytes": {v}', FACTS.decode(), count=1)
        if not v.startswith("0x"):  # JSON has no hex
            yield Case("facts/huge-integer", ["plan", "--config", "{w}/hostctl.toml", "--facts", "{w}/facts.json"],
                       {"facts.json": facts.encode(), "hostctl.toml": profile.encode(), "recipe.yaml": recipe.encode()},
                       REFUSED, "mem_total_bytes", what)
    for what, v in [("400 digits of GiB", "9" * 400 + "GiB"), ("5,000 digits", "9" * 5000)]:
        yield plan_case("profile/huge-size", f"drives[0].swap = {what}",
                        profile=with_path(base_profile(), "drives.0.swap", v), names="swap")
    for levels, width in [(9, 9), (20, 2)]:
        lines = ["a0: &a0 [x, y, z]"] + [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]"
                                         for i in range(1, levels)]
        bomb = recipe + "warmup:\n" + "\n".join("  " + line for line in lines) + "\n"
        yield _tune_case("tune/alias-bomb", f"{levels} levels x {width}", bomb, "alias")
    profile_b = profile.encode()
    for what, line in [("F8_E8M0 repeated", "F8_E8M0 " * (MIB // 8)), ("c10d repeated", "[c10d] " * (MIB // 7)),
                       ("NCCL INFO repeated", "NCCL INFO " * (MIB // 10)),
                       ("Killed process 1 ( repeated", "Killed process 1 (" * (MIB // 18)),
                       ("8 KiB lines of NCCL INFO", ("NCCL INFO " * 820 + "\n") * 128)]:
        yield Case("doctor/pathological-log", ["doctor", "--config", "{w}/hostctl.toml", "--facts", "{w}/facts.json",
                                               "--log", "{w}/runtime.log"],
                   {"facts.json": FACTS, "hostctl.toml": profile_b, "recipe.yaml": recipe.encode(),
                    "runtime.log": line.encode()}, frozenset({0, 1}), None, what, max_s=10.0)


def generate() -> list[Case]:
    return [*profile_cases(), *recipe_cases(), *file_cases(), *facts_cases(), *output_cases(), *benign_cases(),
            *cluster_cases(), *verify_cases(), *bounded_cases()]


# ---------------------------------------------------------------- running


def run_case(case: Case, work: Path) -> Result:
    from hostctl.cli import main

    work.mkdir(parents=True, exist_ok=True)
    for name, data in case.files.items():
        (work / name).write_bytes(data)
    argv = [a.replace("{w}", str(work)) for a in case.argv]
    out, err = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    crashed = None
    code = None
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    except BaseException as exc:  # noqa: BLE001 - the point is to see anything that escapes
        crashed = f"{type(exc).__name__}: {exc}"
    return Result(case, code, out.getvalue(), err.getvalue(), time.perf_counter() - t0, crashed)


def one_per_class(cases: list[Case]) -> list[Case]:
    seen: dict[str, Case] = {}
    for c in cases:
        seen.setdefault(c.cls, c)
    return list(seen.values())
