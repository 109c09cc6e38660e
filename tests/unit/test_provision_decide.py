"""Each provision part's pure decide() on facts snapshots (the four bundled examples and the
awkward hosts of tests/snapshots), with the system files given as a snapshot too: nothing here
reads the host. What an Action carries (part, id, what it changes, why, argv or diff, destructive,
consent level), the zero-action verdict on a host that matches, and a dry run judging later
parts on the facts the storage part would leave."""

from __future__ import annotations

import io
import itertools
from pathlib import Path, PurePosixPath

import pytest

import snapshots
from hostctl import examples, paths
from hostctl.errors import FailedError, InputError
from hostctl.facts.records import GpuFacts
from hostctl.facts.sysfiles import ManagedFiles, SystemFiles
from hostctl.plan import build_plan
from hostctl.provision import gpu, parts, storage, system
from hostctl.act.actions import Action, Refusal, Settled, Skipped
from hostctl.service.render import INSTALLED_PROFILE
from hostctl.bytesizes import GIB

EXAMPLES = ["demo-cpu", "pro6000x1-mapped", "pro6000x1-resident", "pro6000x2-desktop"]


def opts(**kw) -> storage.StorageOptions:
    counter = itertools.count(1)
    kw.setdefault("new_uuid", lambda: f"00000000-0000-4000-8000-{next(counter):012d}")
    return storage.StorageOptions(**kw)


desktop_files = snapshots.desktop_files


# ---------------------------------------------------------------- storage


@pytest.mark.parametrize("name", EXAMPLES)
def test_storage_decision_on_each_example(name):
    config, facts = examples.load(name)
    files = desktop_files(config, facts) if name == "pro6000x2-desktop" else SystemFiles()
    d = storage.decide(config, facts, files, opts())
    sp = d.detail
    assert d.part == "storage" and d.actions == sp.actions  # the same actions, in the same order
    for v in sp.drives:  # every drive is settled, refused or acted on, never silently dropped
        step = f"storage/{v.drive.name}"
        assert any(i.id == step for i in d.items if isinstance(i, (Settled, Refusal))) or v.actions
    for a in d.actions:
        assert a.part == "storage" and a.id.startswith("storage/") and a.why and a.changes
        assert (a.argv is not None) or (a.diff is not None) or a.describe.startswith("mkdir")
    if name == "pro6000x2-desktop":  # as provisioned on that host: nothing to do
        assert d.actions == [] and {s.id for s in d.settled} >= {"storage/ssd1", "storage/ssd2", "storage/fstab",
                                                                  "storage/sysctl"}


def test_blank_drives_get_the_layout_with_consent_yes():
    config, _ = snapshots.desktop()
    facts = snapshots.blank_drives()
    d = storage.decide(config, facts, SystemFiles(), opts())
    parts_ = [a for a in d.actions if a.id == "storage/ssd1/partition"]
    assert len(parts_) == 1 and parts_[0].argv[0] == "sgdisk" and parts_[0].argv[-1] == "/dev/nvme1n1"
    destructive = [a for a in d.actions if a.destructive]
    assert destructive and {a.consent for a in destructive} == {"yes"}
    assert {a.consent for a in d.actions if not a.destructive} == {"none"}
    assert parts_[0].why.startswith("drive ssd1 (serial:25120G800101): lay out")
    fstab_edit = next(a for a in d.actions if a.id == "storage/fstab")
    assert fstab_edit.argv is None and fstab_edit.diff.startswith("--- /dev/null\n+++ /etc/fstab")
    assert not d.pending and not d.refusals


