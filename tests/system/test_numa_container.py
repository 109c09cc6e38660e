"""NUMA placement proven inside a running container: the Compose project hostctl renders for a
host whose GPU sits on node 0 (cpuset, cap_add SYS_NICE, HOSTCTL_NUMA_NODE in runtime.env, the
entrypoint), started under Compose v2 with a test image (debootstrap minbase + numactl) and
the repository's runtime/entrypoint/hostctl-entrypoint bound in. The process the entrypoint
execs must run on exactly the planned CPUs with its memory policy bound to the planned node.

This machine has one NUMA node (node 0) and two CPUs: the snapshot gives node 0 only CPU 1,
so a cpuset of one CPU shows the plan's choice took effect. The image is cached by the hash of
what goes into it, so CI builds it once.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, needs_compose, needs_root
from hostctl import examples
from hostctl.facts.records import NumaNode
from hostctl.plan import build_plan
from hostctl.service.render import render_files, write_files
from need import need

pytestmark = [pytest.mark.system, needs_root, needs_compose]

ENTRYPOINT = ROOT / "runtime" / "entrypoint" / "hostctl-entrypoint"
IMAGE_RECIPE = {"suite": "bookworm", "variant": "minbase", "include": ["numactl"], "recipe": 1}
PROBE = ('grep -E "^(Cpus|Mems)_allowed_list" /proc/self/status; numactl --show; '
         'grep -c "bind:0" /proc/self/numa_maps | sed "s/^/bind0_mappings: /"')


def image_tag() -> str:
    digest = hashlib.sha256(json.dumps(IMAGE_RECIPE, sort_keys=True).encode()).hexdigest()[:16]
    return f"hc4-numa-test:{digest}"


def _run(argv: list[str], timeout: float = 600, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)


@pytest.fixture(scope="session")
def numa_image() -> str:
    tag = image_tag()
    if _run(["docker", "image", "inspect", tag]).returncode == 0:
        return tag
    need(shutil.which("debootstrap") is not None, "debootstrap is not installed (.ci/run installs it)")
    work = Path(tempfile.mkdtemp(prefix="hc4-numa-image-"))
    try:
        root = work / "root"
        res = _run(["debootstrap", f"--variant={IMAGE_RECIPE['variant']}", f"--include={','.join(IMAGE_RECIPE['include'])}",
                    IMAGE_RECIPE["suite"], str(root)], timeout=900)
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
        tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
        imp = _run(["docker", "import", "-", tag], stdin=tar.stdout)
        tar.stdout.close()
        assert tar.wait() == 0 and imp.returncode == 0, imp.stderr
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return tag


def plan_on_node0_cpu1():
    """The mapped host's plan with node 0 = CPU 1 (this machine's second CPU): bound to node 0."""
    config, facts = examples.load("pro6000x1-mapped")
    facts = facts.model_copy(deep=True)
    facts.numa.nodes = [NumaNode(id=0, cpus=[1]), NumaNode(id=1, cpus=[0])]
    facts.gpus.devices[0].local_cpus = [1]
    plan = build_plan(config, facts)
    assert plan.placement.numa_node == 0 and plan.placement.cpuset == "1"
    assert plan.runtime.env["HOSTCTL_NUMA_NODE"] == "0" and "SYS_NICE" in plan.runtime.cap_add
    return plan


def compose_up(project_dir: Path, image: str, extra: dict | None = None) -> tuple[int, str]:
    """Start the rendered project with test overrides; return (exit code, output)."""
    override = {
        "services": {
            "runtime": {
                "image": image,
                "container_name": f"hc4-numa-{project_dir.name}",
                "command": ["sh", "-c", PROBE],
                # what this machine cannot give: a GPU, unlimited memlock, the host's model files
                "gpus": [],
                "ulimits": {},
                "volumes": [{"type": "bind", "source": str(ENTRYPOINT), "target": "/usr/local/bin/hostctl-entrypoint",
                             "read_only": True}],
                "healthcheck": {"disable": True},
                **(extra or {}),
            }
        }
    }
    text = yaml.safe_dump(override)
    # Compose merges lists; these must replace the rendered ones.
    for key in ("gpus", "ulimits", "volumes"):
        text = text.replace(f"    {key}:", f"    {key}: !override", 1)
    if extra and "cap_add" in extra:
        text = text.replace("    cap_add:", "    cap_add: !override", 1)
    (project_dir / "test-override.yaml").write_text(text)
    project = f"hc4-numa-{project_dir.name}"
    base = ["docker", "compose", "-p", project, "--project-directory", str(project_dir),
            "-f", str(project_dir / "compose.yaml"), "-f", str(project_dir / "test-override.yaml")]
    try:
        res = _run(base + ["up", "--no-log-prefix", "--exit-code-from", "runtime"], timeout=180)
        return res.returncode, res.stdout + res.stderr
    finally:
        _run(base + ["down", "--remove-orphans"], timeout=120)


@pytest.fixture
def project(tmp_path) -> Path:
    d = tmp_path / uuid.uuid4().hex[:8]
    write_files(render_files(plan_on_node0_cpu1()), d)
    return d


def test_rendered_placement_takes_effect_inside_the_container(project, numa_image):
    plan = plan_on_node0_cpu1()
    code, out = compose_up(project, numa_image)
    assert code == 0, out
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    assert fields["Cpus_allowed_list"] == plan.placement.cpuset  # compose's cpuset
    assert fields["Mems_allowed_list"] == str(plan.placement.numa_node)
    assert fields["policy"] == "bind"  # numactl --membind, from HOSTCTL_NUMA_NODE via the entrypoint
    assert fields["membind"] == str(plan.placement.numa_node)
    assert fields["physcpubind"] == plan.placement.cpuset
    assert int(fields["bind0_mappings"]) > 0  # the exec'd process's own mappings carry the policy


def test_without_sys_nice_the_entrypoint_refuses_and_says_why(project, numa_image):
    code, out = compose_up(project, numa_image, {"cap_add": []})
    assert code == 78, out
    assert "needs cap_add: SYS_NICE" in out and "set_mempolicy" in out
