"""`hostctl init` on facts snapshots: the four bundled examples and the awkward hosts of
tests/snapshots. The written profile loads with hostctl's own loader, plans without errors the
host did not already have, and the storage planner accepts every drive it names; the recipe,
drive, swap, power and phase choices with their reasons; bad --drives and existing files."""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path

import pytest

import snapshots
from hostctl import paths
from hostctl.cli import main
from hostctl.config import DriveIdentity, load_config
from hostctl.errors import InputError
from hostctl.facts import load_snapshot
from hostctl.facts.records import BlankProof, Disk, HostFacts
from hostctl.plan import build_plan
from hostctl.profile_init import bundled_recipes, check_loads, propose, render_profile
from hostctl.profile_init.records import InitOptions
from hostctl.provision.storage import StorageOptions, SystemFiles, plan_storage_provision
from hostctl.bytesizes import GIB, MIB

HOSTS = paths.hosts_dir()
EXAMPLES = {"demo-cpu": "demo-cpu-tiny-moe", "pro6000x1-mapped": "dsv4-flash-0731-mapped-1m",
            "pro6000x1-resident": "dsv4-flash-0731-resident-260k", "pro6000x2-desktop": "dsv4-flash-0731-tp2-400k"}
AWKWARD = ["p2p_unsupported", "too_little_ram_swap", "two_sockets_split", "numa_unknown_two_nodes", "gpu_on_node1",
           "blank_drives", "foreign_and_removable"]
RECIPES = bundled_recipes()
SERIAL1, SERIAL2 = "25120G800101", "25120G800102"


def example(name: str) -> HostFacts:
    return load_snapshot(HOSTS / f"{name}.facts.json")


def awkward(name: str) -> HostFacts:
    return getattr(snapshots, name)()


def written(facts: HostFacts, tmp_path: Path, options: InitOptions = InitOptions(), recipes=RECIPES):
    """Propose, render, write and load the profile back with hostctl's own loader."""
    proposal = propose(facts, recipes, options)
    text = render_profile(proposal, facts_source="a test snapshot")
    path = tmp_path / "hostctl.toml"
    path.write_text(text)
    check_loads(text, tmp_path, proposal)
    return proposal, load_config(path), text


def prose(text: str) -> str:
    """The profile's comments as one line of words (the renderer wraps them)."""
    return " ".join(" ".join(line[1:].split()) for line in text.splitlines() if line.startswith("#"))


def errors(config, facts) -> list[str]:
    return [f"[{p.area}] {p.message}" for p in build_plan(config, facts).errors]


def provisioned(facts: HostFacts, proposal) -> HostFacts:
    """These facts once `hostctl provision` has made the proposed swap partitions active."""
    f = facts.model_copy(deep=True)
    added = sum(d.swap_bytes for d in proposal.drives if d.verdict == "create")
    f.memory.swap_total_bytes += added
    f.memory.swap_free_bytes += added
    return f


def drive_verdicts(config, facts) -> dict[str, str]:
    sp = plan_storage_provision(config, facts, SystemFiles(), StorageOptions(new_uuid=lambda: "00000000-0000-4000-8000-0"))
    return {v.drive.name: v.status for v in sp.drives}


# ---------------------------------------------------------------- the four examples


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_examples_load_plan_and_choose_their_recipe(name, tmp_path):
    facts = example(name)
    proposal, config, _ = written(facts, tmp_path)
    assert proposal.recipe == EXAMPLES[name]
    assert proposal.recipe_reason.startswith("its requires fit best: needs ")
    assert errors(config, facts) == []
    assert proposal.plan_errors == []
    profile = config.profile
    assert (profile.runtime.api_host, profile.runtime.api_port) == ("127.0.0.1", 8000)
    assert profile.gpu.power_limit_w is None and profile.gpu.power_limits_w == {}
    # every recipe that was not chosen says why
    others = [o for o in proposal.recipes if o.ref != proposal.recipe]
    assert len(others) == len(RECIPES) - 1 and all(o.reason for o in others)


