"""Trial and boot planning for `hostctl tune`, as a pure function of the recipe's `tuning` block
(vLLM-MoET's format: `objective`, `constraints`, `axes`).

An axis is `kind: env` (`name`), `kind: serve_json` (`arg`, `key`: one key of a JSON-valued serve
argument such as --speculative-config) or hostctl's `kind: serve_arg` (`arg`: a plain flag such as
--max-num-batched-tokens; a value of true is the bare flag, false or null removes it), with
`values`. An axis is a *restart* axis unless it says `restart: false` and names a `file_env`:
that variable points the runtime at a file that tune rewrites between trials while the server
runs (vLLM-MoET's knob-file mechanism), so its values cost no boot.

    boots  = product of the restart axes' values (one boot each; at least one)
    trials = boots x product of the runtime axes' values

Constraints are `PATH OP NUMBER` (>=, <=, ==, >, <) or a bare PATH that must be true, where PATH
starts with a probe key (decode.median_tok_s, needle.all_pass), `kv` (the KV capacity the runtime
reported: kv.full_context_requests>=2) or `qualify` (qualify.pass: the context ladder).

The sweep is counted before it is built (parse_tuning): past MAX_BOOTS boots, MAX_TRIALS trials or
MAX_VALUES values in one axis the recipe is refused (exit 2 naming the field), so a few KB of YAML
cannot make hostctl build millions of variants (vLLM-MoET's sweep.py has no limit; its bundled
recipes sweep at most 3 values, 6 boots and 12 trials).
"""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

from pydantic import ConfigDict, Field

from hostctl.data import Data
from hostctl import serveflags
from hostctl.errors import InputError

AXIS_KINDS = ("env", "serve_json", "serve_arg")
KNOB_DIR = "/run/hostctl-tune"  # where the knob files appear inside the container
_CMP = re.compile(r"^([A-Za-z_][\w.-]*)\s*(>=|<=|==|>|<)\s*(-?[\d.]+)$")
_PATH = re.compile(r"^[A-Za-z_][\w.-]*$")
SPECIAL_ROOTS = ("kv", "qualify")
# A boot is a full server start (minutes on a big model) plus its probes: 64 boots is already a
# night of a GPU host; 1,024 trials bounds the knob-file runs between them. 32 values per axis is
# ten times any bundled sweep.
MAX_BOOTS = 64
MAX_TRIALS = 1024
MAX_VALUES = 32


class Axis(Data):
    model_config = ConfigDict(frozen=True)

    index: int
    kind: str
    values: tuple
    restart: bool
    name: str | None = None  # env
    arg: str | None = None  # serve_json, serve_arg
    key: str | None = None  # serve_json
    file_env: str | None = None

    @property
    def label(self) -> str:
        if self.kind == "env":
            return str(self.name)
        if self.kind == "serve_json":
            return f"{self.arg}:{self.key}"
        return str(self.arg)


class Constraint(Data):
    model_config = ConfigDict(frozen=True)

    text: str
    path: str
    op: str | None = None  # None: the value at path must be true
    number: float | None = None

    @property
    def root(self) -> str:
        return self.path.split(".", 1)[0]

    def check(self, results: dict) -> bool | None:
        """True / False, or None when the value is not there (a probe that did not run)."""
        value = dig(results, self.path)
        if value is None:
            return None
        if self.op is None:
            return bool(value)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        return {"<": value < self.number, "<=": value <= self.number, ">": value > self.number,
                ">=": value >= self.number, "==": value == self.number}[self.op]


class Tuning(Data):
    model_config = ConfigDict(frozen=True)

    objective: str
    constraints: tuple[Constraint, ...]
    axes: tuple[Axis, ...]

    @property
    def restart_axes(self) -> list[Axis]:
        return [a for a in self.axes if a.restart]

    @property
    def runtime_axes(self) -> list[Axis]:
        return [a for a in self.axes if not a.restart]

    def probe_keys(self) -> list[str]:
        """The probes the objective and the constraints read (kv and qualify are not probes)."""
        out = []
        for path in [self.objective] + [c.path for c in self.constraints]:
            root = path.split(".", 1)[0]
            if root not in SPECIAL_ROOTS and root not in out:
                out.append(root)
        return out

    @property
    def needs_qualify(self) -> bool:
        return any(c.root == "qualify" for c in self.constraints) or self.objective.startswith("qualify.")


