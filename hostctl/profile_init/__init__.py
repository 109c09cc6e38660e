"""`hostctl init`: the first host profile, written from this host's facts (or a snapshot's).

propose.py decides (pure: facts, recipes, options -> Proposal), render.py turns the proposal into
a commented TOML profile, and this module runs it: it gathers the facts and the recipes, checks
that the text loads with hostctl's own loader, refuses to write over an existing file without
--force (exit 3: that file is the user's), and writes atomically. It never touches a disk.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from hostctl import paths
from hostctl.safefs import write_file
from hostctl.config import DriveIdentity, load_recipe, parse_profile, recipe_path
from hostctl.data import Data
from hostctl.errors import FailedError, InputError, RefusedError
from hostctl.facts.records import HostFacts
from hostctl.profile_init.records import INIT_SCHEMA, InitOptions, Proposal, RecipeSource
from hostctl.profile_init.box import Box, load_box
from hostctl.profile_init.box_profile import propose_from_box
from hostctl.profile_init.propose import path_requests, propose
from hostctl.profile_init.render import render_profile
from hostctl.bytesizes import fmt_bytes

__all__ = ["INIT_SCHEMA", "InitOptions", "InitResult", "Proposal", "init_profile", "propose", "render_profile"]


class InitResult(Data):
    proposal: Proposal
    facts_source: str  # "this host" or the snapshot's path
    text: str | None  # the profile; None when no recipe fits
    out: Path | None  # where it was written; None: to stdout (--out -) or nowhere
    written: bool

    def document(self) -> dict:
        return self.proposal.document(facts_source=self.facts_source, out=str(self.out) if self.out else None,
                                      written=self.written)


def parse_drives(values: list[str] | None) -> tuple[DriveIdentity, ...] | None:
    """--drives IDENTITY,... (repeatable); `none` for no drive at all."""
    if values is None:
        return None
    items = [v.strip() for value in values for v in value.split(",") if v.strip()]
    if items == ["none"]:
        return ()
    out = []
    for item in items:
        try:
            out.append(DriveIdentity.parse(item))
        except ValueError as exc:
            raise InputError(f"--drives {item}: {exc}; nothing was written",
                             fix="name drives as serial:X, wwn:X, by-id:NAME or path:/dev/X, separated by commas "
                             "(`hostctl facts` lists them), or --drives none") from None
    if not out:
        raise InputError("--drives: no identity given", fix="name drives as serial:X,... or pass --drives none")
    return tuple(out)


def bundled_recipes() -> list[RecipeSource]:
    return [RecipeSource(ref=p.stem, recipe=load_recipe(p)) for p in sorted(paths.recipes_dir().glob("*.yaml"))]


def recipe_source(ref: str) -> RecipeSource:
    """--recipe: a bundled name stays a name; a path is written absolute, so the profile loads
    wherever it is moved to."""
    if "/" in ref or ref.endswith((".yaml", ".yml")):
        path = Path(ref).resolve()
        return RecipeSource(ref=str(path), recipe=load_recipe(path))
    return RecipeSource(ref=ref, recipe=load_recipe(recipe_path(ref)))


def _refuse_existing(out: Path) -> None:
    raise RefusedError(f"{out} exists; hostctl init never writes over a profile (it may hold your edits)",
                       fix="pass --force to replace it, or --out ANOTHER.toml; nothing was written")


def check_loads(text: str, out_dir: Path, proposal: Proposal) -> None:
    """The written text must load with hostctl's own loader to exactly the proposed data."""
    try:
        data = tomllib.loads(text)
        profile = parse_profile(data, "the written profile")
        load_recipe(recipe_path(profile.recipe, out_dir))
    except (tomllib.TOMLDecodeError, InputError) as exc:
        raise FailedError(f"hostctl init made a profile its own loader rejects (a bug): {exc}; nothing was written",
                          details=getattr(exc, "details", [])) from None
    if data != proposal.profile:
        raise FailedError("hostctl init's written profile does not hold what it proposed (a bug); nothing was written")


def gather(facts_path: Path | None) -> tuple[HostFacts, str, bool]:
    from hostctl.facts import collect, load_snapshot

    if facts_path is not None:
        return load_snapshot(facts_path), str(facts_path), False
    return collect(), "this host", True


def box_recipes(box: Box) -> tuple[list[RecipeSource], dict[Path, InputError]]:
    """The recipes of the vLLM-MoET bench the box lives in (bench/recipes/<model>/<config>.yaml), each
    named in the profile by its absolute path, then the bundled ones; and the bench's recipes that do
    not load, each with its error. One broken recipe beside the box must not refuse the others
    (vLLM-MoET's runner reads only the recipe it is given): it is left out with a warning, and
    refused only when --recipe names it."""
    bench = box.bench_dir()
    found = sorted((bench / "recipes").glob("*/*.yaml")) if bench is not None else []
    loaded, broken = [], {}
    for p in found:
        try:
            loaded.append(RecipeSource(ref=str(p), recipe=load_recipe(p)))
        except InputError as exc:
            broken[p] = exc
    return loaded + bundled_recipes(), broken


def _broken_warning(path: Path, exc: InputError) -> str:
    details = "; ".join(exc.details)
    return (f"recipe {path} was left out: it does not load ({exc.message}" + (f": {details}" if details else "")
            + "); correct it for init to consider it, or ignore this if you do not use it")