def test_recipe_reasons_name_what_does_not_fit():
    p = propose(example("pro6000x1-resident"), RECIPES)
    by_ref = {o.ref: o for o in p.recipes}
    assert not by_ref["dsv4-flash-0731-mapped-1m"].fits
    assert "192 GB of host RAM" in by_ref["dsv4-flash-0731-mapped-1m"].reason
    assert not by_ref["dsv4-flash-0731-tp2-400k"].fits
    assert by_ref["dsv4-flash-0731-tp2-400k"].reason == "needs 2 GPUs; this host has 1"
    assert by_ref["demo-cpu-tiny-moe"].fits


def test_demo_host_has_no_free_disk_and_says_why(tmp_path):
    proposal, config, text = written(example("demo-cpu"), tmp_path)
    assert config.profile.drives == []
    assert [s.disk for s in proposal.skipped_disks] == ["/dev/vda"]
    assert "root or boot filesystem" in proposal.skipped_disks[0].reason
    assert config.profile.storage.compile_cache == "/var/lib/hostctl/compile-cache"
    assert config.profile.memory.host_reserve == 4 * GIB  # 1/8 of 23.5 GiB, at least 4 GiB
    assert "drives: no disk here is free for hostctl: /dev/vda" in prose(text)


def test_desktop_keeps_hostctls_layout_as_it_is(tmp_path):
    facts = example("pro6000x2-desktop")
    proposal, config, text = written(facts, tmp_path)
    bundled = load_config(HOSTS / "pro6000x2-desktop.toml").profile
    # the drives by serial, with the name, swap, filesystem and mountpoint already on them
    assert [(d.name, str(d.identity), d.swap, d.filesystem, d.mount) for d in config.profile.drives] == \
        [(d.name, str(d.identity), d.swap, d.filesystem, d.mount) for d in bundled.drives]
    tuned = {"swappiness_converting", "swappiness_serving", "page_cluster"}
    assert {k: v for k, v in config.profile.storage.model_dump().items() if k not in tuned} \
        == {k: v for k, v in bundled.storage.model_dump().items() if k not in tuned}
    assert config.profile.phase == "serving"  # the caches may already be built: the drives carry hostctl's layout
    # the storage planner would keep both drives as they are: nothing to format
    assert set(drive_verdicts(config, facts).values()) <= {"ready", "converge"}
    assert all(not d.named and d.found == "hostctl layout" for d in proposal.drives)
    assert text.count("# CONFIRM: ") == 2
    assert "swap already in hostctl's layout on the drives: nothing more needed" in prose(text)
    # power limits left at the default, each GPU's range and current limit shown
    assert "GPU 0 NVIDIA RTX PRO 6000 Blackwell Workstation Edition: range 150-600 W, default 600 W, now" in prose(text)
    assert "\n# power_limit_w = 300\n" in text and "\npower_limit_w" not in text


# ---------------------------------------------------------------- the awkward hosts


@pytest.mark.parametrize("name", AWKWARD)
def test_awkward_hosts_load_and_plan(name, tmp_path):
    facts = awkward(name)
    proposal, config, _ = written(facts, tmp_path)
    # every drive it names is one the storage planner lays out or keeps without refusing
    assert set(drive_verdicts(config, facts).values()) <= {"create", "converge", "ready"}
    # what the plan still reports is only what provisioning the proposed swap removes
    assert errors(config, provisioned(facts, proposal)) == []
    assert errors(config, facts) == [e.split(" (fix: ")[0] for e in proposal.plan_errors]


def test_unknown_numa_node_prefers_the_recipe_the_plan_accepts(tmp_path):
    facts = awkward("numa_unknown_two_nodes")
    bundled = load_config(HOSTS / "pro6000x1-mapped.toml")
    assert errors(bundled, facts), "the mapped recipe has a NUMA error on this host"
    proposal, config, _ = written(facts, tmp_path)
    assert proposal.recipe == "dsv4-flash-0731-resident-260k"
    mapped = next(o for o in proposal.recipes if o.ref == "dsv4-flash-0731-mapped-1m")
    assert mapped.fits and mapped.plan_errors and mapped.plan_errors[0].startswith("[placement] NUMA node unknown")
    assert "preferred over dsv4-flash-0731-mapped-1m" in proposal.recipe_reason
    assert errors(config, facts) == []