class Boot(Data):
    id: str
    knobs: dict[str, Any]  # restart-axis label -> value
    recipe: dict  # the recipe with this boot's knobs applied (and the knob files' env)
    knob_files: dict[str, str] = Field(default_factory=dict)  # file_env var -> container path


class Trial(Data):
    id: str
    boot: str
    knobs: dict[str, Any]  # every axis label -> value
    runtime_knobs: dict[str, Any]  # file_env var -> value written to its file


class TunePlan(Data):
    tuning: Tuning
    boots: list[Boot]
    trials: list[Trial]

    def to_dict(self) -> dict:
        return {
            "objective": self.tuning.objective,
            "constraints": [c.text for c in self.tuning.constraints],
            "axes": [{"kind": a.kind, "label": a.label, "values": list(a.values), "restart": a.restart,
                      **({"file_env": a.file_env} if a.file_env else {})} for a in self.tuning.axes],
            "boots": [{"id": b.id, "knobs": b.knobs, "env": b.recipe.get("env") or {},
                       "serve_args": b.recipe.get("serve_args") or [], "knob_files": b.knob_files} for b in self.boots],
            "trials": [{"id": t.id, "boot": t.boot, "knobs": t.knobs, "runtime_knobs": t.runtime_knobs}
                       for t in self.trials],
        }


def dig(d: Any, path: str) -> Any:
    cur = d
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


def parse_constraint(text: str, where: str) -> Constraint:
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"{where}: expected a constraint such as 'arithmetic.score>=2' or 'needle.all_pass', "
                         f"got {text!r}")
    t = text.strip()
    m = _CMP.match(t)
    if m:
        try:
            number = float(m.group(3))
        except ValueError:
            raise InputError(f"{where}: {m.group(3)!r} is not a number") from None
        return Constraint(text=t, path=m.group(1), op=m.group(2), number=number)
    if _PATH.match(t):
        return Constraint(text=t, path=t)
    raise InputError(f"{where}: cannot read {t!r}", fix="write PATH OP NUMBER (>=, <=, ==, >, <) or a bare PATH "
                     "that must be true, e.g. kv.full_context_requests>=2, needle.all_pass, qualify.pass")


def parse_tuning(tuning: dict, *, probe_keys: list[str] | None = None) -> Tuning:
    """Validate the block; every error names its field. probe_keys: the probes the tune suite has
    (the objective and constraints must name one of them, kv or qualify)."""
    if not tuning:
        raise InputError("the recipe has no tuning block", fix="add tuning: {objective, constraints, axes} to the "
                         "recipe (vLLM-MoET's format; see README, hostctl tune)")
    if not isinstance(tuning, dict):
        raise InputError(f"tuning: expected a mapping, got {type(tuning).__name__}")
    objective = tuning.get("objective")
    if not isinstance(objective, str) or not _PATH.match(objective.strip()):
        raise InputError(f"tuning.objective: expected a result path such as decode.median_tok_s, got {objective!r}")
    objective = objective.strip()
    raw_c = tuning.get("constraints") or []
    if not isinstance(raw_c, list):
        raise InputError(f"tuning.constraints: expected a list, got {raw_c!r}")
    constraints = tuple(parse_constraint(c, f"tuning.constraints[{i}]") for i, c in enumerate(raw_c))
    raw_axes = tuning.get("axes")
    if raw_axes is None:
        raw_axes = []
    if not isinstance(raw_axes, list):
        raise InputError(f"tuning.axes: expected a list of axes, got {raw_axes!r}")
    axes = tuple(_axis(a, i) for i, a in enumerate(raw_axes))
    _check_size(axes)
    labels = [a.label for a in axes]
    dupes = sorted({lb for lb in labels if labels.count(lb) > 1})
    if dupes:
        raise InputError(f"tuning.axes: {', '.join(dupes)} is swept by more than one axis")
    if probe_keys is not None:
        known = list(probe_keys) + list(SPECIAL_ROOTS)
        for where, path in [("tuning.objective", objective)] + [
                (f"tuning.constraints[{i}]", c.path) for i, c in enumerate(constraints)]:
            if path.split(".", 1)[0] not in known:
                raise InputError(f"{where}: {path!r} names no probe of the tune suite",
                                 fix=f"start it with one of: {', '.join(known)}")
    return Tuning(objective=objective, constraints=constraints, axes=axes)


