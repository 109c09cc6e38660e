"""`hostctl init --box BOX.yaml`: the host profile a vLLM-MoET box describes, every value with its
source. Pure: (facts, box, recipes, options) -> Proposal, rendered and written as plain init's.

What the box says, it decides; what it does not (drives, swap, memory reserve, phase, power), this
host's facts decide as plain `init` does (propose.py). The mapping, field by field:

- recipe: the one asked for (--recipe), else among the recipes the box can run (the box's
  declared GPUs, VRAM, host RAM and models: hostctl.plan.box.box_fit, vLLM-MoET's compat) the one
  plain init picks on this host's facts, else the best-ranked of them;
- name, description: from the box's id and gpus;
- runtime.model_dir: models[recipe.model]; runtime.models_dir: the one folder that holds every
  requires.extra_models entry as <folder>/<NAME> (served as {model:NAME} at /models/NAME);
- runtime.models_file: the bench/models.yaml beside the box, which resolves its model names;
- storage.planes_cache: planes_cache[recipe.model]; when the box has none (or one under a directory
  hostctl never binds) and the recipe uses {planes_cache}, a place as plain init gives the role;
- runtime.image: hostctl's GPU runtime image for every box (a docker box's docker_image is vLLM-MoET's
  recipes image, whose entrypoint is its recipe launcher, not a server command);
- runtime.env: the box's env, under the recipe's (the recipe wins, as vLLM-MoET merges them),
  less the venv-only knobs (box.VENV_ONLY_ENV), NCCL_* (the NCCL plan decides them for this
  host), and, for a venv box, CUDA_VISIBLE_DEVICES (vLLM-MoET overrides it with its own GPU
  choice) and values that are host paths (the container does not see them);
- [box]: id, file and the declared hardware and models, which `plan` checks the recipe against.

A box value with no place here (shm_size, log_dir, quality_tool, the venv, a path under a
directory hostctl never binds, models the recipe does not serve) is listed in the profile with
why it is not used: never dropped silently.
"""

from __future__ import annotations

import posixpath
from typing import Any

from hostctl import safepaths, secrets
from hostctl.images import GPU_RUNTIME_IMAGE
from hostctl.config import PLACEHOLDER_RE, BoxDeclaration, Config, parse_profile
from hostctl.facts.records import HostFacts
from hostctl.plan import build_plan
from hostctl.plan.box import box_fit
from hostctl.profile_init.box import VENV_ONLY_ENV, Box
from hostctl.profile_init.records import BoxSource, BoxValue, Choice, InitOptions, Proposal, RecipeOption, RecipeSource
from hostctl.plan.storage import ROLE_DIRS
from hostctl.profile_init.propose import MODELS_ROOT, PLAIN_ROOT, profile_name, propose
from hostctl.profile_init.recipes import rank

NCCL_PREFIX = "NCCL_"
# The GPU selector vLLM-MoET sets itself for a venv run, over the box's value.
GPU_SELECTOR = "CUDA_VISIBLE_DEVICES"


def declaration(box: Box) -> BoxDeclaration:
    return BoxDeclaration(id=box.id, file=str(box.file), gpu_name=box.gpu_name, gpus=box.gpu_count,
                          vram_gb=box.vram_gb, host_ram_gb=box.host_ram_gb, models=sorted(box.models))


def _declared_dict(box: Box) -> dict[str, Any]:
    """[box] as the profile writes it: the box's numbers as written (96, not 96.0)."""
    d = declaration(box)
    return {"id": d.id, "file": d.file, "gpu_name": d.gpu_name, "gpus": d.gpus, "vram_gb": box.vram_gb,
            "host_ram_gb": box.host_ram_gb, "models": list(d.models)}