def test_erasing_foreign_contents_needs_consent_level_erase():
    config, facts = examples.load("pro6000x2-desktop")
    facts = facts.model_copy(deep=True)
    disk = next(x for x in facts.disks.devices if x.serial == "25120G800102")
    for p in disk.partitions:  # someone else's filesystems on the second drive, nothing mounted
        p.part_label, p.fs_label, p.mountpoints, p.swap_active = "photos", "photos", [], False
    facts.mounts = [m for m in facts.mounts if not m.target.startswith("/mnt/hostctl/ssd2")]
    refused = storage.decide(config, facts, SystemFiles(), opts())
    assert [r.id for r in refused.refusals] == ["storage/ssd2"] and refused.actions == []
    d = storage.decide(config, facts, SystemFiles(), opts(erase=("serial:25120G800102",)))
    wipes = [a for a in d.actions if a.destructive and a.id.startswith("storage/ssd2/")]
    assert wipes and {a.consent for a in wipes} == {"erase"}


def test_pending_swap_is_what_the_storage_part_would_add():
    config, _ = snapshots.desktop()
    blank = snapshots.blank_drives()
    sp = storage.decide(config, blank, SystemFiles(), opts()).detail
    assert storage.pending_swap_bytes(sp) == 2 * 129 * GIB
    after = storage.facts_after(blank, sp)
    assert after.memory.swap_total_bytes == blank.memory.swap_total_bytes + 2 * 129 * GIB
    _, provisioned = examples.load("pro6000x2-desktop")  # swap already on: nothing pending
    done = storage.decide(config, provisioned, desktop_files(config, provisioned), opts()).detail
    assert storage.pending_swap_bytes(done) == 0 and storage.facts_after(provisioned, done) is provisioned


# ---------------------------------------------------------------- system


def _system_snap(config, plan, *, current: dict | None = None, enabled: bool = False, present: bool = True,
                 running: bool = False, root: str = "/srv/root"):
    desired = system.desired_files(config, plan)
    files = ManagedFiles(files={str(p): (current or {}).get(str(p)) for p in desired},
                         enabled={u: enabled for u in system.UNITS}, present={"/usr/local/bin/hostctl": present},
                         systemd_running=running)
    return system.SystemSnapshot(desired=desired, files=files, sysroot=root)


@pytest.mark.parametrize("name", EXAMPLES)
def test_system_decision_on_each_example(name):
    config, facts = examples.load(name)
    plan = build_plan(config, facts)
    d = system.decide(config, plan, _system_snap(config, plan))
    ids = [a.id for a in d.actions]
    assert ids[0] == f"system/file{INSTALLED_PROFILE}" and "system/enable/hostctl-runtime.service" in ids
    enable = next(a for a in d.actions if a.id == "system/enable/hostctl-runtime.service")
    assert enable.argv == ("systemctl", "--root=/srv/root", "enable", "hostctl-runtime.service")
    unit = next(a for a in d.actions if a.id == "system/file/etc/systemd/system/hostctl-runtime.service")
    assert unit.diff.startswith("--- /dev/null") and "RequiresMountsFor" in unit.why
    # what a full provision checks before the storage part touches a drive: every file it writes, and only those
    assert unit.writes == "/etc/systemd/system/hostctl-runtime.service" and enable.writes is None
    # a host holding exactly those files, the unit enabled: nothing to do
    desired = {str(p): b for p, b in system.desired_files(config, plan).items()}
    again = system.decide(config, plan, _system_snap(config, plan, current=desired, enabled=True))
    assert again.actions == [] and len(again.settled) == len(desired) + 1


def test_system_reloads_a_running_systemd_only_when_a_unit_changed():
    config, facts = examples.load("demo-cpu")
    plan = build_plan(config, facts)
    desired = {str(p): b for p, b in system.desired_files(config, plan).items()}
    profile_only = {k: v for k, v in desired.items() if k != INSTALLED_PROFILE}
    d = system.decide(config, plan, _system_snap(config, plan, current=profile_only, enabled=True, running=True, root="/"))
    assert [a.id for a in d.actions] == [f"system/file{INSTALLED_PROFILE}"]  # no unit changed: no reload
    d = system.decide(config, plan, _system_snap(config, plan, current={}, enabled=True, running=True, root="/"))
    assert "system/daemon-reload" in [a.id for a in d.actions]