def _check_size(axes: tuple[Axis, ...]) -> None:
    """Refuse a sweep larger than hostctl will plan, counted without building it."""
    boots = trials = 1
    for a in axes:
        trials *= len(a.values)
        if a.restart:
            boots *= len(a.values)
        if boots > MAX_BOOTS or trials > MAX_TRIALS:  # stop counting early: the product only grows
            break
    if boots > MAX_BOOTS or trials > MAX_TRIALS:
        shown = " x ".join(str(len(a.values)) for a in axes[:12]) + (" x ..." if len(axes) > 12 else "")
        raise InputError(f"tuning.axes: the axes' values ({shown}) make more than {MAX_BOOTS} boots or {MAX_TRIALS} "
                         f"trials; hostctl tune plans at most {MAX_BOOTS} boots and {MAX_TRIALS} trials",
                         fix="sweep fewer values (split the sweep into several recipes, or make an env axis "
                             "`restart: false` with a file_env so its values cost no boot)")


def _axis(a: Any, i: int) -> Axis:
    where = f"tuning.axes[{i}]"
    if not isinstance(a, dict):
        raise InputError(f"{where}: expected a mapping with kind and values, got {a!r}")
    kind = a.get("kind")
    if kind not in AXIS_KINDS:
        raise InputError(f"{where}.kind: expected one of {', '.join(AXIS_KINDS)}, got {kind!r}")
    values = a.get("values")
    if not isinstance(values, list) or not values:
        raise InputError(f"{where}.values: expected a non-empty list, got {values!r}")
    if len(values) > MAX_VALUES:
        raise InputError(f"{where}.values: {len(values)} values; an axis sweeps at most {MAX_VALUES}",
                         fix="sweep fewer values of this axis")
    restart_flag = a.get("restart", True)
    if not isinstance(restart_flag, bool):
        raise InputError(f"{where}.restart: expected true or false, got {restart_flag!r}")
    file_env = a.get("file_env")
    if file_env is not None and (not isinstance(file_env, str) or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", file_env)):
        raise InputError(f"{where}.file_env: expected an environment variable name, got {file_env!r}")
    # Without a knob file a value can only reach the runtime at start: such an axis restarts.
    restart = restart_flag or not file_env
    need = {"env": ("name",), "serve_json": ("arg", "key"), "serve_arg": ("arg",)}[kind]
    for f in need:
        if not isinstance(a.get(f), str) or not a.get(f):
            raise InputError(f"{where}.{f}: required for kind {kind}")
    for f in ("arg",):
        if a.get(f) is not None and not str(a[f]).startswith("--"):
            raise InputError(f"{where}.arg: expected a flag such as --max-num-seqs, got {a[f]!r}")
        # The axis becomes a serve argument: the flags hostctl owns are not tunable in any spelling.
        owned = a.get(f) is not None and serveflags.refusal(str(a[f]))
        if owned:
            raise InputError(f"{where}.arg: {owned}", fix="tune another flag; nothing was changed")
    # An env axis (and a knob file's variable) becomes the runtime's environment: the same names
    # a recipe's env may not hold are not tunable either.
    if kind == "env":
        for j, v in enumerate(values):
            owned = serveflags.env_refusal(a["name"], v)
            if owned:
                raise InputError(f"{where}.name: {owned} (values[{j}])",
                                 fix="tune another variable; nothing was changed")
    owned = file_env is not None and serveflags.env_refusal(file_env)
    if owned:
        raise InputError(f"{where}.file_env: {owned}", fix="name another variable; nothing was changed")
    if kind == "serve_arg":
        for j, v in enumerate(values):
            owned = isinstance(v, str) and serveflags.refusal(v.strip())
            if owned:
                raise InputError(f"{where}.values[{j}]: {owned}", fix="give the axis plain values; nothing was changed")
    return Axis(index=i, kind=kind, values=tuple(values), restart=restart, name=a.get("name"), arg=a.get("arg"),
                key=a.get("key"), file_env=file_env if not restart else None)


def _split(entry: str) -> tuple[str, str]:
    flag, _, rest = entry.strip().partition(" ")
    if "=" in flag and flag.startswith("--"):
        flag, _, rest = flag.partition("=")
    return flag, rest.strip()


def apply_serve_json(serve_args: list[str], arg: str, key: str, value: Any) -> list[str]:
    out, found = [], False
    for entry in serve_args:
        flag, rest = _split(entry)
        if flag == arg:
            found = True
            try:
                d = json.loads(rest) if rest else {}
            except json.JSONDecodeError:
                raise InputError(f"serve_args {arg}: {rest!r} is not JSON, so tuning cannot set its {key!r}") from None
            d[key] = value
            out.append(f"{flag} {json.dumps(d, separators=(',', ':'))}")
        else:
            out.append(entry)
    if not found:
        out.append(f"{arg} {json.dumps({key: value}, separators=(',', ':'))}")
    return out


def apply_serve_arg(serve_args: list[str], arg: str, value: Any) -> list[str]:
    """Set a plain flag where the recipe has it (so a diff shows one changed line), else append it."""
    entry = None if value is None or value is False else (arg if value is True else f"{arg} {value}")
    out, placed = [], False
    for e in serve_args:
        if _split(e)[0] == arg:
            if not placed and entry is not None:
                out.append(entry)
            placed = True
        else:
            out.append(e)
    if not placed and entry is not None:
        out.append(entry)
    return out


def apply(recipe: dict, axes: list[Axis], values: tuple) -> dict:
    """The recipe (as loaded from YAML) with these axes set to these values; the input is not changed."""
    r = json.loads(json.dumps(recipe))
    r["env"] = dict(r.get("env") or {})
    r["serve_args"] = list(r.get("serve_args") or [])
    for axis, value in zip(axes, values):
        if axis.kind == "env":
            r["env"][axis.name] = "" if value is None else str(value)
        elif axis.kind == "serve_json":
            r["serve_args"] = apply_serve_json(r["serve_args"], axis.arg, axis.key, value)
        else:
            r["serve_args"] = apply_serve_arg(r["serve_args"], axis.arg, value)
    return r


def plan_trials(recipe: dict, tuning: Tuning) -> TunePlan:
    restart, runtime = tuning.restart_axes, tuning.runtime_axes
    boot_combos = list(itertools.product(*[a.values for a in restart])) or [()]
    rt_combos = list(itertools.product(*[a.values for a in runtime])) or [()]
    boots, trials = [], []
    for b_i, combo in enumerate(boot_combos, 1):
        variant = apply(recipe, restart, combo)
        knob_files = {a.file_env: f"{KNOB_DIR}/{a.file_env}" for a in runtime}
        variant["env"].update(knob_files)
        boot = Boot(id=f"boot-{b_i}", knobs={a.label: v for a, v in zip(restart, combo)}, recipe=variant,
                    knob_files=knob_files)
        boots.append(boot)
        for rt in rt_combos:
            knobs = dict(boot.knobs) | {a.label: v for a, v in zip(runtime, rt)}
            trials.append(Trial(id=f"trial-{len(trials) + 1}", boot=boot.id, knobs=knobs,
                                runtime_knobs={a.file_env: v for a, v in zip(runtime, rt)}))
    return TunePlan(tuning=tuning, boots=boots, trials=trials)


def rank(trials: list[dict]) -> list[dict]:
    """Valid trials by objective, best first (vLLM-MoET's rule: higher is better)."""
    valid = [t for t in trials if t.get("valid") and isinstance(t.get("objective"), (int, float))]
    return sorted(valid, key=lambda t: -t["objective"])