def test_blank_drives_get_the_conversion_swap_spread_in_whole_mib(tmp_path):
    facts = awkward("blank_drives")
    proposal, config, text = written(facts, tmp_path)
    mem = facts.memory.mem_total_bytes
    share = math.ceil((220 * GIB - mem) / 2 / MIB) * MIB
    assert share == 89472 * MIB  # (220 - 45.25) GiB / 2 = 87.375 GiB
    assert [(d.name, str(d.identity), d.swap, d.swap_priority) for d in config.profile.drives] == [
        ("ssd1", f"serial:{SERIAL1}", share, 100), ("ssd2", f"serial:{SERIAL2}", share, 100)]
    assert mem + 2 * share >= 220 * GIB
    assert proposal.swap.other_swap_bytes == 8 * GIB and proposal.swap.shortfall_bytes == 0
    assert "220 GiB - MemTotal 45.25 GiB = 174.75 GiB still needed" in prose(text)
    assert "89472 MiB (87.4 GiB) per drive" in prose(text)
    assert config.profile.phase == "converting"
    assert drive_verdicts(config, facts) == {"ssd1": "create", "ssd2": "create"}
    # before provisioning, the plan says RAM+swap is short: the swap init sized is what removes it
    assert [e.split(";")[0] for e in errors(config, facts)] == \
        ["[memory] host RAM+swap is 53.2 GiB"]
    assert errors(config, provisioned(facts, proposal)) == []


def test_foreign_and_removable_drives_are_never_proposed(tmp_path):
    facts = awkward("foreign_and_removable")
    proposal, config, text = written(facts, tmp_path)
    assert [d.disk for d in proposal.drives] == ["/dev/nvme1n1", "/dev/nvme2n1"]
    skipped = {s.disk: s.reason for s in proposal.skipped_disks}
    assert "partition /dev/nvme3n1p1 ('photos')" in skipped["/dev/nvme3n1"]
    assert skipped["/dev/sda"].startswith("removable")
    assert "S7KGNU0X700003" not in "\n".join(line for line in text.splitlines() if not line.startswith("#"))


def test_named_foreign_drive_is_bad_input():
    facts = awkward("foreign_and_removable")
    with pytest.raises(InputError) as exc:
        propose(facts, RECIPES, InitOptions(drives=(DriveIdentity.parse("serial:S7KGNU0X700003"),)))
    assert exc.value.exit_code == 2
    assert "--drives serial:S7KGNU0X700003: /dev/nvme3n1 would be refused: it holds partition" in exc.value.message


def test_named_removable_drive_is_used_and_only_named_ones(tmp_path):
    facts = awkward("foreign_and_removable")
    proposal, config, text = written(facts, tmp_path, InitOptions(drives=(DriveIdentity.parse("by-id:usb-SanDisk_Ultra_4C530001230815117442-0:0"),)))
    assert [(d.name, str(d.identity)) for d in config.profile.drives] == [("ssd1", "serial:4C530001230815117442")]
    assert proposal.drives[0].named and "# CONFIRM" not in text and "marked CONFIRM" not in text
    assert "named on the command line as by-id:usb-SanDisk_Ultra_4C530001230815117442-0:0" in prose(text)
    # the swap the conversion needs does not fit on a 64 GB stick: capped, and the shortfall said
    assert config.profile.drives[0].swap < 64 * 10**9 // 2 + MIB
    assert proposal.swap.shortfall_bytes > 0 and any("SHORT" in w for w in proposal.warnings)


def test_rotational_disks_only_when_nothing_faster():
    facts = awkward("blank_drives")
    hdd = facts.disks.devices[1].model_copy(update={"name": "sdb", "path": "/dev/sdb", "serial": "ZL2ABCDE",
                                                    "wwn": None, "by_id": [], "rotational": True})
    facts.disks.devices.append(hdd)
    p = propose(facts, RECIPES)
    assert "/dev/sdb" not in [d.disk for d in p.drives]
    assert "a spinning disk, and faster drives are proposed" in {s.disk: s.reason for s in p.skipped_disks}["/dev/sdb"]
    facts.disks.devices = [d for d in facts.disks.devices if d.name in ("nvme0n1", "sdb")]
    p = propose(facts, RECIPES)
    assert [(d.name, d.disk) for d in p.drives] == [("hdd1", "/dev/sdb")]
    assert any("spinning disk" in n for n in p.drives[0].notes)