class _Overlay:
    """The box's values laid over plain init's profile for one recipe: each with its source, and
    each unused one with why."""

    def __init__(self, box: Box, source: RecipeSource, proposal: Proposal, facts_source: str):
        self.box, self.recipe, self.p, self.facts_source = box, source.recipe, proposal, facts_source
        self.data = proposal.profile
        self.unused: list[BoxValue] = []
        self.warnings: list[str] = []

    def src(self, field: str) -> str:
        return f"box {self.box.name}: {field}"

    def set(self, key: str, value: Any, field: str, reason: str, source: str | None = None) -> None:
        table, _, name = key.rpartition(".")
        target = self.data
        for part in table.split(".") if table else []:
            target = target.setdefault(part, {})
        target[name] = value
        self.p.choices = [c for c in self.p.choices if c.key != key]
        self.p.choices.append(Choice(key=key, value=value, reason=reason, source=source or self.src(field)))

    def unuse(self, field: str, value: Any, why: str) -> None:
        self.unused.append(BoxValue(field=field, value=value, why=why))

    def bindable(self, field: str, path: str) -> bool:
        problem = safepaths.host_dir_problem(path)
        if problem:
            self.unuse(field, path, f"not used: {problem}; move it (e.g. below /srv or /mnt) and set the profile "
                       "field by hand")
            self.warnings.append(f"box {self.box.name}: {field} = {path} is not used (a directory hostctl never "
                                 "binds); the profile says where to move it")
        return problem is None

    # ------------------------------------------------------------ the mappings

    def identity(self) -> None:
        box = self.box
        name = profile_name(box.id)
        self.set("name", name, "id", "the box's id, as a profile name"
                 + (f" (its first {len(name)} characters: a profile name has at most that many)"
                    if len(name) < len(box.id) else ""))
        what = f"{box.gpu_count}x {box.gpu_name or 'GPU'} ({box.vram_gb:g} GB), {box.host_ram_gb:g} GB host RAM"
        self.set("description", f"vLLM-MoET box {box.id}: {what} (written by hostctl init --box)", "gpus, host_ram_gb",
                 "what the box declares")

    def models(self) -> None:
        box, recipe = self.box, self.recipe
        path = box.models.get(recipe.model)
        if path is not None and self.bindable(f"models.{recipe.model}", path):
            self.set("runtime.model_dir", path, f"models.{recipe.model}",
                     f"the checkpoint of the recipe's model {recipe.model}, mounted read-only")
        elif path is not None:
            for c in self.p.choices:
                if c.key == "runtime.model_dir":
                    c.reason += f"; the box's models.{recipe.model} is not used (listed after [box], with why)"
        extra = {n: box.models[n] for n in recipe.requires.extra_models if n in box.models}
        if extra:
            parents = {posixpath.dirname(p) for p in extra.values()}
            named = all(posixpath.basename(p) == n for n, p in extra.items())
            folder = next(iter(parents))
            if len(parents) == 1 and named and self.bindable("models", folder):
                self.set("runtime.models_dir", folder, ", ".join(f"models.{n}" for n in extra),
                         f"the folder holding the recipe's extra models ({', '.join(extra)}) as <folder>/<NAME>: "
                         "mounted read-only at /models, where {model:NAME} finds them")
            elif len(parents) != 1 or not named:
                for n, p in extra.items():
                    self.unuse(f"models.{n}", p, "not used: hostctl mounts extra models from one folder "
                               "(runtime.models_dir, as <folder>/<NAME>), and the box's extra models are not laid out "
                               "so; put them there and set runtime.models_dir")
        if recipe.requires.extra_models and "models_dir" not in self.data.get("runtime", {}):
            # {model:NAME} has nowhere to point without it (the plan refuses that): the default place,
            # beside init's default for the checkpoint, listed for the user to fill.
            self.data.setdefault("runtime", {})["models_dir"] = MODELS_ROOT
            self.p.choices.append(Choice(
                key="runtime.models_dir", value=MODELS_ROOT, source=f"the facts of {self.facts_source}",
                reason=f"the recipe's extra models ({', '.join(recipe.requires.extra_models)}) need one folder holding "
                "them as <folder>/<NAME>, and the box's cannot be used (listed after [box], with why): the default "
                "place; put them there"))
        served = {recipe.model, *recipe.requires.extra_models}
        for n, p in box.models.items():
            if n not in served:
                self.unuse(f"models.{n}", p, f"the recipe {recipe.id} does not serve it (a profile names one recipe; "
                           "write another profile with --recipe for a recipe of that model)")
        bench = box.bench_dir()
        if bench is not None and (bench / "models.yaml").is_file():
            self.set("runtime.models_file", str(bench / "models.yaml"), "", "vLLM-MoET's models file beside the "
                     "box, which pins the box's model names", source=f"the bench folder of box {box.name}")

    def planes(self) -> None:
        box, recipe = self.box, self.recipe
        path = box.planes_cache.get(recipe.model)
        model = box.models.get(recipe.model)
        if path is not None and model is not None and _overlaps(path, model):
            # The checkpoint is bound read-only, the planes cache read-write: one folder both ways
            # would let the runtime write planes among the checkpoint's pinned files.
            field = f"planes_cache.{recipe.model}"
            self.unuse(field, path, f"not used: it is, holds or lies inside the checkpoint's folder "
                       f"models.{recipe.model} = {model}, which hostctl mounts read-only and pins; give the planes "
                       "cache a folder of its own (storage.planes_cache)")
            self.warnings.append(f"box {self.box.name}: {field} = {path} is not used (it overlaps the checkpoint "
                                 f"{model}); the profile gives the planes cache a place of its own")
            path = None
        if path is not None and self.bindable(f"planes_cache.{recipe.model}", path):
            self.set("storage.planes_cache", path, f"planes_cache.{recipe.model}",
                     "the planes cache of the recipe's model, mounted read-write where {planes_cache} points")
        if "storage" not in self.data or "planes_cache" not in self.data["storage"]:
            self._planes_default()
        for n, p in box.planes_cache.items():
            if n != recipe.model:
                self.unuse(f"planes_cache.{n}", p, f"the planes cache of {n}, which the recipe {recipe.id} does "
                           "not serve")

    def _planes_default(self) -> None:
        """The recipe puts {planes_cache} in its env or serve_args, and the box names no usable planes
        cache for its model: vLLM-MoET then drops those knobs, and the runtime rebuilds planes at
        every start. The profile gives the role a place as plain init does for a recipe that lists
        it under `storage:` (the first data drive, else a directory beside the compile cache)."""
        recipe = self.recipe
        if "planes_cache" not in recipe.needed_roles():
            return
        drives = [d["name"] for d in self.data.get("drives", [])]
        place = drives[0] if drives else f"{PLAIN_ROOT}/{ROLE_DIRS['planes_cache']}"
        where = f"on drive {place}" if drives else "a directory on the root filesystem (no data drive in the profile)"
        self.data.setdefault("storage", {})["planes_cache"] = place
        self.p.choices.append(Choice(key="storage.planes_cache", value=place, source=f"the facts of {self.facts_source}",
                                     reason=f"the recipe uses {{planes_cache}} and the box names no usable planes cache "
                                     f"for {recipe.model} (vLLM-MoET would drop those knobs and rebuild planes at "
                                     f"every start): {where}"))

    def runtime(self) -> None:
        box = self.box
        # hostctl's own runtime image for every box: its entrypoint runs the server command the plan
        # renders. vLLM-MoET's recipes image runs its recipe launcher instead (ENTRYPOINT
        # serve_recipe.py, which takes a recipe id, in vLLM-MoET's Dockerfile.recipes), and its
        # serving image vLLM's `vllm serve`; neither takes hostctl's command.
        self.set("runtime.image", GPU_RUNTIME_IMAGE, "runtime", "hostctl's vLLM-MoET runtime image "
                 "(runtime/sm120/Dockerfile: vLLM-MoET at its pinned revision; build it on the GPU host as "
                 "runtime/README.md says)", source="hostctl's bundled GPU runtime")
        if box.runtime == "docker":
            self.unuse("docker_image", box.docker_image, "vLLM-MoET's recipes image: its entrypoint is vLLM-MoET's "
                       "recipe launcher (serve_recipe.py, given a recipe id), not the server command hostctl renders; "
                       "runtime.image is hostctl's runtime image instead")
        self.unuse("runtime", box.runtime, "hostctl runs the runtime in a container of its own image "
                   "(runtime.image), never a host venv or vLLM-MoET's recipe launcher")
        if box.venv is not None:
            self.unuse("venv", box.venv, "the box's venv runtime; hostctl runs an image, never a host venv")
        if box.shm_size is not None:
            self.unuse("shm_size", box.shm_size, "hostctl runs GPU runtimes with host IPC, where Docker ignores "
                       "--shm-size (vLLM-MoET's docker run uses --ipc host too); doctor checks the host's /dev/shm")
        if box.log_dir is not None:
            self.unuse("log_dir", box.log_dir, "vLLM-MoET's bench log folder; hostctl's runtime logs go to the "
                       "journal (`hostctl logs`) and bench results to its own results folder")
        if box.quality_tool is not None:
            self.unuse("quality_tool", box.quality_tool, "vLLM-MoET's external quality eval tool; hostctl runs none "
                       "(quality probes are reported as skipped, with the reason)")
        if box.quality_tool_sha256 is not None:
            self.unuse("quality_tool_sha256", box.quality_tool_sha256, "the quality tool's pin (see quality_tool)")

    def env(self) -> None:
        box = self.box
        passed: dict[str, str] = {}
        reasons: list[Choice] = []
        for key, value in box.env.items():
            field = f"env.{key}"
            if key in VENV_ONLY_ENV:
                self.unuse(field, value, f"venv-only: {VENV_ONLY_ENV[key]} (vLLM-MoET never passes it into its image "
                           "either)")
            elif key.startswith(NCCL_PREFIX):
                self.unuse(field, value, "hostctl's NCCL plan decides NCCL_* for this host from its topology, P2P "
                           "status and IOMMU (`hostctl plan`, nccl section); a recipe's or box's value would hide "
                           "that decision")
            elif key == GPU_SELECTOR and box.runtime == "venv":
                self.unuse(field, value, "vLLM-MoET's venv runtime replaces it with the GPUs it picks for the run "
                           "(common.build_env), so the box's value never reaches the server; hostctl picks the GPUs "
                           "in the plan (placement; gpu.devices names them) and maps only those into the container, "
                           "where a host index names another GPU or none")
            elif secrets.is_secret_name(key) or secrets.looks_secret(key, value):
                # A profile is 0644 and provision installs it in /etc/hostctl: no place for a secret.
                self.unuse(field, secrets.MASK, "a secret (by its name or its shape): never written into a profile, "
                           "which anyone on the host can read; the runtime reads its checkpoint from disk and needs "
                           "no hub token, and the API key is runtime.api_key_env's variable, read at start")
            elif PLACEHOLDER_RE.search(value):
                self.unuse(field, value, "a placeholder in a box's env: vLLM-MoET resolves it per recipe; a profile's "
                           "env is literal, so put the knob in the recipe's env instead")
            elif box.runtime == "venv" and value.startswith("/"):
                self.unuse(field, value, "a host path for the box's venv runtime: inside hostctl's container it names "
                           "nothing; bind the folder through a profile field (storage.*, runtime.*) instead")
            else:
                passed[key] = value
                reasons.append(Choice(key=f"runtime.env.{key}", value=value, source=self.src(field),
                                      reason="passed to the runtime under the recipe's env (the recipe wins)"))
        if passed:
            self.data.setdefault("runtime", {})["env"] = passed
            self.p.choices += reasons

    def run(self) -> None:
        self.identity()
        self.models()
        self.planes()
        self.runtime()
        self.env()
        self.data["box"] = _declared_dict(self.box)
        self.p.choices.append(Choice(key="box", value=self.box.id, source=self.src("id, gpus, host_ram_gb, models"),
                                     reason="the box's declared hardware and models, which `hostctl plan` checks the "
                                     "recipe against"))


