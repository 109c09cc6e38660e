"""What a recipe's `model:` means on this host, decided in the order the README's "model" section
gives:

1. a path inside the runtime image (`/opt/hostctl/models/tiny-moe`, the demo): nothing to pull
   or verify. With `runtime.model_dir` set the plan mounts that directory over it instead, and
   the checkpoint there is checked against its manifest (kind "local": no hub source to pull);
2. a registry name from the models file (vLLM-MoET's bench/models.yaml format): hf_repo,
   revision and approx_gb come from its entry;
3. a hub repository id (`org/name`) with a `revision:` in the recipe.

The revision that counts is the first of: `--revision`, the profile's runtime.model_revision,
the recipe's `revision:`, the models file's entry. Only a commit (40 hex) pins anything: a branch
or tag name moves, so a pull of it is refused unless `--revision` pins it (pin_problem says why).
resolve() is pure; load_ref() reads the models file it needs.

A recipe's `requires.extra_models` (vLLM-MoET's format: registry names, e.g. a drafter such as
`Kimi-K2.7-Code-eagle3`, which its serve_args reach as `{model:NAME}`) are registry names only,
each pulled at its models-file pin into `runtime.models_dir/NAME` -- where `{model:NAME}` points
(resolve_extras()).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from hostctl.data import Data
from hostctl.config import Config
from hostctl.errors import InputError
from hostctl.model.registry import COMMIT_RE, REPO_ID_RE, ModelEntry, load_models, models_file_path
from hostctl.safepaths import relative_name_problem

Kind = Literal["image", "local", "registry", "hub"]


class ModelRef(Data):
    kind: Kind
    model: str  # the recipe's `model:` as written
    model_dir: str | None  # the checkpoint's host directory (profile runtime.model_dir)
    repo: str | None = None
    revision: str | None = None  # the pinned commit, when there is one
    revision_source: str | None = None  # which setting gave it, e.g. "recipe revision"
    approx_gb: float | None = None
    models_file: str | None = None
    pin_problem: str | None = None  # why there is no usable pin (a branch name, none at all, a conflict)
    pin_fix: str | None = None
    notes: list[str] = Field(default_factory=list)

    @property
    def on_host(self) -> bool:
        """A checkpoint directory on this host that hostctl pulls into or verifies."""
        return self.kind in ("local", "registry", "hub") and self.model_dir is not None

    @property
    def pullable(self) -> bool:
        return self.kind in ("registry", "hub")

    def describe(self) -> str:
        if self.kind == "image":
            return f"{self.model}: inside the runtime image, nothing to pull or verify"
        if self.kind == "local":
            return f"{self.model_dir} (the profile's runtime.model_dir, mounted over the recipe's {self.model})"
        pin = self.revision or "not pinned"
        via = f" via {self.models_file}" if self.kind == "registry" else ""
        return f"{self.repo}@{pin}{via}"

    def to_dict(self) -> dict:
        return self.model_dump()


def is_commit(text: str | None) -> bool:
    return text is not None and COMMIT_RE.match(text.lower()) is not None


def _pin(ref: ModelRef, candidates: list[tuple[str, str | None]]) -> None:
    """Choose the first given revision; say what is wrong when it is not a commit."""
    chosen = next(((src, rev) for src, rev in candidates if rev), None)
    if chosen is None:
        ref.pin_problem = f"no pinned revision for {ref.repo}: a download without one takes whatever the default " \
                          "branch points at today"
        ref.pin_fix = "set `revision:` (the commit, 40 hex) in the recipe or runtime.model_revision in the profile, " \
                      "or pass --revision SHA"
        return
    source, revision = chosen
    if not is_commit(revision):
        ref.revision_source = source
        ref.pin_problem = (f"{source} {revision!r} is a branch or tag name, not a commit: it moves, so what it "
                           "downloads (and what the recipe was proven on) can change under you")
        ref.pin_fix = f"pin a commit: --revision SHA (the 40-hex commit {revision!r} points at now), or write it " \
                      "into the recipe's revision"
        return
    ref.revision, ref.revision_source = revision.lower(), source


def resolve(config: Config, registry: dict[str, ModelEntry] | None, models_file: str | None,
            cli_revision: str | None = None) -> ModelRef:
    """The model reference for this config. Raises InputError only when the recipe's model names
    nothing (not a path, not in the models file, not a repository id); a missing or moving pin is
    reported in pin_problem, for the caller to refuse (pull) or warn about (verify, doctor)."""
    recipe, rt = config.recipe, config.profile.runtime
    model = recipe.model
    if model.startswith("/"):
        if rt.model_dir is None:
            return ModelRef(kind="image", model=model, model_dir=None)
        return ModelRef(kind="local", model=model, model_dir=rt.model_dir,
                        notes=["the recipe names a path inside the image; the profile's runtime.model_dir is "
                               "mounted over it, so there is no hub repository to pull from"])
    overrides = [("--revision", cli_revision), ("profile runtime.model_revision", rt.model_revision)]
    entry = (registry or {}).get(model)
    if entry is not None:
        ref = ModelRef(kind="registry", model=model, model_dir=rt.model_dir, repo=entry.hf_repo,
                       approx_gb=entry.approx_gb, models_file=models_file)
        if recipe.revision and entry.revision and recipe.revision.lower() != entry.revision.lower():
            raise InputError(
                f"recipe revision {recipe.revision} differs from the pin for {model} in {models_file} ({entry.revision})",
                details=["the recipe says which checkpoint it was proven on; the models file says what to download"],
                fix="make them the same commit (or pin this host with runtime.model_revision / --revision)")
        _pin(ref, overrides + [("recipe revision", recipe.revision), (f"{models_file} revision", entry.revision)])
    elif REPO_ID_RE.match(model):
        ref = ModelRef(kind="hub", model=model, model_dir=rt.model_dir, repo=model)
        _pin(ref, overrides + [("recipe revision", recipe.revision)])
    else:
        names = sorted(registry or {})
        raise InputError(
            f"recipe model {model!r} is not a path inside the image, not a name in {models_file} and not a hub "
            "repository id (org/name)",
            details=[f"names in {models_file}: {', '.join(names) or 'none'}"],
            fix="write a registry name from the models file, an org/name repository with a revision, or set "
                "runtime.models_file to a models file that has it")
    if ref.revision and ref.revision_source not in ("recipe revision",) and recipe.revision \
            and recipe.revision.lower() != ref.revision:
        ref.notes.append(f"pinned to {ref.revision} by {ref.revision_source}; the recipe was proven on {recipe.revision}")
    return ref


def load_ref(config: Config, cli_revision: str | None = None) -> ModelRef:
    """resolve() with the models file the profile names (or the bundled one), read only when needed."""
    if config.recipe.model.startswith("/"):
        return resolve(config, None, None, cli_revision)
    path = models_file_path(config.profile.runtime.models_file, Path(config.source).parent)
    return resolve(config, load_models(path), str(path), cli_revision)


def resolve_extras(config: Config, registry: dict[str, ModelEntry] | None, models_file: str | None) -> list[ModelRef]:
    """The recipe's requires.extra_models as pull targets under runtime.models_dir. InputError
    (field named) for a name the models file does not have or when models_dir is not set."""
    names = list(config.recipe.requires.extra_models)
    if not names:
        return []
    models_dir = config.profile.runtime.models_dir
    if not models_dir:
        raise InputError(f"the recipe's requires.extra_models ({', '.join(names)}) need runtime.models_dir: extra "
                         "models live there, one directory per name ({model:NAME} in serve_args points at it)",
                         fix="set runtime.models_dir in the profile to a directory on a drive with room")
    out = []
    for i, name in enumerate(names):
        # one folder per name under models_dir: a plain name, never a path
        problem = relative_name_problem(name) or ("it holds a '/'; expected one folder name" if "/" in name else None)
        if problem:
            raise InputError(f"requires.extra_models[{i}]: {name!r} cannot name a folder under runtime.models_dir: "
                             f"{problem}", fix="write a registry name from the models file (letters, digits, ._-)")
        entry = (registry or {}).get(name)
        if entry is None:
            raise InputError(f"requires.extra_models[{i}]: {name!r} is not a name in {models_file}",
                             details=[f"names in {models_file}: {', '.join(sorted(registry or {})) or 'none'}"],
                             fix="add it to the models file (hf_repo, revision, approx_gb) or set runtime.models_file")
        ref = ModelRef(kind="registry", model=name, model_dir=str(Path(models_dir) / name), repo=entry.hf_repo,
                       approx_gb=entry.approx_gb, models_file=models_file,
                       notes=[f"extra model (requires.extra_models[{i}]), served as {{model:{name}}}"])
        _pin(ref, [(f"{models_file} revision", entry.revision)])
        out.append(ref)
    return out


def load_extras(config: Config) -> list[ModelRef]:
    if not config.recipe.requires.extra_models:
        return []
    path = models_file_path(config.profile.runtime.models_file, Path(config.source).parent)
    return resolve_extras(config, load_models(path), str(path))
