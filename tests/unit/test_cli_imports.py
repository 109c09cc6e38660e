"""What the read-only commands import, so later features cannot quietly undo their start-up time
(benchmarks/doctor_quick.py measures it; this test is not timed).

Each command runs in a fresh interpreter through a small wrapper that calls hostctl's main() and
then writes the names in sys.modules to a file: the modules it imported, whatever it printed.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hostctl import paths

HOSTS = paths.hosts_dir()
DEMO = str(HOSTS / "demo-cpu.toml")

# Heavy optional modules: each is used by one command (model pull, tune's chart, verify) or
# by the tests, and costs 0.1-0.5 s to import. The docker SDK (~0.13 s) is imported by whatever
# asks the engine (plan, status, doctor, facts) once its socket is there, and by nothing else.
HEAVY = frozenset({"huggingface_hub", "matplotlib", "testinfra", "pytest", "_pytest"})
# Nothing but typer is needed to parse the arguments and print --help (typer 0.28: its option
# coercion is its own, not pydantic's).
NOT_TO_PARSE = HEAVY | {"docker", "rich", "jinja2", "yaml", "httpx", "pydantic"}
NOT_TO_LIST = NOT_TO_PARSE
# plan and status read a profile (pydantic, YAML) and render nothing, fetch nothing over httpx.
NOT_TO_READ = HEAVY | {"jinja2", "httpx"}

WRAPPER = """
import json, sys
out = sys.argv[1]
code = 0
try:
    from hostctl.cli import main
    if sys.argv[2:] != ["--import-only"]:
        code = main(sys.argv[2:])
finally:
    with open(out, "w") as f:
        json.dump(sorted(sys.modules), f)
sys.exit(code)  # the command's own exit code, as `hostctl` would end
"""


def imported(argv: list[str], tmp_path: Path, *, modules: bool = False) -> tuple[set[str], subprocess.CompletedProcess]:
    """The top-level packages a fresh `hostctl ARGV` imported (hostctl's own left out; every
    module's full name with `modules`)."""
    out = tmp_path / "modules.json"
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    done = subprocess.run([sys.executable, "-c", WRAPPER, str(out), *argv], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120, env=env)  # cwd: no ./hostctl.toml is picked up
    assert out.is_file(), done.stderr
    if modules:
        return set(json.loads(out.read_text())), done
    names = {name.split(".")[0] for name in json.loads(out.read_text())}
    return names - {"hostctl"}, done


@pytest.mark.parametrize("argv, unwanted", [(["--import-only"], NOT_TO_LIST), (["--help"], NOT_TO_LIST),
                                             (["plan", "--help"], NOT_TO_PARSE), (["status", "--help"], NOT_TO_PARSE)],
                         ids=["import", "help", "plan-help", "status-help"])
def test_parsing_and_help_import_only_typer(argv, unwanted, tmp_path):
    names, done = imported(argv, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "typer" in names
    assert not names & unwanted, f"`hostctl {' '.join(argv)}` imported {sorted(names & unwanted)}"


def _expected_exit(doc: dict) -> int:
    """What the command must exit with, from its own JSON document: plan 1 when a section has an
    error (this machine cannot serve the demo), status 0 only while the runtime runs and answers."""
    if doc["schema"] == "hostctl.plan/v1":
        sections = ("memory", "placement", "nccl", "storage", "power", "runtime")
        return 1 if any(p["severity"] == "error" for s in sections for p in doc[s]["problems"]) else 0
    assert doc["schema"] == "hostctl.status/v1", doc
    return 0 if doc["state"] == "running" and doc["healthy"] else 1


@pytest.mark.parametrize("argv", [["plan", "--config", DEMO], ["plan", "--json", "--config", DEMO],
                                  ["status", "--config", DEMO], ["status", "--json", "--config", DEMO]],
                         ids=["plan", "plan-json", "status", "status-json"])
def test_plan_and_status_import_no_heavy_module(argv, tmp_path):
    names, done = imported(argv, tmp_path)
    assert "internal error" not in done.stderr, done.stderr
    if "--json" in argv:
        doc = json.loads(done.stdout)
    else:
        assert done.stdout.strip()
        as_json = subprocess.run([sys.executable, "-m", "hostctl", *argv, "--json"], capture_output=True, text=True,
                                 cwd=tmp_path, timeout=120, env=dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache")))
        doc = json.loads(as_json.stdout)
    assert done.returncode == _expected_exit(doc), (done.returncode, done.stderr)
    assert "pydantic" in names  # the profile was read and validated
    assert not names & NOT_TO_READ, f"`hostctl {' '.join(argv)}` imported {sorted(names & NOT_TO_READ)}"


def test_the_wrapper_sees_a_heavy_import(tmp_path):
    # `logs` reads the container's log through the docker SDK: the wrapper must report it, or the
    # tests above would pass whatever the commands imported.
    names, done = imported(["logs", "--config", DEMO], tmp_path)
    assert "docker" in names, done.stderr


# What the probes no longer import (benchmarks/results/doctor_quick-2vcpu-shared.txt, issue 12's
# second round): NVML only where a driver is loaded, and plan/facts ask plan/requests.py for
# directories without the storage decisions. (importlib.metadata comes with the docker SDK's urllib3.)
PROBES_DO_NOT_IMPORT = frozenset({"hostctl.provision.storage"})
WRAPPER_FULL = WRAPPER.replace(
    "from hostctl.cli import main",
    "from pathlib import Path\n    from hostctl.facts import gpu\n"
    "    gpu.NVIDIA_VERSION = gpu.NVIDIA_CTL = Path('/nonexistent/no-driver')  # a host without the driver\n"
    "    from hostctl.cli import main")


@pytest.mark.parametrize("argv", [["doctor", "--json"], ["facts"], ["facts", "--json"], ["plan", "--config", DEMO],
                                  ["status", "--config", DEMO]], ids=["doctor", "facts", "facts-json", "plan", "status"])
def test_read_only_commands_import_no_probe_library(argv, tmp_path):
    out = tmp_path / "modules.json"
    done = subprocess.run([sys.executable, "-c", WRAPPER_FULL, str(out), *argv], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    assert out.is_file(), done.stderr
    assert "internal error" not in done.stderr, done.stderr
    modules = set(json.loads(out.read_text()))
    # the command did read facts, or (status) the engine's view of its container
    assert ("hostctl.facts.engine" if argv[0] == "status" else "hostctl.facts.records") in modules
    unwanted = PROBES_DO_NOT_IMPORT | {"pynvml"}
    assert not modules & unwanted, f"`hostctl {' '.join(argv)}` imported {sorted(modules & unwanted)}"
    if argv[0] in ("doctor", "facts"):  # no profile here (cwd is empty): no config models, no planners, no plan models
        assert not modules & {"hostctl.config", "hostctl.plan.runtime", "hostctl.plan.records"}, sorted(modules)


def test_doctor_checks_import_no_failure_catalogue():
    # The catalogue's regexes (~10-13 ms) are for a log that holds a failure: the checks import it
    # when they have one to explain (a kernel log's OOM kill or Xid, a dead container), not before.
    code = "import sys, hostctl.doctor.checks; print('hostctl.failures' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "False", done.stderr
