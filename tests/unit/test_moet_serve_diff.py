"""What vLLM-MoET serves and what hostctl's plan serves, for every recipe x box of the copy.

vLLM-MoET's side is its own runner (tests/moet_runner.py): `common.build_serve_cmd` with the box
in venv mode (the `vllm serve` argv), `common.declared_env` and `common.build_env` (the knobs and
the process env), and `common._docker_serve_cmd` for a docker box. hostctl's side is the plan's
RuntimeSpec (command, env, volumes) for a profile made from the box (`profile_for`, until
`hostctl init --box` lands), on facts with the box's GPU count. Container paths are mapped back
to host paths through the spec's volumes before they are compared.

Every difference found is classified by `what`; DELIBERATE holds each kept one with its reason
(docs/vllm-moet-differences.md, "Serve command and environment"). A difference outside it fails,
and so does an entry no pair needs any more. Pairs vLLM-MoET itself cannot build (the box holds
no path for a model the recipe serves) are NOT_BUILT, asserted by the KeyError its runner raises.
"""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path

import pytest
import yaml

import moet_runner
from hostctl.images import GPU_RUNTIME_IMAGE
from hostctl import safepaths
from hostctl.config import Config, load_recipe, parse_profile
from hostctl.facts import load_snapshot
from hostctl.facts.records import GpuPair
from hostctl.plan import build_plan

ROOT = Path(__file__).resolve().parents[2]
FACTS = ROOT / "runtime" / "hosts" / "pro6000x2-desktop.facts.json"
PORT = 8123  # vLLM-MoET's DEFAULT_PORT; hostctl's is the profile's
RELOCATED = "/srv/box"  # where a box path hostctl never binds (under /root) moves to: see DELIBERATE
BOXES = {p.stem: p for p in moet_runner.box_files()}
PAIRS = [(rid, box) for rid in moet_runner.recipe_ids() for box in BOXES]

DELIBERATE: dict[str, str] = {
    "--host": "hostctl owns the address: loopback unless the profile opts in with an API key; vLLM-MoET's "
              "bench leaves vLLM's default (every address)",
    "--port": "hostctl owns the port (runtime.api_port); vLLM-MoET's bench picks its own (--port, or -e PORT "
              "for its image)",
    "env set by the nccl plan": "NCCL_* from this host's topology, P2P verdict and IOMMU; vLLM-MoET takes them "
                                "from the box file",
    "env set by the cache plan": "compile caches kept on the compile-cache role, so tuned kernels survive a restart",
    "box env": "a box's env is the host's, not the recipe's: `hostctl init --box` carries it as runtime.env "
               "(moet-box); a hand-made profile from the box has none",
    "knob dropped": "vLLM-MoET drops a knob whose placeholder the box cannot fill (build_env); hostctl's plan "
                    "refuses it, naming the field (storage.<role>.unnamed)",
    "CUDA_VISIBLE_DEVICES": "hostctl gives the container its GPUs by UUID (Docker device requests); vLLM-MoET's "
                            "venv run sets CUDA_VISIBLE_DEVICES",
    "bind source under /root": "hostctl never binds a system directory (hostctl/safepaths.py), so the profile "
                               "names another; the values are compared with the box's path put back",
    "docker: checkpoint at /model": "hostctl binds the checkpoint at /model and passes that path; vLLM-MoET's image "
                                    "finds it at /models/<name>",
    "docker: models_dir bound whole": "hostctl binds runtime.models_dir at /models; vLLM-MoET binds each extra model",
    "docker: planes cache bound only if it exists here": "vLLM-MoET's docker run binds the planes cache only where "
                                                         "the directory exists on the machine that builds the "
                                                         "command; hostctl plans it always (provision creates it, "
                                                         "doctor says when it is missing)",
    "docker: hostctl's own image": "vLLM-MoET's recipes image runs its recipe launcher (serve_recipe.py, given a "
    "recipe id) as its entrypoint; hostctl runs its own runtime image, whose entrypoint runs the server command the "
    "plan renders",
    "docker: shm size": "host IPC shares the host's /dev/shm, where Docker ignores --shm-size; doctor checks the "
                        "host's /dev/shm",
    "docker: recipe launcher": "vLLM-MoET's image reads the recipe YAML and models.yaml mounted into it and builds "
                               "the serve command inside; hostctl passes the resolved argv and env",
}