# ---------------------------------------------------------------- identities


def _blank_disk(name: str, **kw) -> Disk:
    kw.setdefault("blank", BlankProof(first_mib_zero=True, last_mib_zero=True))
    return Disk(name=name, path=f"/dev/{name}", size_bytes=2 * 10**12, rotational=False, removable=False, **kw)


def test_identity_is_serial_then_wwn_then_by_id_then_path(tmp_path):
    facts = awkward("blank_drives")
    root = next(d for d in facts.disks.devices if d.is_root_disk)
    facts.disks.devices = [
        root,
        _blank_disk("nvme1n1", serial="SAME", wwn="eui.0001", by_id=["nvme-A_SAME"]),
        _blank_disk("nvme2n1", serial="SAME", wwn="eui.0001", by_id=["nvme-B_SAME"]),  # a clone's serial and wwn
        _blank_disk("nvme3n1", serial="SAME", wwn="eui.0003"),
        _blank_disk("loop0"),  # no udev: nothing stable
    ]
    proposal, config, text = written(facts, tmp_path)
    assert [str(d.identity) for d in config.profile.drives] == [
        "by-id:nvme-A_SAME", "by-id:nvme-B_SAME", "wwn:eui.0003", "path:/dev/loop0"]
    assert any("drives[3].identity path:/dev/loop0" in w for w in proposal.warnings)
    assert "named by its kernel path, which can change between boots" in prose(text)
    assert config.warnings == [w for w in proposal.warnings if "kernel device names" in w]


def test_named_by_path_is_written_by_serial():
    facts = awkward("blank_drives")
    p = propose(facts, RECIPES, InitOptions(drives=(DriveIdentity.parse("path:/dev/nvme2n1"),)))
    assert [(d.name, d.identity, d.named) for d in p.drives] == [("ssd1", f"serial:{SERIAL2}", True)]
    assert p.drives[0].notes[0] == (f"named on the command line as path:/dev/nvme2n1; written as serial:{SERIAL2}, "
                                    "which does not move between boots")
    assert {s.disk: s.reason for s in p.skipped_disks}["/dev/nvme1n1"] == "not named with --drives"


@pytest.mark.parametrize("drives, words", [
    (("serial:NOPE",), "--drives serial:NOPE: no disk on this host has that identity"),
    ((f"serial:{SERIAL1}", "path:/dev/nvme1n1"), "--drives path:/dev/nvme1n1: names /dev/nvme1n1 a second time"),
    (("serial:24374C8A1F2E",), "/dev/nvme0n1 would be refused: it carries the root or boot filesystem"),
])
def test_bad_drives_are_bad_input(drives, words):
    with pytest.raises(InputError) as exc:
        propose(awkward("blank_drives"), RECIPES, InitOptions(drives=tuple(DriveIdentity.parse(d) for d in drives)))
    assert words in exc.value.message and "nothing was written" in exc.value.message


def test_drives_none_puts_the_caches_in_directories(tmp_path):
    facts = awkward("blank_drives")
    proposal, config, _ = written(facts, tmp_path, InitOptions(drives=()))
    assert config.profile.drives == []
    assert config.profile.storage.planes_cache == "/var/lib/hostctl/moet-planes"
    assert config.profile.storage.expert_store == "/var/lib/hostctl/moet-store"
    assert proposal.swap.shortfall_bytes == 220 * GIB - facts.memory.mem_total_bytes
    assert any("no data drive to put swap on" in w for w in proposal.warnings)