def test_system_refuses_what_could_not_work_at_boot():
    config, facts = examples.load("demo-cpu")
    plan = build_plan(config, facts)
    with pytest.raises(FailedError, match="/usr/local/bin/hostctl, which does not exist"):
        system.decide(config, plan, _system_snap(config, plan, present=False))
    desktop, _ = examples.load("pro6000x2-desktop")
    bad = build_plan(desktop, facts)  # the desktop's recipe on the demo's host: no GPUs
    with pytest.raises(FailedError, match="the plan has errors; no unit was installed"):
        system.decide(desktop, bad, system.SystemSnapshot(desired=None, files=ManagedFiles(), sysroot="/"))


# ---------------------------------------------------------------- gpu


def _gpu_snap(config, facts, *, unit: str | None = None, link: str | None = None, torch=None, acs=None):
    files = ManagedFiles(files={gpu.UNIT_PATH: unit.encode() if unit else None,
                                INSTALLED_PROFILE: Path(config.source).read_bytes()},
                         links={gpu.WANTS_LINK: link})
    return gpu.GpuSnapshot(facts=facts, files=files, source_profile=Path(config.source).read_bytes(), torch=torch,
                           acs=acs)


def by_id(d):
    return {i.id: i for i in d.items}


@pytest.mark.parametrize("name", EXAMPLES)
def test_gpu_decision_on_each_example(name):
    config, facts = examples.load(name)
    d = gpu.decide(config, _gpu_snap(config, facts), hostctl_bin="/usr/local/bin/hostctl")
    items = by_id(d)
    if not facts.gpus.available:  # the demo: no driver, no limits
        assert isinstance(items["gpu"], Skipped) and items["gpu"].reason.startswith("no driver")
        assert isinstance(items["gpu/power-unit"], Skipped) and d.actions == []
        return
    if gpu.configured(config):  # the desktop: limits already at 300 W, the unit not installed yet
        assert isinstance(items["gpu/power-unit"], Action) and items["gpu/power-unit"].diff.startswith("--- /dev/null")
        assert items["gpu/power-unit/enable"].argv == ("ln", "-sf", gpu.UNIT_PATH, gpu.WANTS_LINK)
        assert isinstance(items["gpu/power/0"], Settled) and "300 W already set" in items["gpu/power/0"].what
        assert isinstance(items["gpu/p2p/functional"], Settled)  # the stored verdict applies
        assert items["gpu/p2p/verdict"].data["verdict"] == "ok"
        assert {n.id for n in d.warnings} >= {"gpu/p2p/topology", "gpu/p2p/driver", "gpu/p2p/iommu"}
    else:  # one GPU: P2P does not apply; the verdict saying so is stored once
        assert isinstance(items["gpu/p2p/verdict"], Action) and "not applicable" in items["gpu/p2p/verdict"].describe
        assert isinstance(items["gpu/power"], Skipped)


def test_gpu_installed_unit_and_link_decide_nothing():
    config, facts = examples.load("pro6000x2-desktop")
    plan = build_plan(config, facts)
    text = gpu.render_power_unit(plan, hostctl_bin="/usr/local/bin/hostctl", config_path=INSTALLED_PROFILE)
    d = gpu.decide(config, _gpu_snap(config, facts, unit=text, link=gpu.UNIT_PATH), hostctl_bin="/usr/local/bin/hostctl")
    assert d.actions == [] and d.failures == []