@pytest.fixture(scope="module")
def common():
    return moet_runner.runner()["common"]


def host(path: str) -> str:
    """A box path as a profile can name it."""
    return RELOCATED + path if safepaths.host_dir_problem(path) else path


def unhost(path: str) -> str:
    return path.removeprefix(RELOCATED) if path.startswith(RELOCATED + "/") else path


def profile_for(box: dict, recipe: dict, recipe_file: Path) -> dict:
    """The profile a box makes for one recipe: models[recipe.model] -> runtime.model_dir, planes_cache[model]
    -> storage.planes_cache (a directory), the extra models' folder -> runtime.models_dir, hostctl's GPU
    runtime image -> runtime.image (init --box's choice for every box). The one place to swap for `hostctl init --box`."""
    extras = recipe["requires"].get("extra_models", [])
    parents = {os.path.dirname(box["models"][n]) for n in extras}
    assert all(os.path.basename(box["models"][n]) == n for n in extras) and len(parents) <= 1, \
        "an extra model whose folder is not <models_dir>/<name>: hostctl cannot name it"
    runtime = {"model_dir": host(box["models"][recipe["model"]])}
    if parents:
        runtime["models_dir"] = host(parents.pop())
    runtime["image"] = GPU_RUNTIME_IMAGE  # as init --box writes it for every box
    storage = {}
    if recipe["model"] in box["planes_cache"]:
        storage["planes_cache"] = host(box["planes_cache"][recipe["model"]])
    return {"name": "box", "recipe": str(recipe_file), "memory": {"host_reserve": "4GiB"}, "storage": storage,
            "runtime": runtime}


def facts_for(gpus: int):
    """The desktop's facts with the box's GPU count (copies of its first card, all at PHB)."""
    facts = load_snapshot(FACTS).model_copy(deep=True)
    first = facts.gpus.devices[0]
    facts.gpus.devices = [first.model_copy(update={"index": i, "uuid": f"GPU-00000000-0000-4000-8000-{i:012x}",
                                             "pci_bus_id": f"0000:{i + 1:02x}:00.0"}) for i in range(gpus)]
    facts.gpus.pairs = [GpuPair(a=a, b=b, topology="PHB", p2p_read="ok", p2p_write="ok")
                        for a in range(gpus) for b in range(a + 1, gpus)]
    return facts


def argv_pairs(tokens: list[str]) -> list[tuple[str, str | None]]:
    """How vLLM's argparse reads flags: `--f=v`, `--f v`, or a bare `--f`."""
    out: list[tuple[str, str | None]] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        assert tok.startswith("--"), f"a positional {tok!r} among the flags"
        if "=" in tok:
            flag, _, value = tok.partition("=")
            out.append((flag, value))
        elif i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
            out.append((tok, tokens[i + 1]))
            i += 1
        else:
            out.append((tok, None))
        i += 1
    return out


def by_flag(pairs):
    out: dict[str, list] = {}
    for flag, value in pairs:
        out.setdefault(flag, []).append(value)
    return out


def to_host(value: str, volumes) -> str:
    """The container paths in `value` (a path, or JSON holding one) as the host paths bound there."""
    for v in sorted(volumes, key=lambda v: -len(v.target)):
        value = re.sub(rf'(?<![\w/.-]){re.escape(v.target)}(?=/|"|$)', lambda _: unhost(v.source), value)
    return value


def hostctl_side(common, rid: str, box_id: str):
    recipe = common.load_recipe(rid)
    box = common.load_box(str(BOXES[box_id]))
    recipe_file = moet_runner.bench_copy("recipes") / f"{rid}.yaml"
    data = profile_for(box, recipe, recipe_file)
    config = Config(profile=parse_profile(data, "box profile"), recipe=load_recipe(recipe_file), source="box")
    return build_plan(config, facts_for(box["gpus"]["count"])), data


