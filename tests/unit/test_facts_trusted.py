"""The probes make HostFacts (pydantic, hostctl/data.py) and fill some fields in after making
them, which pydantic does not check. So nothing they make may differ from what a snapshot read back
validates to: the JSON document read back with strict=True equals the probes' facts and writes the
same bytes (an int where a float is declared, a list where a tuple is, would show). Checked on this
host's live facts and on the fake-NVML reference GPU hosts; snapshots and state files are validated."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

from fake_nvml import REFERENCE_HOSTS, FakeNvml, write_sysfs
from hostctl import examples, paths
from hostctl.facts import collect, load_snapshot
from hostctl.facts.gpu import probe_gpus
from hostctl.facts.records import HostFacts, MemoryFacts, StateFacts
from hostctl.facts.state import probe_state


def assert_as_validated(record: BaseModel, where: str) -> None:
    text = record.model_dump_json(indent=2)
    again = type(record).model_validate_json(text, strict=True)
    assert again == record, where
    assert again.model_dump_json(indent=2) == text, where


@pytest.fixture
def busy_host(tmp_path, monkeypatch):
    """This machine with what the probes can find: a listening port, a free one, directories (one
    listed), a /dev/shm segment, and every state file an earlier run leaves."""
    state = tmp_path / "var" / "lib" / "hostctl"
    state.mkdir(parents=True)
    (state / "p2p.json").write_text(json.dumps({"verdict": "ok", "measured_at": "2026-01-01T00:00:00Z", "busbw_gbps": 21}))
    (state / "service.json").write_text(json.dumps({"state": "ready", "container": "vllm-demo", "ready_at": "2026-01-02T00:00:00Z"}))
    monkeypatch.setenv("HOSTCTL_SYSROOT", str(tmp_path))
    store = tmp_path / "models"
    store.mkdir()
    (store / "model-00001-of-00002.safetensors").write_bytes(b"\0" * 4096)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    free_port = free.getsockname()[1]
    free.close()
    shm = Path("/dev/shm") / f"vllm-hostctl-test-{os.getpid()}"  # a name the shm probe lists
    shm.write_bytes(b"x" * 8192)
    try:
        yield {"path_requests": [(str(store), True), (str(tmp_path), False), (str(tmp_path / "absent"), False)],
               "port_requests": [("127.0.0.1", listener.getsockname()[1]), ("127.0.0.1", free_port)],
               "image_requests": ["hostctl/no-such-image:0"]}
    finally:
        listener.close()
        shm.unlink()


def test_live_facts_are_what_validation_would_make(busy_host):
    facts = collect(**busy_host)
    assert facts.state.p2p is not None and facts.state.service is not None  # the state files were read
    assert facts.path(busy_host["path_requests"][0][0]).files  # the listed directory
    assert any(p.listening for p in facts.ports) and not all(p.listening for p in facts.ports)
    assert facts.shm.segments
    assert not [n for n in facts.notes if "probe failed" in n], facts.notes
    assert_as_validated(facts, "facts")


@pytest.mark.parametrize("name", sorted(REFERENCE_HOSTS))
def test_gpu_facts_are_what_validation_would_make(name, tmp_path):
    host = REFERENCE_HOSTS[name]()
    gpus = probe_gpus(FakeNvml(host), pci_root=write_sysfs(host, tmp_path / "pci"), version_file=tmp_path / "absent")
    assert gpus.available and len(gpus.devices) >= 2 and gpus.pairs
    assert isinstance(gpus.devices[0].power.limit_w, float)
    assert_as_validated(gpus, name)


def test_state_files_are_still_validated(tmp_path):
    (tmp_path / "p2p.json").write_text(json.dumps({"verdict": "maybe", "measured_at": "x"}))
    (tmp_path / "service.json").write_text(json.dumps({"state": "ready", "container": ["not", "a", "name"]}))
    state, notes = probe_state(tmp_path)
    assert state.p2p is None and state.service is None
    assert len(notes) == 2 and all(n.startswith("ignored ") for n in notes)


def test_a_snapshot_is_validated(tmp_path):
    bad = tmp_path / "snap.json"
    doc = json.loads(collect().model_dump_json())
    doc["memory"]["mem_total_bytes"] = "lots"
    bad.write_text(json.dumps(doc))
    with pytest.raises(Exception, match="memory.mem_total_bytes"):
        load_snapshot(bad)


def test_memory_facts_are_never_negative():
    good = {"mem_total_bytes": 1, "mem_available_bytes": 0, "swap_total_bytes": 0, "swap_free_bytes": 0}
    assert MemoryFacts.model_validate(good, strict=True).mem_total_bytes == 1
    with pytest.raises(ValidationError) as exc:
        MemoryFacts.model_validate({**good, "swap_free_bytes": -4096}, strict=True)
    [err] = exc.value.errors()
    assert (err["loc"], err["type"]) == (("swap_free_bytes",), "greater_than_equal")


def test_state_facts_leave_out_what_old_snapshots_lack():
    assert set(StateFacts().model_dump()) == {"p2p", "qualify"}
    assert StateFacts.model_validate_json('{"p2p": null, "qualify": null}', strict=True) == StateFacts()


def test_there_are_bundled_snapshots():
    assert len(examples.names()) >= 3


@pytest.mark.parametrize("name", examples.names())
def test_bundled_facts_snapshot_round_trips(name):
    text = (paths.hosts_dir() / f"{name}.facts.json").read_text()
    facts = HostFacts.model_validate_json(text, strict=True)
    assert facts.model_dump_json(indent=2) + "\n" == text  # the file is what `facts --json` writes, byte for byte
    assert HostFacts.model_validate_json(facts.model_dump_json(), strict=True) == facts
    assert HostFacts.model_validate(facts.model_dump()) == facts
