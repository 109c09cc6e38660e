"""bench's `vllm bench serve` results: the folder the container writes into is hostctl's alone,
and what root reads back from it and copies out is the container's result, never a link
another local user planted (F1 of the adversarial review).

The attacker is `nobody` (uid 65534), working in a forked child that drops to it; the victim is
a root-only JSON file whose content must not come out. Needs root (setuid, chown).
"""

from __future__ import annotations

import json
import os

import pytest

from hostctl import safefs
from hostctl.bench import vllm_bench
from tests.attacker import NOBODY, run_as
from tests.need import needs

SECRET = "c2VjcmV0OnB3-planted-auth"
pytestmark = needs(os.geteuid() == 0, "needs root: the attacker is a child that drops to nobody")


@pytest.fixture
def secret(tmp_path):
    f = tmp_path / "root-only.json"
    f.write_text(json.dumps({"auths": {"r": {"auth": SECRET}}, "output_throughput": 12345}))
    os.chmod(f, 0o600)
    return f


def test_another_user_cannot_put_a_result_in_the_folder_bound_into_the_bench_container():
    work = vllm_bench.make_result_dir()
    try:
        st = os.stat(work)
        assert st.st_uid == os.geteuid() and not safefs.others_can_write(st, str(work))
        # By effect: nobody tries to plant c1.json (a file and a link) and fails.
        assert run_as(NOBODY, NOBODY, lambda: os.symlink("/etc/shadow", work / "c1.json")) == 1
        assert run_as(NOBODY, NOBODY, lambda: open(work / "c2.json", "w").close()) == 1
        assert sorted(os.listdir(work)) == []
    finally:
        for p in work.iterdir():
            p.unlink()
        work.rmdir()


@pytest.mark.parametrize("planted", ["link", "fifo", "foreign"])
def test_a_planted_result_is_refused_and_nothing_is_copied_out(tmp_path, secret, planted):
    work = tmp_path / "work"
    work.mkdir(mode=0o700)
    target = work / "c1.json"
    if planted == "link":
        os.symlink(secret, target)
        os.lchown(target, NOBODY, NOBODY)
    elif planted == "fifo":
        os.mkfifo(target)  # a plain read would block for ever
    else:
        target.write_text(json.dumps({"output_throughput": 999999}))
        os.chown(target, NOBODY, NOBODY)
    bench = vllm_bench.BenchServe.__new__(vllm_bench.BenchServe)
    with pytest.raises(safefs.UntrustedPathError) as e:
        bench.read_level(work, 1)
    assert e.value.exit_code == 3 and SECRET not in str(e.value)


def test_the_containers_own_result_is_read(tmp_path):
    work = tmp_path / "work"
    work.mkdir(mode=0o700)
    (work / "c2.json").write_text(json.dumps({"output_throughput": 42.0, "completed": 4}))
    os.chmod(work / "c2.json", 0o644)  # as vLLM writes it under the image's umask
    bench = vllm_bench.BenchServe.__new__(vllm_bench.BenchServe)
    raw, doc = bench.read_level(work, 2)
    assert doc["completed"] == 4 and raw == (work / "c2.json").read_bytes()
    assert bench.read_level(work, 3) is None