def test_gpu_limits_to_set_are_actions_through_nvml():
    config, facts = examples.load("pro6000x2-desktop")
    gpu_cfg = config.profile.gpu.model_copy(update={"power_limit_w": 250})
    config = config.model_copy(update={"profile": config.profile.model_copy(update={"gpu": gpu_cfg})})
    d = gpu.decide(config, _gpu_snap(config, facts), hostctl_bin="/usr/local/bin/hostctl")
    sets = [a for a in d.actions if a.id.startswith("gpu/power/")]
    assert [a.id for a in sets] == ["gpu/power/0", "gpu/power/1"]
    assert all(a.argv is None and "-pl 250" in a.describe and not a.destructive for a in sets)
    too_high = config.profile.gpu.model_copy(update={"power_limit_w": 700})
    config = config.model_copy(update={"profile": config.profile.model_copy(update={"gpu": too_high})})
    with pytest.raises(InputError, match="outside the GPU's own range"):
        gpu.decide(config, _gpu_snap(config, facts))


def test_gpu_driver_refusing_p2p_skips_the_functional_check_with_the_iommu_cost():
    config, _ = snapshots.desktop()
    d = gpu.decide(config, _gpu_snap(config, snapshots.p2p_unsupported()), hostctl_bin="/x")
    items = by_id(d)
    assert isinstance(items["gpu/p2p/functional"], Skipped) and "refuses P2P" in items["gpu/p2p/functional"].reason
    assert items["gpu/p2p/driver"].data["status"] == "fail"
    fix = [n for n in d.warnings if n.id == "gpu/p2p"]
    assert fix and "at a cost" in fix[0].message


def test_gpu_without_a_verdict_measures_only_where_torch_is():
    from hostctl.gpu.harness import TorchPython

    config, facts = examples.load("pro6000x2-desktop")
    facts = facts.model_copy(deep=True)
    facts.state.p2p = None
    d = gpu.decide(config, _gpu_snap(config, facts, torch=TorchPython(python="/usr/bin/python3", why="test")), hostctl_bin="/x")
    action = by_id(d)["gpu/p2p/functional"]
    assert isinstance(action, Action) and "NCCL_P2P_LEVEL=PHB" in action.describe and "none is stored" in action.why
    d = gpu.decide(config, _gpu_snap(config, facts, torch=TorchPython(python=None, why="no torch")), hostctl_bin="/x")
    assert [s.reason for s in d.skipped if s.id == "gpu/p2p/functional"] == [
        "cannot run the functional check: no torch"] and not any(a.id == action.id for a in d.actions)


@pytest.mark.parametrize("snapshot", ["two_sockets_split", "numa_unknown_two_nodes", "gpu_on_node1"])
def test_gpu_decision_on_the_awkward_hosts(snapshot):
    config, _ = examples.load("pro6000x1-mapped")
    facts = getattr(snapshots, snapshot)()
    d = gpu.decide(config, _gpu_snap(config, facts), hostctl_bin="/x")
    # no limits in that profile: no unit; the one serving GPU: the verdict is "not applicable"
    assert isinstance(by_id(d)["gpu/power-unit"], Skipped)
    assert [a.id for a in d.actions] == ["gpu/p2p/verdict"]


def test_gpu_without_driver_installs_only_the_unit():
    config, facts = examples.load("pro6000x2-desktop")
    facts = facts.model_copy(update={"gpus": GpuFacts(available=False, reason="NVIDIA driver not loaded")})
    d = gpu.decide(config, _gpu_snap(config, facts), hostctl_bin="/x")
    assert [a.id for a in d.actions] == ["gpu/power-unit", "gpu/power-unit/enable"]
    assert "the boot unit applies the limits once the driver loads" in by_id(d)["gpu"].reason


# ---------------------------------------------------------------- a dry run of every part