def _box_recipe(ref: str, recipes: list[RecipeSource], broken: dict[Path, InputError]) -> RecipeSource:
    """--recipe with --box: a recipe id of the box's bench (deepseek-v4-flash/pro6000x1), else a
    bundled name or a path. A bench recipe that does not load is refused with its own error."""
    for r in recipes:
        if r.recipe.id == ref and r.ref.endswith(f"/recipes/{ref}.yaml"):
            return r
    for path, exc in broken.items():
        if str(path).endswith(f"/recipes/{ref}.yaml") or Path(ref).resolve() == path:
            raise exc
    return recipe_source(ref)


def init_profile(*, facts_path: Path | None, options: InitOptions, recipe_ref: str | None, out: Path | None,
                 force: bool, box_path: Path | None = None) -> InitResult:
    """Decide, render, check and write. `out` None: the text is returned to print (--out -).
    `box_path`: a vLLM-MoET box the profile is written from (box_profile.py)."""
    if out is not None and out.exists() and not force:
        _refuse_existing(out)  # before reading anything: the answer cannot change
    if out is not None and out.is_dir():
        raise InputError(f"--out {out}: is a directory; expected a file path such as {out / 'hostctl.toml'}")
    box = load_box(box_path) if box_path is not None else None
    recipes, broken = box_recipes(box) if box is not None else (bundled_recipes(), {})
    if recipe_ref is not None:
        chosen = _box_recipe(recipe_ref, recipes, broken) if box is not None else recipe_source(recipe_ref)
        recipes = [r for r in recipes if r.ref != chosen.ref] + [chosen]
        options = InitOptions(recipe=chosen.ref, drives=options.drives, power_limit_w=options.power_limit_w,
                              model_dir=options.model_dir)
    facts, source, live = gather(facts_path)

    def decide(facts: HostFacts) -> Proposal:
        p = (propose_from_box(facts, box, recipes, options, source) if box is not None
             else propose(facts, recipes, options))
        p.warnings = [_broken_warning(path, exc) for path, exc in broken.items()] + p.warnings
        return p

    proposal = decide(facts)
    if live:
        # The role and model directories are known only now: read them, and decide once more with them.
        from hostctl.facts.mounts import probe_paths

        requests = path_requests(proposal, recipes)
        if requests:
            facts = facts.model_copy(update={"paths": probe_paths(requests)})
            proposal = decide(facts)
    if proposal.recipe is None:
        return InitResult(proposal=proposal, facts_source=source, text=None, out=out, written=False)
    config_arg = "" if out is None or out == Path("hostctl.toml") else f" --config {out}"
    text = render_profile(proposal, facts_source=source, config_arg=config_arg)
    check_loads(text, (out or Path("hostctl.toml")).resolve().parent, proposal)
    if out is None:
        return InitResult(proposal=proposal, facts_source=source, text=text, out=None, written=False)
    try:
        # shown as typed; written with its `..` taken lexically (cli.typed_path's rule)
        write_file(Path(os.path.abspath(out)), text, exclusive=not force)
    except FileExistsError:
        _refuse_existing(out)  # it appeared while init was deciding
    except OSError as exc:
        raise FailedError(f"cannot write {out}: {exc.strerror or exc}; nothing was written",
                          fix="choose a writable place with --out, or print it with --out -") from None
    return InitResult(proposal=proposal, facts_source=source, text=text, out=out, written=True)


def summary_text(r: InitResult) -> str:
    """What init chose, for the terminal: the file, each choice with its reason, the next steps."""
    p = r.proposal
    lines = []
    if r.written:
        lines.append(f"wrote {r.out}: profile {p.profile.get('name')!r}, recipe {p.recipe} (facts of {r.facts_source})")
    for c in p.choices:
        if c.key == "gpu.power_limit_w" and c.value is None:
            shown = "none (each GPU's default)"
        elif isinstance(c.value, list):
            shown = ", ".join(map(str, c.value)) or "none"
        elif isinstance(c.value, dict):
            shown = ", ".join(f"{k} {fmt_bytes(v)}" for k, v in c.value.items()) or "none"
        elif c.key == "cache space":
            shown = fmt_bytes(c.value) if c.value is not None else "on the root filesystem"
        else:
            shown = c.value
        lines.append(f"  {c.key}: {shown}")
        lines.append(f"      because {c.reason}")
    for d in p.drives:
        lines.append(f"  drive {d.name} = {d.identity}  ({d.disk}, {fmt_bytes(d.size_bytes)}, {d.found}; "
                     + ("named" if d.named else "PROPOSED: confirm it in the file") + ")")
    for s in p.skipped_disks:
        lines.append(f"  left alone: {s.disk} ({s.identity}): {s.reason}")
    if r.written:
        cfg = "" if r.out == Path("hostctl.toml") else f" --config {r.out}"
        snap = r.facts_source != "this host"
        lines.append("next:" + (" (provision and up on the host the snapshot describes)" if snap else ""))
        lines.append(f"  hostctl plan{cfg}" + (f" --facts {r.facts_source}" if snap else ""))
        lines += [f"  sudo hostctl provision --dry-run{cfg}", f"  sudo hostctl provision{cfg}", f"  hostctl up{cfg}"]
    return "\n".join(lines) + "\n"