def test_name_and_mountpoint_never_collide(tmp_path):
    """A new drive gets a name no hostctl layout on the host uses and whose mountpoint is free."""
    facts = example("pro6000x2-desktop")
    facts.disks.devices.append(_blank_disk("nvme3n1", serial="NEW3"))
    facts.mounts.append(facts.mounts[0].model_copy(update={"target": "/mnt/hostctl/ssd3", "source": "/dev/sdz1"}))
    proposal, config, _ = written(facts, tmp_path)
    assert [d.name for d in config.profile.drives] == ["ssd1", "ssd2", "ssd4"]
    assert drive_verdicts(config, facts)["ssd4"] == "create"


# ---------------------------------------------------------------- power, recipe, rendering


def test_power_limit_when_asked_within_every_range(tmp_path):
    facts = example("pro6000x2-desktop")
    proposal, config, _ = written(facts, tmp_path, InitOptions(power_limit_w=450))
    assert config.profile.gpu.power_limit_w == 450
    plan = build_plan(config, facts)
    assert [(g.desired_w, g.action) for g in plan.power.gpus] == [(450, "set"), (450, "set")]
    with pytest.raises(InputError, match=r"--power-limit 900: outside GPU 0 .*range 150-600 W"):
        propose(facts, RECIPES, InitOptions(power_limit_w=900))
    with pytest.raises(InputError, match="no GPU can be read here"):
        propose(example("demo-cpu"), RECIPES, InitOptions(power_limit_w=300))


def test_recipe_asked_that_does_not_fit_is_written_with_the_reason(tmp_path):
    facts = example("pro6000x2-desktop")
    ref = "dsv4-flash-0731-mapped-1m"
    proposal, config, text = written(facts, tmp_path, InitOptions(recipe=ref))
    assert config.recipe.id == ref
    assert proposal.recipe_reason.startswith("named with --recipe; it does NOT fit this host: needs about 192 GB")
    # the plan's errors are the host's with this recipe: the bundled profile for it has them too
    bundled = load_config(HOSTS / "pro6000x1-mapped.toml")
    assert set(errors(config, facts)) <= set(errors(bundled, facts))
    assert errors(config, facts)


def test_no_recipe_fits():
    gpu_only = [r for r in RECIPES if r.recipe.requires.gpus]
    p = propose(example("demo-cpu"), gpu_only)
    assert p.recipe is None and p.profile == {}
    assert p.recipe_reason.startswith("no recipe fits this host: ")
    assert all(o.ref in p.recipe_reason for o in p.recipes)


def test_awkward_text_is_escaped_and_loads(tmp_path):
    facts = awkward("blank_drives")
    facts.hostname = 'Bob\'s "Rig"\n#2'
    facts.disks.devices[1].model = 'evil"\n[runtime]\napi_host = "0.0.0.0'
    proposal, config, text = written(facts, tmp_path)
    assert config.profile.name == "bob-s-rig-2"
    assert config.profile.runtime.api_host == "127.0.0.1"
    assert tomllib.loads(text) == proposal.profile


# ---------------------------------------------------------------- the CLI


def cli(argv, capsys):
    code = main(argv)
    c = capsys.readouterr()
    return code, c.out, c.err


DESKTOP_FACTS = ["--facts", str(HOSTS / "pro6000x2-desktop.facts.json")]


def test_cli_writes_and_never_overwrites(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(["init"] + DESKTOP_FACTS, capsys)
    assert code == 0, err
    target = tmp_path / "hostctl.toml"
    assert out.startswith("wrote hostctl.toml: profile 'pro6000x2-desktop', recipe dsv4-flash-0731-tp2-400k")
    assert "  hostctl plan --facts " in out
    first = target.read_text()
    target.write_text(first + "# my edit\n")
    code, out, err = cli(["init"] + DESKTOP_FACTS, capsys)
    assert code == 3 and out == ""
    assert "hostctl.toml exists; hostctl init never writes over a profile" in err and "--force" in err
    assert target.read_text() == first + "# my edit\n"
    code, _, err = cli(["init", "--force"] + DESKTOP_FACTS, capsys)
    assert code == 0, err
    assert target.read_text() == first  # replaced: the same facts give the same file
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".hostctl.toml")]  # no temporary left
    code, out, err = cli(["plan", "--config", str(target)] + DESKTOP_FACTS, capsys)
    assert code == 0, out + err