def _overlaps(a: str, b: str) -> bool:
    """Whether two normalised absolute paths are one folder or one holds the other."""
    a, b = a.rstrip("/") or "/", b.rstrip("/") or "/"
    return a == b or a.startswith(b.rstrip("/") + "/") or b.startswith(a.rstrip("/") + "/")


def _options(box: Box, sources: list[RecipeSource]) -> list[RecipeOption]:
    d = declaration(box)
    out = []
    for s in sorted(sources, key=lambda s: rank(s.recipe)):
        reasons = [r for _, r in box_fit(d, s.recipe)]
        out.append(RecipeOption(ref=s.ref, id=s.recipe.id, fits=not reasons,
                                reason="; ".join(reasons) if reasons else f"box {box.id} can run it (vLLM-MoET's compat)"))
    return out


def propose_from_box(facts: HostFacts, box: Box, recipes: list[RecipeSource], options: InitOptions,
                     facts_source: str) -> Proposal:
    """The profile for this box (and these facts for what the box does not say)."""
    verdicts = _options(box, recipes)
    runnable = [s for s in sorted(recipes, key=lambda s: rank(s.recipe))
                if next(o for o in verdicts if o.ref == s.ref).fits]
    if options.recipe is not None:
        chosen = next(s for s in recipes if s.ref == options.recipe)
        option = next(o for o in verdicts if o.ref == chosen.ref)
        reason = "named with --recipe; " + (option.reason if option.fits else f"box {box.id} CANNOT run it: "
                                            + option.reason)
    elif runnable:
        # Plain init's choice among what the box can run: the best fit for this host's facts whose
        # plan has no error; else the box's best-ranked recipe.
        plain = propose(facts, runnable, InitOptions(drives=options.drives, power_limit_w=options.power_limit_w))
        chosen = next((s for s in runnable if s.ref == plain.recipe), runnable[0])
        reason = (f"among the {len(runnable)} recipe(s) box {box.id} can run (its GPUs, VRAM, host RAM and models), "
                  + ("the best fit for the facts of " + facts_source if plain.recipe else
                     "the best-ranked (none fits the facts of " + facts_source + ")"))
    else:
        return Proposal(host=facts.hostname, facts_collected_at=facts.collected_at, recipe=None,
                        recipe_reason=f"box {box.id} can run none of the recipes: "
                        + "; ".join(f"{o.ref}: {o.reason}" for o in verdicts), recipes=verdicts,
                        box=BoxSource(file=str(box.file), id=box.id, runtime=box.runtime,
                                      unknown_keys=sorted(box.unknown)))
    p = propose(facts, recipes, InitOptions(recipe=chosen.ref, drives=options.drives,
                                            power_limit_w=options.power_limit_w, model_dir=options.model_dir))
    plain_source = f"the facts of {facts_source}"
    for c in p.choices:
        c.source = c.source or plain_source
    overlay = _Overlay(box, chosen, p, facts_source)
    overlay.run()
    p.choices = [c for c in p.choices if c.key != "recipe"] + [
        Choice(key="recipe", value=chosen.ref, reason=reason, source=f"box {box.name}: models, gpus, host_ram_gb")]
    p.recipes = verdicts
    p.recipe_reason = reason
    p.warnings += overlay.warnings
    if not next(o for o in verdicts if o.ref == chosen.ref).fits:
        p.warnings.append(f"box {box.id} cannot run recipe {chosen.ref}: "
                          + next(o for o in verdicts if o.ref == chosen.ref).reason)
    profile = parse_profile(p.profile, "the profile hostctl init --box proposes")
    plan = build_plan(Config(profile=profile, recipe=chosen.recipe, source="hostctl init --box"), facts)
    p.plan_errors = [f"[{e.area}] {e.message}" + (f" (fix: {e.fix})" if e.fix else "") for e in plan.errors]
    p.box = BoxSource(file=str(box.file), id=box.id, runtime=box.runtime, unused=overlay.unused,
                      unknown_keys=sorted(box.unknown))
    return p
