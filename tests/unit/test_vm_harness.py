"""The whole-host harness's own rules, checked without booting anything: the guest gets no
network device and never writes the cached image, the accelerator is TCG unless KVM was
proven, the NUMA shape is what the tests assume, the cache keys follow content (not zip
timestamps), and the in-guest test unit cannot run outside a test boot."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from vm import image, qemu
from vm.image import GuestImage

GUEST = GuestImage(root=Path("/c/root.img"), kernel=Path("/c/vmlinuz"), initrd=Path("/c/initrd.img"), key="k",
                   base_key="b", built=[], seconds=0.0)


def argv(shape: qemu.Shape, **kw) -> list[str]:
    opts = dict(mode="storage", accel="tcg", console=Path("/r/console.log"), results=Path("/r/results.img"), reboot=True)
    opts.update(kw)
    return qemu._argv(GUEST, shape, **opts)


def test_guest_has_no_network_device_and_a_read_only_root():
    a = argv(qemu.Shape(nvme=[qemu.Nvme("S1", Path("/r/a.img")), qemu.Nvme("S2", Path("/r/b.img"))]))
    joined = " ".join(a)
    assert "-nodefaults" in a and a[a.index("-nic") + 1] == "none"
    assert not any(x in joined for x in ("-netdev", "virtio-net", "e1000", "user,", "hostfwd"))
    root = a[a.index("-drive") + 1]
    assert root.startswith("file=/c/root.img,") and "snapshot=on" in root
    assert "hostctl.vmtest=storage" in a[a.index("-append") + 1]
    assert "nvme,serial=S1,drive=nvme0,bus=pci.0" in a and "nvme,serial=S2,drive=nvme1,bus=pci.0" in a
    assert "-no-reboot" not in a  # the storage guest reboots once, inside the same QEMU process


def test_accelerator_flags():
    assert argv(qemu.Shape())[argv(qemu.Shape()).index("-accel") + 1] == "tcg"
    two = argv(qemu.Shape(cpus=2))
    assert two[two.index("-accel") + 1] == "tcg,thread=multi"
    kvm = argv(qemu.Shape(), accel="kvm")
    assert kvm[kvm.index("-accel") + 1] == "kvm"


def test_numa_shape_gives_each_node_one_cpu_and_half_the_memory():
    a = argv(qemu.Shape(memory_mib=2048, cpus=2, numa_nodes=2), reboot=False)
    assert "-no-reboot" in a
    assert "memory-backend-ram,id=m0,size=1024M" in a and "memory-backend-ram,id=m1,size=1024M" in a
    assert "node,nodeid=0,cpus=0,memdev=m0" in a and "node,nodeid=1,cpus=1,memdev=m1" in a


@pytest.mark.parametrize("env,want", [("tcg", "tcg"), ("kvm", "kvm")])
def test_accelerator_override_skips_the_probe(env, want, monkeypatch):
    monkeypatch.setenv(qemu.ACCEL_ENV, env)
    monkeypatch.setattr(qemu, "probe_kvm", lambda *a: pytest.fail("probe must not run"))
    assert qemu.choose_accel(GUEST) == want


def test_kvm_probe_verdict_is_reused_for_the_same_machine(tmp_path, monkeypatch):
    monkeypatch.delenv(qemu.ACCEL_ENV, raising=False)
    monkeypatch.setenv(image.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(qemu.shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr(qemu, "_probe_key", lambda: "this-machine")
    calls = []
    monkeypatch.setattr(qemu, "probe_kvm", lambda img, d: calls.append(d) or (False, "hung after Probing EDD"))
    assert qemu.choose_accel(GUEST, run_dir=tmp_path) == "tcg"
    assert qemu.choose_accel(GUEST, run_dir=tmp_path) == "tcg"
    assert len(calls) == 1
    assert json.loads((tmp_path / "kvm-probe.json").read_text())["why"] == "hung after Probing EDD"
    monkeypatch.setattr(qemu, "_probe_key", lambda: "another-machine")
    qemu.choose_accel(GUEST, run_dir=tmp_path)
    assert len(calls) == 2


def _wheel(path: Path, files: dict[str, bytes], date=(2020, 1, 1, 0, 0, 0)) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(zipfile.ZipInfo(name, date_time=date), data)
    return path


def test_cache_key_follows_wheel_contents_not_timestamps(tmp_path):
    a = _wheel(tmp_path / "a.whl", {"hostctl/x.py": b"1", "t.j2": b"x"})
    b = _wheel(tmp_path / "b.whl", {"hostctl/x.py": b"1", "t.j2": b"x"}, date=(2024, 5, 5, 5, 5, 5))
    c = _wheel(tmp_path / "c.whl", {"hostctl/x.py": b"2", "t.j2": b"x"})
    assert a.read_bytes() != b.read_bytes()
    assert image.wheel_digest(a) == image.wheel_digest(b) != image.wheel_digest(c)
    assert image.image_key("base", a) == image.image_key("base", b) != image.image_key("base", c)
    assert image.image_key("base", a) != image.image_key("other-base", a)


def test_base_key_covers_the_package_list_and_requirements(monkeypatch):
    key = image.base_key()
    monkeypatch.setattr(image, "PACKAGES", image.PACKAGES + ("xfsprogs",))
    assert image.base_key() != key
    monkeypatch.undo()
    monkeypatch.setattr(image, "requirements", lambda: ["pydantic==0"])
    assert image.base_key() != key


def test_guest_requirements_are_the_projects_pins():
    reqs = image.requirements()
    assert any(r.startswith("pydantic==") for r in reqs) and "pytest-testinfra==10.2.2" in reqs


def test_in_guest_unit_runs_only_on_a_test_boot():
    unit = (image.GUEST_DIR / "hostctl-vmtest.service").read_text()
    assert "ConditionKernelCommandLine=hostctl.vmtest" in unit
    assert "WantedBy=multi-user.target" in unit