def test_cli_json_is_the_same_choices(tmp_path, capsys):
    target = tmp_path / "p.toml"
    code, out, err = cli(["init", "--json", "--out", str(target)] + DESKTOP_FACTS, capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["schema"] == "hostctl.init/v1"
    assert doc["written"] is True and doc["out"] == str(target)
    assert doc["profile"] == tomllib.loads(target.read_text())
    assert doc["recipe"] == "dsv4-flash-0731-tp2-400k"
    assert [d["identity"] for d in doc["drives"]] == [f"serial:{SERIAL1}", f"serial:{SERIAL2}"]
    assert {c["key"] for c in doc["choices"]} >= {"recipe", "phase", "memory.host_reserve", "runtime.api_host",
                                                   "storage.planes_cache", "drives", "swap", "gpu.power_limit_w"}
    assert [g["min_w"] for g in doc["gpus"]] == [150, 150]


def test_cli_out_dash_prints_the_profile(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, _ = cli(["init", "--out", "-"] + DESKTOP_FACTS, capsys)
    assert code == 0 and tomllib.loads(out)["recipe"] == "dsv4-flash-0731-tp2-400k"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv, words", [
    (["--drives", "/dev/nvme1n1"], "--drives /dev/nvme1n1: expected 'serial:"),
    (["--drives", "serial:NOPE"], "--drives serial:NOPE: no disk on this host has that identity"),
    (["--power-limit", "700"], "--power-limit 700: outside GPU 0"),
    (["--recipe", "no-such-recipe"], "recipe "),
    (["--config", "x.toml"], "`hostctl init` writes one"),
    (["--json", "--out", "-"], "pick one"),
])
def test_cli_bad_input_exits_2_and_writes_nothing(argv, words, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    front = argv[:2] if argv[0] == "--config" else []  # --config is a global option: before the command
    code, out, err = cli(front + ["init"] + argv[len(front):] + DESKTOP_FACTS, capsys)
    assert code == 2 and words in err, err
    assert list(tmp_path.iterdir()) == []


def test_cli_recipe_path_is_written_absolute(tmp_path, capsys, repo_root):
    recipe = tmp_path / "mine.yaml"
    recipe.write_text((repo_root / "runtime/recipes/dsv4-flash-0731-resident-260k.yaml").read_text())
    elsewhere = tmp_path / "sub" / "p.toml"
    code, _, err = cli(["init", "--recipe", str(recipe), "--out", str(elsewhere)] + DESKTOP_FACTS, capsys)
    assert code == 0, err
    assert tomllib.loads(elsewhere.read_text())["recipe"] == str(recipe.resolve())
    assert load_config(elsewhere).recipe.id == "dsv4-flash-0731-resident-260k"


def test_help_lists_init(capsys):
    code, out, _ = cli(["--help"], capsys)
    assert code == 0 and "init" in out


@pytest.mark.parametrize("drives", [None, ()], ids=["blank-drives", "no-drive"])
def test_a_recipe_naming_its_planes_cache_by_placeholder_gets_one(drives, tmp_path):
    """vLLM-MoET's recipes have no `storage:` list; `{planes_cache}` in their env is how they say they
    need one. Plain init gives the role a place, so the profile it writes plans without
    storage.planes_cache.unnamed."""
    import moet_runner
    from hostctl.profile_init import recipe_source

    ref = str(moet_runner.bench_dir() / "recipes" / "deepseek-v4-flash" / "pro6000x1.yaml")
    source = recipe_source(ref)
    assert source.recipe.storage == [] and "planes_cache" in source.recipe.placeholder_roles()
    proposal, config, _ = written(awkward("blank_drives"), tmp_path, InitOptions(recipe=ref, drives=drives),
                                  recipes=[*RECIPES, source])
    assert config.profile.storage.planes_cache is not None
    plan = build_plan(config, awkward("blank_drives"))
    assert not [p for p in plan.errors if p.code.startswith("storage.planes_cache")], plan.errors
    assert "VLLM_MOE_W2_PLANES_CACHE" in plan.runtime.env
