"""The probes make HostFacts records directly (no validation: what a probe read is trusted;
hostctl/record.py). So nothing may differ from what validation would have made: every nested value
is a record, not a dict; every field has the type validation gives it (a float where a float is declared, ...); and
the JSON document is byte-identical to the one validation yields. Checked on this host's live
facts and on the fake-NVML reference GPU hosts; snapshots (untrusted input) are still validated."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from fake_nvml import REFERENCE_HOSTS, FakeNvml, write_sysfs
from hostctl.facts import collect, load_snapshot
from hostctl.facts.gpu import probe_gpus
from hostctl.facts.model import HostFacts
from hostctl.facts.state import probe_state
from hostctl.record import Record


def assert_same(trusted: object, validated: object, where: str) -> None:
    assert type(trusted) is type(validated), f"{where}: {type(trusted).__name__} where validation gives {type(validated).__name__}"
    if isinstance(trusted, Record):
        assert vars(trusted).keys() == vars(validated).keys(), where
        for name in type(trusted)._fields:
            assert_same(getattr(trusted, name), getattr(validated, name), f"{where}.{name}")
    elif isinstance(trusted, (list, tuple)):
        assert len(trusted) == len(validated), where
        for i, (a, b) in enumerate(zip(trusted, validated)):
            assert_same(a, b, f"{where}[{i}]")
    elif isinstance(trusted, dict):
        assert list(trusted) == list(validated), where
        for key in trusted:
            assert_same(trusted[key], validated[key], f"{where}[{key!r}]")
    else:
        assert trusted == validated, where


def assert_as_validated(model: Record, where: str) -> None:
    cls = type(model)
    # Python-level: validating the trusted record's own values gives the same types and values
    validated = cls.validate(model.to_dict())
    assert_same(model, validated, where)
    # and through JSON, as a snapshot is read back: the same document, byte for byte
    text = model.to_json()
    again = cls.from_json(text)
    assert again.to_json() == text
    assert validated.to_json() == text


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
    doc = json.loads(collect().to_json())
    doc["memory"]["mem_total_bytes"] = "lots"
    bad.write_text(json.dumps(doc))
    with pytest.raises(Exception, match="memory.mem_total_bytes"):
        load_snapshot(bad)
