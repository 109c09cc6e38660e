"""Files hostctl reads from a model folder are refused by their size before they are read: a
sparse checkpoint index (no disk used) made whoever can write the folder set root's memory and
time (3 GB: 2 minutes, 6 GB of memory). Planted as another user (nobody), read as root."""

from __future__ import annotations

import json
import os

import pytest

from hostctl.facts.checkpoint_identity import runtime_ckpt_id
from hostctl.plan.runtime import MODEL_IN_CONTAINER as MODEL
from hostctl.cluster.doctor import LocalMemberReader
from hostctl.facts.manifest import SMALL_FILE_MAX

NOBODY = 65534


def _sparse(path, size):
    with open(path, "wb") as f:
        f.truncate(size)
    os.chown(path, NOBODY, NOBODY)


@pytest.fixture
def model_dir(tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "x"}))
    (d / "model-00001-of-00001.safetensors").write_bytes(b"\0" * 16)
    for p in d.iterdir():
        os.chown(p, NOBODY, NOBODY)
    os.chown(d, NOBODY, NOBODY)
    return d


def test_ckpt_id_refuses_a_sparse_index_unread(model_dir):
    index = model_dir / "model.safetensors.index.json"
    _sparse(index, 4 * SMALL_FILE_MAX)
    ckpt, why = runtime_ckpt_id(str(model_dir), MODEL)
    assert ckpt is None
    assert str(index) in why and str(SMALL_FILE_MAX) in why


def test_ckpt_id_refuses_a_sparse_config_unread(model_dir):
    _sparse(model_dir / "config.json", 4 * SMALL_FILE_MAX)
    ckpt, why = runtime_ckpt_id(str(model_dir), MODEL)
    assert ckpt is None and "config.json" in why and "larger than" in why


def test_ckpt_id_of_a_normal_folder_still_computed(model_dir):
    (model_dir / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a": "model-00001-of-00001.safetensors"}}))
    ckpt, _ = runtime_ckpt_id(str(model_dir), MODEL)
    assert ckpt and len(ckpt) == 64


def test_cluster_doctor_reader_does_not_read_a_sparse_manifest(model_dir):
    manifest = model_dir / "hostctl-manifest.json"
    _sparse(manifest, 4 * SMALL_FILE_MAX)
    assert LocalMemberReader().read_bytes(str(manifest)) is None
    assert LocalMemberReader().read_bytes(str(model_dir / "config.json")) == b'{"model_type": "x"}'


def test_probe_names_a_sparse_index_and_what_to_do_unread(model_dir):
    from hostctl.facts.checkpoint import probe_checkpoint

    index = model_dir / "model.safetensors.index.json"
    _sparse(index, 4 * SMALL_FILE_MAX)
    facts = probe_checkpoint(str(model_dir))
    assert facts.index_present and str(index) in facts.index_error and "not read" in facts.index_error
    assert "replace the file" in facts.index_error and facts.shards is None
