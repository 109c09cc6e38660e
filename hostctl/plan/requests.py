"""Which directories the facts must describe for a profile: the plan's own (plan.path_requests)
and those provision's storage decisions read (each drive's mountpoint, its role directories, the
rank stores), and how many ranks the recipe runs. Pure: `facts --config`, `plan`, `verify`,
`provision` and `cache` all ask here, so they read the same directories."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hostctl.config import Config, Recipe


def tensor_parallel(recipe: Recipe) -> int:
    """The number of ranks whose store files exist (`rank<r>of<N>`): the recipe's TP size."""
    tp = recipe.args().get("--tensor-parallel-size")
    if tp and tp.isdigit():
        return max(int(tp), 1)
    return max(recipe.requires.gpus, 1)


def dir_requests(config: Config) -> list[str]:
    """Directories whose facts (existence, mount, owner) the storage decisions read."""
    from hostctl.plan.storage import ROLE_DIRS, rank_store_dir

    profile = config.profile
    out = [d.mount for d in profile.drives]
    for d in profile.drives:
        out += [f"{d.mount}/{sub}" for sub in ROLE_DIRS.values()]
    for rank in range(tensor_parallel(config.recipe)):
        for d in profile.drives:
            out.append(rank_store_dir(d.mount, rank))
    return list(dict.fromkeys(out))


def fact_requests(config: Config) -> list[tuple[str, bool]]:
    """Every directory the storage decisions and the plan read facts about, once each: what
    `hostctl facts --config` describes, so a snapshot (or another host's facts, for `verify
    --host`) holds all a part decides on."""
    from hostctl.plan import path_requests

    requests = path_requests(config) + [(d, False) for d in dir_requests(config)]
    seen: set[str] = set()
    return [(p, listing) for p, listing in requests if not (p in seen or seen.add(p))]
