"""bench's result folder with the real engine (F1 of the adversarial review): while the bench
container runs, `nobody` looks for the folder bound into it and plants `c1.json` as a link to a
root-only file. Root must neither read the link nor copy its target out. The container is the
base image (no vLLM in it: the launcher fails at its import, as a bench that wrote nothing), run
from bench's own argument list with `--network host` unused; it binds no port and has its own name.
A second container, built from the same `--user` and `-v`, shows the bench can still write there.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from pathlib import Path

import pytest

import snapshots
from hostctl import images, runner
from hostctl.bench import vllm_bench
from hostctl.errors import FailedError
from hostctl.plan import build_plan
from runtime_fixtures import engine_answers
from need import need

pytestmark = [pytest.mark.system]
NOBODY = 65534
SECRET = "c2VjcmV0OnB3-planted-auth"


def _plan():
    config, facts = snapshots.desktop()
    plan = build_plan(config, facts)
    return plan.model_copy(update={"runtime": plan.runtime.model_copy(update={"image": images.base_tag(), "volumes": [],
                                                                  "api_key_env": None})})


@pytest.fixture
def tmpdir_here(monkeypatch):
    """bench's temporary folders go into a fresh 1777 folder of this test's (as /tmp is)."""
    base = Path(tempfile.mkdtemp(prefix="hc-bench-tmp-", dir="/tmp"))
    os.chmod(base, 0o1777)
    monkeypatch.setattr(tempfile, "tempdir", str(base))
    yield base
    runner.run(["rm", "-rf", "--one-file-system", str(base)], timeout=60)


def test_nobody_cannot_plant_a_result_while_the_bench_container_runs(tmpdir_here, tmp_path):
    need(engine_answers(), "the Docker engine does not answer (.ci/run starts it)")
    need(os.geteuid() == 0, "needs root: the attacker is a child that drops to nobody")
    secret = tmp_path / "root-only.json"
    secret.write_text(json.dumps({"auths": {"r": {"auth": SECRET}}, "output_throughput": 12345}))
    os.chmod(secret, 0o600)
    seen: list[str] = []

    def attacker():
        for _ in range(3000):
            for d in tmpdir_here.glob("hostctl-bench-*"):
                pid = os.fork()
                if pid == 0:
                    os.setgroups([])
                    os.setgid(NOBODY)
                    os.setuid(NOBODY)
                    try:
                        os.symlink(secret, d / "c1.json")
                        os._exit(0)
                    except OSError:
                        os._exit(1)
                seen.append(f"planted={os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0}")
                return
            time.sleep(0.01)

    t = threading.Thread(target=attacker)
    t.start()
    keep = tmp_path / "raw"
    bench = vllm_bench.BenchServe(_plan(), "http://127.0.0.1:9", "m", keep_dir=keep, seed=1)
    try:
        out = bench(levels=[1], input_tokens=1, output_tokens=1, runs=1)
    except FailedError as e:  # the container wrote nothing: the bench fails, as it should
        out = {"error": str(e), "details": e.details}
    t.join()
    assert seen == ["planted=False"], seen  # it found the folder, and could not write into it
    assert SECRET not in json.dumps(out) and "12345" not in json.dumps(out)
    assert not keep.exists() or all(SECRET not in p.read_text() for p in keep.rglob("*") if p.is_file())


def test_the_bench_container_writes_its_result_as_hostctls_uid(tmpdir_here):
    need(engine_answers(), "the Docker engine does not answer (.ci/run starts it)")
    work = vllm_bench.make_result_dir()
    argv = vllm_bench.docker_argv(_plan(), "unused", work, [])
    opts = [a for i, a in enumerate(argv) if a in ("--user", "-v") or argv[i - 1] in ("--user", "-v")]
    script = f"import json; json.dump({{'output_throughput': 7.5}}, open('{vllm_bench.RESULT_MOUNT}/c1.json', 'w'))"
    res = runner.run(["docker", "run", "--rm", "--network", "none", *opts, "--entrypoint", "python3",
                      images.base_tag(), "-c", script], timeout=120)
    assert res.ok, res.stderr
    bench = vllm_bench.BenchServe.__new__(vllm_bench.BenchServe)
    raw, doc = bench.read_level(work, 1)
    assert doc == {"output_throughput": 7.5}