def test_a_dry_run_judges_the_system_part_with_the_swap_storage_would_add(monkeypatch):
    """A fresh desktop in its converting phase: 53 GiB of RAM+swap, the first conversion needs
    220 GiB. The real run adds 2x 129 GiB of swap before the system part looks at the plan; the dry
    run counts that swap as added instead of failing with "the plan has errors"."""
    config, _ = snapshots.desktop()
    converting = config.model_copy(update={"profile": config.profile.model_copy(update={"phase": "converting"})})
    blank = snapshots.blank_drives()
    assert any("first conversion needs" in p.message for p in build_plan(converting, blank).errors)
    root = paths.sysroot()
    (root / "usr/local/bin").mkdir(parents=True, exist_ok=True)
    (root / "usr/local/bin/hostctl").write_text("#!/bin/sh\n")
    monkeypatch.setattr("hostctl.provision.storage_part.storage_facts", lambda c: blank)
    out = io.StringIO()
    report = parts.provision(converting, dry_run=True, facts=lambda c: blank, out=out, err=io.StringIO(),
                             gpu_options={"p2p_options": {"lspci": (None, "not read in this test")}})
    assert report.error is None, report.error and report.error.render()
    text = out.getvalue()
    assert "system: judged as after the storage part, with the 258 GiB of swap it would add" in text
    assert "would: create /etc/hostctl/hostctl.toml" in text
    # storage runs first (the system part judges the swap it adds), gpu last
    assert [(p.part, p.status) for p in report.parts] == [
        ("storage", "would-change"), ("system", "would-change"), ("gpu", "would-change")]
    # the gpu part sees the profile the system part would install: no warning that it is missing
    assert not [w for w in report.document()["warnings"] if "does not exist" in w["message"]]
    assert not list(root.rglob("*.toml")) and not (root / "var").exists()  # a dry run changes nothing


def test_the_units_name_the_profile_where_the_system_part_installs_it():
    assert PurePosixPath(INSTALLED_PROFILE).parent == system.PROFILE_DIR


AWKWARD = ["p2p_unsupported", "too_little_ram_swap", "two_sockets_split", "numa_unknown_two_nodes", "gpu_on_node1",
           "blank_drives", "foreign_and_removable"]


@pytest.mark.parametrize("snapshot", AWKWARD)
def test_every_part_decides_on_every_awkward_host(snapshot):
    """The desktop's profile on each awkward snapshot: every decision is a value whose actions
    name their part, what they change and why; the foreign drive and the USB stick, which the
    profile does not name, are never touched."""
    config, _ = snapshots.desktop()
    facts = getattr(snapshots, snapshot)()
    d = storage.decide(config, facts, SystemFiles(), opts())
    for a in d.actions:
        assert a.part == "storage" and a.why and a.changes and "/dev/nvme3n1" not in a.describe
        assert "/dev/sda" not in (a.argv or ())
    plan = build_plan(config, facts)
    try:
        s = system.decide(config, plan, _system_snap(config, plan))
    except FailedError as exc:  # a host this recipe cannot serve: nothing is installed, and it says why
        assert exc.message == "the plan has errors; no unit was installed" and plan.errors
    else:
        assert all(a.part == "system" and a.why for a in s.actions)
    g = gpu.decide(config, _gpu_snap(config, facts), hostctl_bin="/x")
    assert all(a.part == "gpu" and a.why and a.changes for a in g.actions)


def test_power_unit_warns_when_the_hostctl_it_calls_is_missing():
    """One path for the hostctl in units (paths.hostctl_for_units): the power unit calls it too, and
    says so when nothing is installed there, as the system part refuses to."""
    from hostctl.paths import INSTALLED_HOSTCTL, hostctl_for_units
    from hostctl.act.actions import Note

    config, facts = examples.load("pro6000x2-desktop")
    assert hostctl_for_units() == INSTALLED_HOSTCTL and hostctl_for_units("/opt/h") == "/opt/h"
    snap = _gpu_snap(config, facts)

    def unit_notes(present: bool) -> list[str]:
        snap.files.present = {INSTALLED_HOSTCTL: present}
        d = gpu.decide(config, snap, hostctl_bin=hostctl_for_units())
        return [i.message for i in d.items if isinstance(i, Note) and i.id == "gpu/power-unit"]

    missing = unit_notes(False)
    assert any(f"calls {INSTALLED_HOSTCTL}, which does not exist" in m for m in missing), missing
    assert not any("which does not exist, so it would fail" in m for m in unit_notes(True))
