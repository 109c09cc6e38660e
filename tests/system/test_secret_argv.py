"""The runtime's API key never travels in a process's argv (what `ps` shows every local user):
`bench`'s `vllm bench serve` container gets it as `-e OPENAI_API_KEY` with the value in the
docker CLI's own environment. Proven with the real engine: a plain `docker run --rm --network
none` built from the same argument list and environment sees the key, while the argv holds none.
"""

from __future__ import annotations

import subprocess

import pytest

import snapshots
from hostctl.bench import vllm_bench
from hostctl.plan import build_plan
from runtime_fixtures import engine_answers
from need import need

pytestmark = [pytest.mark.system]

KEY = "Q7planted-benchkey-5e1d"


def test_the_bench_container_gets_the_key_without_it_in_argv(monkeypatch, tmp_path):
    need(engine_answers(), "the Docker engine does not answer (.ci/run starts it)")
    monkeypatch.setenv("HC_BENCH_KEY", KEY)
    config, facts = snapshots.desktop()
    plan = build_plan(config, facts)
    plan = plan.model_copy(update={"runtime": plan.runtime.model_copy(update={"api_key_env": "HC_BENCH_KEY"})})
    argv = vllm_bench.docker_argv(plan, "hc-bench-argv-test", tmp_path, [["--help"]])
    assert KEY not in " ".join(argv)
    # The same -e options, on a container that prints what it was given (the base image: python3).
    env_opts = [a for i, a in enumerate(argv) if argv[i - 1] == "-e" or a == "-e"]
    from hostctl import images

    res = subprocess.run(["docker", "run", "--rm", "--network", "none", *env_opts, "--entrypoint", "python3",
                          images.base_tag(), "-c", "import os; print(os.environ.get('OPENAI_API_KEY'))"],
                         env=vllm_bench.docker_env(plan), capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == KEY