def differences(common, rid: str, box_id: str) -> set[str]:
    """Every difference between what vLLM-MoET and hostctl serve for this pair, by `what`."""
    recipe = common.load_recipe(rid)
    box = common.load_box(str(BOXES[box_id]))
    venv = {**copy.deepcopy(box), "runtime": "venv", "venv": box.get("venv", "/opt/venv")}
    plan, data = hostctl_side(common, rid, box_id)
    spec = plan.runtime
    found: set[str] = set()
    if any(p.startswith(RELOCATED) for p in [*data["runtime"].values(), *data["storage"].values()]):
        found.add("bind source under /root")

    # argv: vLLM-MoET's `vllm serve MODEL ...` against hostctl's api_server --model ...
    moet = common.build_serve_cmd(recipe, venv, PORT)
    assert moet[:2] == [os.path.join(venv["venv"], "bin", "vllm"), "serve"]
    theirs = by_flag([("--model", moet[2]), *argv_pairs(moet[3:])])
    ours_cmd = spec.command[spec.command.index("--model"):]
    ours = by_flag((f, to_host(v, spec.volumes) if v is not None else v) for f, v in argv_pairs(ours_cmd))
    for flag in sorted(set(theirs) | set(ours)):
        a, b = theirs.get(flag), ours.get(flag)
        if a == b:
            continue
        if flag in ("--host", "--port", "--max-model-len") and (flag != "--max-model-len" or a is None):
            found.add(flag)
        elif a is None and flag in plan.nccl.serve_flags:
            found.add("serve flag from the nccl plan")
        else:
            found.add(f"argv {flag}: vLLM-MoET {a}, hostctl {b}")

    # env: the knobs vLLM-MoET declares (None: dropped) and the process env it builds
    declared = common.declared_env(recipe, venv)
    built = common.build_env(recipe, venv, list(range(recipe["requires"].get("gpus", 1))))
    dropped_fields = {p.message.split(":", 1)[0] for p in plan.errors if p.code.endswith(".unnamed")}
    for key, value in declared.items():
        mine = spec.env.get(key)
        mine = to_host(mine, spec.volumes) if mine is not None else None
        if value is None:
            found.add("knob dropped" if f"env.{key}" in dropped_fields and key not in spec.env else f"env {key} dropped")
        elif mine == value:
            continue
        elif key in box["env"] and key not in recipe["env"]:
            found.add("box env")
        elif spec.env_sources.get(key, "recipe") != "recipe":
            found.add(f"env overridden by the {spec.env_sources[key]} plan")
        else:
            found.add(f"env {key}: vLLM-MoET {value!r}, hostctl {mine!r}")
    for prepend, var in (("PATH_PREPEND", "PATH"), ("LD_LIBRARY_PATH_PREPEND", "LD_LIBRARY_PATH")):
        if prepend in {**box["env"], **recipe["env"]}:
            assert built[var].startswith({**box["env"], **recipe["env"]}[prepend] + ":")
            found.add("box env")
    if built.get("CUDA_VISIBLE_DEVICES") != spec.env.get("CUDA_VISIBLE_DEVICES"):
        found.add("CUDA_VISIBLE_DEVICES")
    for key, source in spec.env_sources.items():
        if key not in declared:
            found.add(f"env set by the {source} plan" if source != "recipe" else f"env {key} from hostctl alone")

    if box.get("runtime") == "docker":
        found |= docker_differences(common, recipe, box, spec)
    return found


