"""The Proposal as a commented TOML host profile: each value under the reason it was chosen, the
drives init proposed marked for the user to confirm, the swap arithmetic, each GPU's power
range, and the disks left alone with why. Only what Proposal.profile holds is written as values;
everything else is a comment, so the file loads to exactly that data."""

from __future__ import annotations

import json
import re
import textwrap
from typing import Any

from hostctl import __version__
from hostctl.profile_init.records import DriveChoice, Proposal
from hostctl.bytesizes import fmt_bytes

WIDTH = 100
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


UNFIT_LISTED = 4  # more recipes that do not fit than this are counted, not listed


def value(v: Any) -> str:
    """A TOML value. Strings as JSON writes them (ASCII, \\uXXXX escapes): a valid TOML basic string."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=True)
    if isinstance(v, list):
        return "[" + ", ".join(value(x) for x in v) + "]"
    raise TypeError(f"no TOML form for {type(v).__name__}")


def comment(text: str, indent: str = "") -> list[str]:
    """`# ` lines, wrapped; control characters (from disk models, hostnames) become spaces."""
    text = _CONTROL.sub(" ", text)
    lines = textwrap.wrap(text, WIDTH - 2 - len(indent), subsequent_indent=indent, break_on_hyphens=False,
                          break_long_words=False) or [""]
    return [f"# {line}".rstrip() for line in lines]


def _reason(p: Proposal, key: str) -> list[str]:
    c = p.choice(key)
    if c is None:
        return []
    short = key.split('.')[-1]
    # "planes_cache: because ..."; from a box: "model_dir (box rtx-pro6000x4.yaml: models.GLM-5.2-NVFP4): ..."
    return comment(f"{short} ({c.source}): {c.reason}" if c.source else f"{short}: {c.reason}")


def _table(out: list[str], p: Proposal, section: str, keys: dict[str, Any]) -> None:
    tables = {k: v for k, v in keys.items() if isinstance(v, dict)}
    for key, v in keys.items():
        if key in tables:
            continue
        out += _reason(p, f"{section}.{key}")
        out.append(f"{key} = {value(v)}")
    for key, sub in tables.items():  # after the table's own keys, as TOML needs ([runtime.env])
        out += ["", f"[{section}.{key}]"]
        out += _reason(p, f"{section}.{key}")
        for name, v in sub.items():
            out += _reason(p, f"{section}.{key}.{name}")
            out.append(f"{json.dumps(name)} = {value(v)}")


def _box(out: list[str], p: Proposal) -> None:
    """The [box] declaration, then each box value the profile does not use, with why."""
    b = p.box
    out += [""]
    out += comment(f"The vLLM-MoET box this profile was written from ({b.file}): `hostctl plan` checks the recipe "
                   "against the hardware it declares, as vLLM-MoET's runner does (bench/runner/common.py: compat), "
                   "and says where this host differs from it.")
    out.append("[box]")
    _table(out, p, "box", p.profile["box"])
    if b.unused or b.unknown_keys:
        out.append("")
        out += comment(f"Not used from {b.file.rsplit('/', 1)[-1]}:")
        for u in b.unused:
            shown = u.value if isinstance(u.value, str) else json.dumps(u.value)
            out += comment(f"  {u.field} = {shown}: {u.why}", "    ")
        for key in b.unknown_keys:
            out += comment(f"  {key}: not a box key vLLM-MoET's runner reads (bench/runner/common.py), so hostctl does "
                           "not read it either", "    ")


def _watts(w: float | None) -> str:
    return "?" if w is None else f"{w:g}"


def _drive(out: list[str], p: Proposal, d: DriveChoice, entry: dict[str, Any]) -> None:
    out.append("")
    if d.named:
        out += comment(f"{d.name}: named with --drives. {d.disk}" + (f" ({d.model})" if d.model else "")
                       + f", {fmt_bytes(d.size_bytes)}; found: {d.found}.")
    else:
        does = ("keeps hostctl's layout on it and formats nothing" if d.verdict != "create" else
                f"lays it out (GPT: swap + {d.filesystem} data)")
        out += comment(f"CONFIRM: {d.name} is proposed, not named with --drives: {d.disk}"
                       + (f" ({d.model})" if d.model else "") + f", {fmt_bytes(d.size_bytes)}; found: {d.found}. "
                       f"`hostctl provision` {does} and asks for your consent again (--yes, or the identity "
                       "typed). To leave this disk alone, delete this [[drives]] entry and the [storage] lines "
                       "that name it.")
    for note in d.notes:
        out += comment(note, "  ")
    out.append("[[drives]]")
    for key, v in entry.items():
        out.append(f"{key} = {value(v)}")


def render_profile(p: Proposal, *, facts_source: str, config_arg: str = "") -> str:
    """The profile text. `facts_source`: "this host" or the snapshot it was made from; `config_arg`:
    what the next commands need to find this file (" --config PATH"; empty for ./hostctl.toml)."""
    if p.recipe is None:
        raise ValueError("no recipe was chosen: there is no profile to write")
    data = p.profile
    out: list[str] = []
    out += comment(f"hostctl host profile for {p.host}, written by `hostctl init` (hostctl {__version__}) from the "
                   f"facts of {facts_source} collected at {p.facts_collected_at}. Every value says why it was "
                   "chosen; " + ("check the drives marked CONFIRM, then " if any(not d.named for d in p.drives)
                                 else "check them, then ") + "run, in order:")
    out += [f"#   hostctl plan{config_arg}", f"#   sudo hostctl provision --dry-run{config_arg}",
            f"#   sudo hostctl provision{config_arg}", f"#   hostctl up{config_arg}"]
    if p.box is not None:
        out += comment(f"Written with --box {p.box.file}: each value says where it came from, `box "
                       f"{p.box.file.rsplit('/', 1)[-1]}: FIELD` for the box's own; the box's values this profile "
                       "does not use are listed after [box] with why.")
    out.append("")
    for key in ("name", "description"):
        if key in data:
            out += _reason(p, key)
            out.append(f"{key} = {value(data[key])}")
    out.append("")
    out += _reason(p, "recipe")
    others = [o for o in p.recipes if o.ref != p.recipe]
    unfit = [o for o in others if not o.fits]
    for o in others:
        if not o.fits and len(unfit) > UNFIT_LISTED:
            continue
        state = ("fits, but the plan here says: " + o.plan_errors[0]) if o.fits and o.plan_errors else \
            ("also fits: " + o.reason) if o.fits else "does not fit: " + o.reason
        out += comment(f"  {o.ref}: {state}", "    ")
    if len(unfit) > UNFIT_LISTED:
        # A box's bench folder offers every recipe of vLLM-MoET's (26 in the copy): the ones that
        # cannot run would bury the few that can.
        out += comment(f"  {len(unfit)} other recipes do not fit (`hostctl init --json` gives each with its reason)",
                       "    ")
    out.append(f"recipe = {value(data['recipe'])}")
    out.append("")
    out += _reason(p, "phase")
    out.append(f"phase = {value(data['phase'])}")

    out += ["", "[memory]"]
    _table(out, p, "memory", data["memory"])
    out += comment("The container's RAM cap, soft reservation and RAM+swap cap follow from this reserve and the "
                   "host's swap; `hostctl plan` shows them (memory.container_ram / container_ram_swap override).")

    out += ["", "[gpu]"]
    out += _reason(p, "gpu.power_limit_w")
    for g in p.gpus:
        now = "" if g.limit_w is None or g.limit_w == g.default_w else \
            f", now {_watts(g.limit_w)} W (NVML forgets it at the next boot)"
        out += comment(f"  GPU {g.index} {g.name}: range {_watts(g.min_w)}-{_watts(g.max_w)} W, default "
                       f"{_watts(g.default_w)} W{now}", "    ")
    for key, v in data["gpu"].items():
        out.append(f"{key} = {value(v)}")
    if not data["gpu"]:
        # The limit someone set since boot, as the line that would keep it.
        now = next((g.limit_w for g in p.gpus if g.limit_w is not None and g.limit_w != g.default_w), None)
        if now is not None:
            out.append(f"# power_limit_w = {now:g}")

    out += ["", "[storage]"]
    _table(out, p, "storage", data["storage"])
    out += _reason(p, "cache space")
    if data.get("drives") and any(d.swap_bytes for d in p.drives):
        out += comment("swappiness_converting = 100, swappiness_serving = 10 and page_cluster = 0 are hostctl's "
                       "defaults for NVMe swap (/etc/sysctl.d/90-hostctl-swap.conf).")

    out += ["", "[runtime]"]
    _table(out, p, "runtime", data["runtime"])
    if p.box is not None:
        _box(out, p)

    if p.swap is not None:
        out.append("")
        out += comment("Swap:")
        for line in p.swap.text:
            out += comment(f"  {line}", "    ")
    for d, entry in zip(p.drives, data.get("drives", [])):
        _drive(out, p, d, entry)
    if not p.drives:
        out.append("")
        out += _reason(p, "drives")
    if p.skipped_disks:
        out.append("")
        out += comment("Disks left alone:")
        for s in p.skipped_disks:
            out += comment(f"  {s.disk} ({s.identity}, {fmt_bytes(s.size_bytes)}): {s.reason}", "    ")
    if p.plan_errors:
        out.append("")
        out += comment("`hostctl plan` reports, on these facts (before `hostctl provision`):")
        for e in p.plan_errors:
            out += comment(f"  {e}", "    ")
    return "\n".join(out) + "\n"
