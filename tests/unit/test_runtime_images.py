"""The bundled runtime images, checked statically: the SM120 vLLM-MoET Dockerfile cannot be
built on these machines (no CUDA base image), so its structure is checked here -- base image
as an argument, pinned revisions, every ARG in scope where it is used, COPY sources that
exist, the entrypoint and mount points the rendered compose.yaml expects. The CPU demo's
Dockerfile gets the same rules, plus its build context as hostctl.images assembles it."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from hostctl import examples, images, paths
from hostctl.plan.storage import CONTAINER_PATHS
from need import need

RUNTIME = paths.resource_root() / "runtime"
SM120 = RUNTIME / "sm120" / "Dockerfile"
CPU_DEMO = RUNTIME / "cpu-demo" / "Dockerfile"
ENTRYPOINT = RUNTIME / "entrypoint" / "hostctl-entrypoint"
PINNED_MOET = "0a927eafa2e7249099073e4c3bb1169ba4b1c328"
PINNED_DEEPGEMM = "a6b593d2826719dcf4892609af7b84ee23aaf32a"


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out, buf = [], ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        word, _, rest = buf.partition(" ")
        out.append((word.upper(), rest.strip()))
        buf = ""
    assert not buf, f"{path}: dangling line continuation"
    return out


def stages(ins: list[tuple[str, str]]) -> tuple[list[str], list[list[tuple[str, str]]]]:
    """Global ARGs (before the first FROM) and the instructions of each stage."""
    head, body = [], []
    for op, arg in ins:
        if op == "FROM":
            body.append([(op, arg)])
        elif not body:
            assert op == "ARG", f"only ARG may come before the first FROM, got {op}"
            head.append(arg.split("=")[0])
        else:
            body[-1].append((op, arg))
    return head, body


def arg_defaults(ins) -> dict[str, str]:
    return {a.split("=", 1)[0]: a.split("=", 1)[1] for op, a in ins if op == "ARG" and "=" in a}


def used_vars(text: str) -> set[str]:
    return set(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", text))


SHELL_VARS = {"SITE", "PATH", "VIRTUAL_ENV", "HOSTCTL_NUMA_NODE"}


def check_common(path: Path, context: Path) -> list[str]:
    ins = instructions(path)
    head, body = stages(ins)
    problems = []
    if "BASE_IMAGE" not in head:
        problems.append("the base image is not a build argument (ARG BASE_IMAGE before FROM)")
    names = []
    for stage in body:
        frm = stage[0][1].split()
        image = frm[0]
        if "AS" in [w.upper() for w in frm]:
            names.append(frm[-1])
        if image not in ("${BASE_IMAGE}", "$BASE_IMAGE") and image not in names:
            problems.append(f"FROM {image}: every stage must start from the BASE_IMAGE argument or an earlier stage")
        declared = {a.split("=")[0] for op, a in stage if op == "ARG"}
        env = {m for op, a in stage if op == "ENV" for m in re.findall(r"([A-Za-z_][A-Za-z0-9_]*)=", a)}
        for op, arg in stage[1:]:
            if op in ("RUN", "LABEL", "ENV", "COPY"):
                for var in used_vars(arg) - declared - env - SHELL_VARS:
                    problems.append(f"{op} uses ${var}, which is not declared (ARG) in this stage")
            if op == "ADD":
                problems.append("ADD: use COPY (and fetch sources in a RUN with a pinned revision)")
            if op == "RUN" and "apt-get install" in arg:
                if "--no-install-recommends" not in arg or "rm -rf /var/lib/apt/lists" not in arg:
                    problems.append("apt-get install without --no-install-recommends and list clean-up")
            if op == "RUN" and re.search(r"(curl|wget)[^|]*\|\s*(ba)?sh", arg):
                problems.append("RUN pipes a download into a shell")
            if op == "COPY" and "--from=" not in arg:
                for src in arg.split()[:-1]:
                    if not (context / src.rstrip("/")).exists():
                        problems.append(f"COPY {src}: not in the build context {context}")
    for op, arg in ins:
        if op == "FROM" and arg.split()[0].endswith(":latest"):
            problems.append(f"FROM {arg}: unpinned tag")
    if not any(op == "ENTRYPOINT" and "/usr/local/bin/hostctl-entrypoint" in a for op, a in ins):
        problems.append("ENTRYPOINT is not /usr/local/bin/hostctl-entrypoint")
    return problems


def test_sm120_dockerfile_is_well_formed_and_pinned():
    assert check_common(SM120, RUNTIME) == []
    ins = instructions(SM120)
    defaults = arg_defaults(ins)
    assert defaults["BASE_IMAGE"] == "vllm/vllm-openai:v0.24.0"
    assert defaults["MOET_REV"] == PINNED_MOET
    assert defaults["DEEPGEMM_REF"] == PINNED_DEEPGEMM
    assert defaults["FLASHINFER_VERSION"] == "0.6.14"
    runs = " ".join(a for op, a in ins if op == "RUN")
    # Fetched by commit and verified, never by a branch name; the patch comes from that commit.
    assert 'fetch -q --depth 1 origin "$MOET_REV"' in runs and 'rev-parse HEAD)" = "$MOET_REV"' in runs
    assert "git -C \"$SITE\" apply" in runs
    assert "patch/vllm-moet-v0.24.0.patch" in " ".join(a for op, a in ins if op == "COPY")


def test_sm120_image_has_what_the_rendered_compose_expects():
    ins = instructions(SM120)
    runs = " ".join(a for op, a in ins if op == "RUN")
    for target in CONTAINER_PATHS.values():
        assert target in runs, f"mount point {target} is not created in the image"
    svc = __import__("yaml").safe_load(examples.rendered("pro6000x2-desktop")["compose.yaml"])["services"]["runtime"]
    assert svc["entrypoint"] == ["/usr/local/bin/hostctl-entrypoint"]
    assert any(op == "COPY" and a.endswith("/usr/local/bin/hostctl-entrypoint") for op, a in ins)
    assert svc["command"][:3] == ["python3", "-m", "vllm.entrypoints.openai.api_server"]


def test_lint_catches_what_it_claims(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM nvidia/cuda:latest\nARG X=1\nRUN apt-get install -y git\nRUN echo $Y\n"
                   "ADD https://example.invalid/x /x\nCOPY missing.txt /\nRUN curl -s https://x.invalid | sh\n")
    problems = " | ".join(check_common(bad, tmp_path))
    for needle in ("ARG BASE_IMAGE", "unpinned tag", "--no-install-recommends", "$Y", "ADD", "COPY missing.txt",
                   "pipes a download", "ENTRYPOINT"):
        assert needle in problems, needle


def test_cpu_demo_dockerfile_and_its_build_context(tmp_path):
    need(list(Path("/opt/wheels").glob("torch-2.13.0+cpu-cp311-*.whl")) or images.os.environ.get("HOSTCTL_TORCH_WHEEL"),
         "no CPU torch wheel on this machine")
    images._context(tmp_path)
    assert check_common(CPU_DEMO, tmp_path) == []
    assert (tmp_path / "wheels").is_dir() and list((tmp_path / "wheels").glob("torch-*.whl"))
    smoke = __import__("json").loads((tmp_path / "smoke.json").read_text())
    assert [t["kind"] for t in smoke] == ["models", "chat", "tool_call"]


def test_demo_image_tag_follows_its_inputs(monkeypatch, tmp_path):
    need(list(Path("/opt/wheels").glob("torch-2.13.0+cpu-cp311-*.whl")), "no CPU torch wheel on this machine")
    tag = images.demo_tag()
    assert re.fullmatch(r"hostctl/vllm-cpu-demo:[0-9a-f]{16}", tag)
    assert images.demo_tag() == tag  # stable
    changed = tmp_path / "cpu-demo"
    shutil.copytree(images.cpu_demo_dir(), changed)
    (changed / "make_model.py").write_text((changed / "make_model.py").read_text() + "\n# changed\n")
    monkeypatch.setattr(images, "cpu_demo_dir", lambda: changed)
    assert images.demo_tag() != tag


def test_entrypoint_execs_its_arguments(tmp_path):
    sh = shutil.which("sh")
    assert subprocess.run([sh, "-n", str(ENTRYPOINT)]).returncode == 0
    res = subprocess.run([sh, str(ENTRYPOINT), "sh", "-c", "echo $0-$$", "argv0"], capture_output=True, text=True)
    assert res.returncode == 0 and res.stdout.startswith("argv0-")
    assert subprocess.run([sh, str(ENTRYPOINT), "sh", "-c", "exit 7"]).returncode == 7
    none = subprocess.run([sh, str(ENTRYPOINT)], capture_output=True, text=True)
    assert none.returncode == 64 and "no command" in none.stderr
    # NUMA binding: the entrypoint's one answer follows from what this machine has, probed here directly
    path = "/usr/bin:/bin"
    numa = subprocess.run([sh, str(ENTRYPOINT), "true"], env={"HOSTCTL_NUMA_NODE": "0", "PATH": path},
                          capture_output=True, text=True)
    numactl = shutil.which("numactl", path=path)
    if numactl is None:
        assert numa.returncode == 127 and "numactl is not installed in this image" in numa.stderr
    elif subprocess.run([numactl, "--cpunodebind=0", "--membind=0", "--", "true"], capture_output=True).returncode:
        assert numa.returncode == 78 and "cannot bind to NUMA node 0" in numa.stderr  # a sandbox refuses the policy
    else:
        assert numa.returncode == 0 and numa.stderr == ""


def test_the_gpu_image_has_one_name_in_the_recipes_and_its_build_command():
    """The bundled GPU recipes and `init --box` name the image that runtime/sm120's build command
    tags (they once differed by a character: a user who built as told got "No such image")."""
    import re

    import yaml

    from hostctl.images import GPU_RUNTIME_IMAGE

    root = Path(__file__).resolve().parents[2]
    named = {yaml.safe_load(p.read_text()).get("image") for p in (root / "runtime" / "recipes").glob("*.yaml")}
    assert GPU_RUNTIME_IMAGE in named and named <= {GPU_RUNTIME_IMAGE, *(n for n in named if "cpu-demo" in str(n))}
    for doc in (root / "runtime" / "sm120" / "Dockerfile", root / "runtime" / "README.md"):
        tags = set(re.findall(r"-t (hostctl/vllm-moet-sm120:\S+?)[ `]", doc.read_text()))
        assert tags == {GPU_RUNTIME_IMAGE}, (doc, tags)