def docker_differences(common, recipe: dict, box: dict, spec) -> set[str]:
    found: set[str] = set()
    cmd = common._docker_serve_cmd(recipe, box, PORT, list(range(recipe["requires"].get("gpus", 1))), None, ())
    image_at = cmd.index(box["docker_image"])
    assert cmd[image_at:] == [box["docker_image"], recipe["id"]]
    binds = [cmd[i + 1] for i, c in enumerate(cmd) if c == "-v"]
    if spec.image != box["docker_image"]:
        found.add("docker: hostctl's own image")
    flags = {cmd[i]: cmd[i + 1] for i, c in enumerate(cmd[:image_at]) if c in ("--network", "--ipc", "--shm-size")}
    if flags.get("--ipc") != spec.ipc:
        found.add(f"docker ipc: vLLM-MoET {flags.get('--ipc')}, hostctl {spec.ipc}")
    if flags.get("--shm-size") != spec.shm_size:
        found.add("docker: shm size")
    if f"PORT={PORT}" in cmd:
        found.add("--port")
    theirs = {b.split(":")[1]: b.split(":")[0] for b in binds}
    ours = {v.target: unhost(v.source) for v in spec.volumes}
    if any(t.startswith("/opt/vllm-moet/") for t in theirs):
        found.add("docker: recipe launcher")
    model_target = f"/models/{recipe['model']}"
    if theirs.get(model_target) == box["models"][recipe["model"]] and ours.get("/model") == theirs[model_target]:
        found.add("docker: checkpoint at /model")
    extras = recipe["requires"].get("extra_models", [])
    if extras and all(ours.get("/models") and f"{ours['/models']}/{n}" == theirs.get(f"/models/{n}") for n in extras):
        found.add("docker: models_dir bound whole")
    pc = box["planes_cache"].get(recipe["model"])
    if pc and "/planes" not in theirs and ours.get("/planes") == pc and not os.path.isdir(pc):
        found.add("docker: planes cache bound only if it exists here")
    elif theirs.get("/planes") != ours.get("/planes"):
        found.add(f"docker planes: vLLM-MoET {theirs.get('/planes')}, hostctl {ours.get('/planes')}")
    for target in sorted(set(theirs) - {model_target, "/planes"} - {f"/models/{n}" for n in extras}):
        if not target.startswith("/opt/vllm-moet/"):
            found.add(f"docker bind {target} only in vLLM-MoET")
    return found


def not_built(common, rid: str, box_id: str) -> str | None:
    recipe = common.load_recipe(rid)
    box = common.load_box(str(BOXES[box_id]))
    missing = [m for m in [recipe["model"], *recipe["requires"].get("extra_models", [])] if m not in box["models"]]
    return f"the box holds no {', '.join(missing)}" if missing else None


def test_the_copy_has_every_pair():
    assert len(moet_runner.recipe_ids()) == 26 and len(BOXES) == 6 and len(PAIRS) == 156


@pytest.mark.parametrize("rid, box_id", PAIRS)
def test_vllm_moet_and_hostctl_serve_the_same_or_differ_as_documented(common, rid, box_id):
    reason = not_built(common, rid, box_id)
    if reason is not None:
        # vLLM-MoET's own runner cannot build this command; compat skips the pair ("not on this box")
        venv = {**common.load_box(str(BOXES[box_id])), "runtime": "venv", "venv": "/opt/venv"}
        with pytest.raises(KeyError):
            common.build_serve_cmd(common.load_recipe(rid), venv, PORT)
        return
    found = differences(common, rid, box_id)
    unlisted = sorted(found - set(DELIBERATE))
    assert not unlisted, f"{rid} on {box_id}: differences not in DELIBERATE (fix hostctl, or document and pin): {unlisted}"


def test_every_deliberate_difference_is_still_needed(common):
    seen: set[str] = set()
    for rid, box_id in PAIRS:
        if not_built(common, rid, box_id) is None:
            seen |= differences(common, rid, box_id)
    assert sorted(set(DELIBERATE) - seen) == []


def test_every_deliberate_difference_is_in_the_docs():
    text = (ROOT / "docs" / "vllm-moet-differences.md").read_text()
    section = text.split("## Serve command and environment", 1)[1].split("\n## ", 1)[0]
    missing = [what for what in DELIBERATE if f"`{what}`" not in section]
    assert missing == []


def test_served_name_and_model_path_agree(common):
    """The two values a client and the weights depend on, compared outright on every built pair."""
    for rid, box_id in PAIRS:
        if not_built(common, rid, box_id) is not None:
            continue
        recipe = common.load_recipe(rid)
        box = common.load_box(str(BOXES[box_id]))
        plan, _ = hostctl_side(common, rid, box_id)
        cmd = plan.runtime.command
        assert cmd[cmd.index("--served-model-name") + 1] == recipe["served_name"]
        assert to_host(cmd[cmd.index("--model") + 1], plan.runtime.volumes) == box["models"][recipe["model"]]
