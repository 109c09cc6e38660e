"""`hostctl doctor` through the CLI: exit codes, the JSON document, --strict, --log, --bundle
(with planted secrets that must not survive), text layout and colour."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from hostctl import paths
from hostctl.cli import main
from hostctl.doctor import report
from hostctl.secrets import MASK, redact
from need import needs

HOSTS = paths.hosts_dir()
DESKTOP = ["--config", str(HOSTS / "pro6000x2-desktop.toml"), "--facts", str(HOSTS / "pro6000x2-desktop.facts.json")]
H200 = str(Path(__file__).resolve().parent.parent / "gpu" / "h200-facts.json")

SECRETS = {
    "hf": "hf_PLANTEDhuggingfaceTOKEN0123456789",
    "api": "sk-planted-api-key-0123456789abcdef",
    "bearer": "planted.bearer.token.xyz",
    "password": "planted-hunter2",
}
TCPSTORE_LOG = """\
(VllmWorker rank=1 pid=311) INFO 08-02 21:52:41 [default_loader.py:262] Loading safetensors checkpoint shards:  44% Completed | 21/48
[W802 21:58:13.102344 TCPStore.cpp:125] [c10d] recvValue failed on SocketImpl(fd=64): failed to recv, got 0 bytes
(VllmWorker rank=1 pid=311) ERROR 08-02 21:58:13 torch.distributed.DistStoreError: sendBytes failed on SocketImpl(fd=64): Broken pipe
"""


def run(argv, capsys):
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_json_document_and_exit_0(capsys):
    code, out, err = run(["doctor", "--json"] + DESKTOP, capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["schema"] == "hostctl.doctor/v1" and doc["exit_code"] == 0
    assert doc["profile"] == "pro6000x2-desktop" and doc["level"] == "quick"
    assert doc["facts"]["source"].endswith("pro6000x2-desktop.facts.json")
    assert sum(doc["summary"].values()) == len(doc["checks"]) and doc["summary"]["fail"] == 0
    for c in doc["checks"]:
        assert set(c) >= {"id", "title", "area", "level", "status", "summary", "evidence", "fix"}
        if c["status"] in ("warn", "fail"):
            assert c["fix"] and set(c["evidence"]) == {"observed", "expected", "source"}
    by_id = {c["id"]: c for c in doc["checks"]}
    assert by_id["gpu.power.limit"]["evidence"]["source"].startswith("NVML")


def test_a_failing_check_exits_1_and_prints_the_fix_under_it(tmp_path, capsys):
    profile = tmp_path / "p.toml"
    profile.write_text((HOSTS / "pro6000x2-desktop.toml").read_text().replace("power_limit_w = 300", "power_limit_w = 250"))
    code, out, _ = run(["doctor", "--config", str(profile), "--facts", str(HOSTS / "pro6000x2-desktop.facts.json")], capsys)
    assert code == 1
    lines = out.splitlines()
    i = next(i for i, line in enumerate(lines) if "gpu.power.limit" in line)
    assert lines[i].strip().startswith("FAIL") and "GPU 0 at 300 W" in lines[i]
    assert lines[i + 1].strip().startswith("fix: hostctl provision --only gpu")
    assert "\033[" not in out  # not a terminal: no colour
    assert out.rstrip().endswith("FAILED")


def test_strict_makes_warnings_fail(capsys, tmp_path):
    code, _, _ = run(["doctor", "--strict"] + DESKTOP, capsys)
    assert code == 1  # the reference desktop's one warning: the systemd cgroup driver (docker.cgroup_driver)
    snap = json.loads((HOSTS / "pro6000x2-desktop.facts.json").read_text())
    snap["engine"]["cgroup_driver"] = "cgroupfs"
    clean = tmp_path / "clean.json"
    clean.write_text(json.dumps(snap))
    code, _, _ = run(["doctor", "--strict", "--config", str(HOSTS / "pro6000x2-desktop.toml"), "--facts", str(clean)],
                     capsys)
    assert code == 0  # no warning left
    snap["gpus"]["devices"][0]["pcie"]["width_max"] = 16  # GPU 0 runs x8 of an x16 link
    narrow = tmp_path / "narrow.json"
    narrow.write_text(json.dumps(snap))
    argv = ["--config", str(HOSTS / "pro6000x2-desktop.toml"), "--facts", str(narrow)]
    code, out, _ = run(["doctor"] + argv, capsys)
    assert code == 0 and "WARN  gpu.pcie.link" in out
    code, out, _ = run(["doctor", "--strict"] + argv, capsys)
    assert code == 1 and "(--strict: warnings fail)" in out


def test_text_is_grouped_one_line_per_check(capsys):
    _, out, _ = run(["doctor"] + DESKTOP, capsys)
    groups = [line for line in out.splitlines() if line in ("gpu", "memory", "storage", "docker", "service", "system", "logs")]
    assert groups == ["gpu", "memory", "storage", "docker", "service", "system", "logs"]
    _, jout, _ = run(["doctor", "--json"] + DESKTOP, capsys)
    for c in json.loads(jout)["checks"]:
        assert sum(1 for line in out.splitlines() if f"  {c['id']} " in line) == 1, c["id"]


def test_colour_only_on_a_terminal():
    master, slave = os.openpty()
    with os.fdopen(slave, "w") as tty:
        assert report.use_colour(tty) or os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb"
    os.close(master)
    assert not report.use_colour(io.StringIO())


def test_without_profile_on_a_snapshot_profile_checks_skip(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(paths, "PROFILE_SEARCH", (Path("hostctl.toml"),))
    code, out, _ = run(["doctor", "--json", "--facts", H200], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["profile"] is None and doc["no_config_reason"] == "no host profile"
    by_id = {c["id"]: c for c in doc["checks"]}
    assert by_id["memory.ram_swap"]["status"] == "skip" and by_id["gpu.driver"]["status"] == "pass"


def test_log_diagnosis_classifies_and_exits_1(tmp_path, capsys):
    log = tmp_path / "runtime.log"
    log.write_text(TCPSTORE_LOG + f"INFO started with --api-key {SECRETS['api']}\n"
                   f"[c10d] TCPStore client: Broken pipe (VLLM_API_KEY={SECRETS['api']})\n")
    code, out, _ = run(["doctor", "--json", "--log", str(log)] + DESKTOP, capsys)
    doc = json.loads(out)
    assert code == 1 and doc["exit_code"] == 1
    assert [f["id"] for f in doc["log"]["findings"]] == ["host-oom-tcpstore"]
    assert SECRETS["api"] not in out and MASK in out
    code, out, _ = run(["doctor", "--log", str(log)] + DESKTOP, capsys)
    assert "host-oom-tcpstore: a rank died to the host OOM killer" in out and "fix: cap the container" in out


def test_log_without_a_known_failure_passes(tmp_path, capsys):
    log = tmp_path / "ok.log"
    log.write_text("INFO Application startup complete.\nINFO 127.0.0.1 GET /health 200\n")
    code, out, _ = run(["doctor", "--log", str(log)] + DESKTOP, capsys)
    assert code == 0 and "no known failure signature matched" in out


def test_missing_log_is_bad_input(tmp_path, capsys):
    code, out, err = run(["doctor", "--log", str(tmp_path / "nope.log")] + DESKTOP, capsys)
    assert code == 2 and out == "" and "no such file" in err


def _planted_config(tmp_path: Path) -> Path:
    """The desktop profile and recipe with secrets planted where people really put them."""
    recipe = yaml.safe_load((paths.recipes_dir() / "dsv4-flash-0731-tp2-400k.yaml").read_text())
    recipe["env"]["HF_TOKEN"] = SECRETS["hf"]
    recipe["env"]["OPENAI_API_KEY"] = SECRETS["api"]  # (VLLM_API_KEY itself is refused in a recipe)
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    text = (HOSTS / "pro6000x2-desktop.toml").read_text()
    text = text.replace('recipe = "dsv4-flash-0731-tp2-400k"', 'recipe = "recipe.yaml"')
    text = f"# deploy notes: password: {SECRETS['password']}\n# curl -H 'Authorization: Bearer {SECRETS['bearer']}'\n" + text
    profile = tmp_path / "hostctl.toml"
    profile.write_text(text)
    return profile


def test_bundle_has_every_part_and_no_secret(tmp_path, capsys):
    profile = _planted_config(tmp_path)
    log = tmp_path / "runtime.log"
    log.write_text(TCPSTORE_LOG + f"export HF_TOKEN={SECRETS['hf']}\nAuthorization: Bearer {SECRETS['bearer']}\n")
    bundle = tmp_path / "support.tar.gz"
    code, out, err = run(["doctor", "--config", str(profile), "--facts", str(HOSTS / "pro6000x2-desktop.facts.json"),
                          "--log", str(log), "--bundle", str(bundle)], capsys)
    assert code == 1  # the log matched a failure
    assert f"support bundle: {bundle}" in out and "secret(s) redacted" in err
    with tarfile.open(bundle) as tar:
        members = {m.name.split("/", 1)[1]: tar.extractfile(m).read().decode() for m in tar.getmembers()}
    for name in ("MANIFEST.txt", "doctor.json", "facts.json", "plan.json", "profile/hostctl.toml", "profile/recipe.json",
                 "rendered/compose.yaml", "rendered/runtime.env", "input/runtime.log"):
        assert name in members, sorted(members)
    everything = "\n".join(members.values())
    for secret in SECRETS.values():
        assert secret not in everything, secret
    assert "HF_TOKEN=" in members["rendered/runtime.env"] and MASK in members["rendered/runtime.env"]
    assert json.loads(members["doctor.json"])["schema"] == "hostctl.doctor/v1"
    assert "kernel.log: the facts snapshot carries no kernel log" in members["MANIFEST.txt"]
    assert "runtime logs: facts from a snapshot" in members["MANIFEST.txt"]
    assert MASK not in members["MANIFEST.txt"] and "rendered/runtime.env" in members["MANIFEST.txt"]
    assert oct(bundle.stat().st_mode & 0o777) == "0o600"


def test_bundle_into_a_missing_folder_is_bad_input(tmp_path, capsys):
    code, _, err = run(["doctor", "--bundle", str(tmp_path / "no" / "b.tar.gz")] + DESKTOP, capsys)
    assert code == 2 and "does not exist" in err


@pytest.mark.parametrize("text, secret", [
    ("VLLM_API_KEY=abc123def", "abc123def"),
    ('{"HF_TOKEN": "hf_abcdefghijklmnopqrstuvwxyz01"}', "hf_abcdefghijklmnopqrstuvwxyz01"),
    ("token hf_abcdefghijklmnopqrstuvwxyz01 in a sentence", "abcdefghijklmnopqrstuvwxyz01"),
    ("Authorization: Bearer eyJhbGciOi.J9", "eyJhbGciOi.J9"),
    ('"authorization": "Basic dXNlcjpwYXNz"', "dXNlcjpwYXNz"),
    ("python -m vllm.entrypoints.openai.api_server --api-key k3y-value --port 8000", "k3y-value"),
    ('["--api-key", "k3y-value"]', "k3y-value"),
    ("OPENAI_API_KEY: sk-abcdefghijklmnopqrstuvwx", "sk-abcdefghijklmnopqrstuvwx"),
    ("db_password = 'p4ss'", "p4ss"),
])
def test_redaction_hides_the_value_keeps_the_name(text, secret):
    out = redact(text)
    assert secret not in out and MASK in out


@pytest.mark.parametrize("text", [
    'api_key_env = "HOSTCTL_API_KEY"',                       # names a variable, holds no secret
    'VLLM_API_KEY: "${HOSTCTL_API_KEY:?set it}"',             # Compose interpolation, not a value
    "--max-num-batched-tokens 4096 --tokenizer-mode deepseek_v4",
    "num_speculative_tokens: 7",
    "TOKENIZERS_PARALLELISM=false",
    "HF_TOKEN=",                                             # empty: nothing to hide
])
def test_redaction_near_misses(text):
    assert redact(text) == text


def test_console_script_doctor_on_a_snapshot():
    done = subprocess.run([sys.executable, "-m", "hostctl", "doctor", "--json"] + DESKTOP, capture_output=True, text=True)
    assert done.returncode == 0 and json.loads(done.stdout)["schema"] == "hostctl.doctor/v1"


def test_diagnose_for_up_uses_engine_state_and_redacts_lines():
    from hostctl.doctor.diagnose import diagnose, diagnosis_text

    log = f"INFO building moe_w2 delta tier: 24.0 GiB pool (--api-key {SECRETS['api']})\n"
    d = diagnose(log, source="container hostctl-runtime", oom_killed=True, exit_code=137)
    assert [f.id for f in d.findings] == ["container-oom"]
    text = diagnosis_text(d)
    assert "container hostctl-runtime" in text and "moe_w2 delta tier" in text and SECRETS["api"] not in text
    assert diagnose("INFO ready\n", exit_code=0).findings == []


NOBODY = 65534


def _bundle_text(bundle: Path) -> str:
    if not bundle.exists():
        return ""
    with tarfile.open(bundle) as tar:
        return "\n".join(tar.extractfile(m).read().decode("utf-8", "replace") for m in tar.getmembers() if m.isfile())


@needs(os.geteuid() == 0, "needs root: the link is chowned to nobody")
def test_log_through_another_users_link_is_refused_and_not_bundled(tmp_path, capsys):
    victim = tmp_path / "root-only"
    victim.write_text(TCPSTORE_LOG + "root:$6$planted-hash-of-root:19000:0:99999:7:::\n")
    os.chmod(victim, 0o600)
    theirs = tmp_path / "nob"
    theirs.mkdir()
    os.chown(theirs, NOBODY, NOBODY)
    link = theirs / "runtime.log"
    os.symlink(victim, link)  # nobody's `runtime.log -> /etc/shadow`
    os.lchown(link, NOBODY, NOBODY)
    bundle = tmp_path / "b.tar.gz"
    code, out, err = run(["doctor", "--log", str(link), "--bundle", str(bundle)] + DESKTOP, capsys)
    assert code == 3, err
    assert "planted-hash-of-root" not in out + err + _bundle_text(bundle)
    assert str(link.parent) in err or str(link) in err


@needs(os.geteuid() == 0, "needs root: the log is chowned to nobody")
def test_a_log_another_user_owns_is_still_read(tmp_path, capsys):
    log = tmp_path / "runtime.log"
    log.write_text(TCPSTORE_LOG)
    os.chown(log, NOBODY, NOBODY)  # a log may be syslog's: only the way to it must be safe
    code, out, _ = run(["doctor", "--log", str(log)] + DESKTOP, capsys)
    assert code == 1 and "log diagnosis of" in out


def test_a_pipe_as_log_is_bad_input(tmp_path, capsys):
    fifo = tmp_path / "runtime.log"
    os.mkfifo(fifo)
    code, _, err = run(["doctor", "--log", str(fifo)] + DESKTOP, capsys)
    assert code == 2 and str(fifo) in err


@needs(os.geteuid() == 0, "needs root: the hard link is made as a host without protected_hardlinks lets anyone")
def test_a_log_that_is_a_hard_link_to_a_root_file_is_refused(tmp_path, capsys):
    victim = tmp_path / "root-only"
    victim.write_text(TCPSTORE_LOG + "root:$6$planted-hash-of-root:19000:0:99999:7:::\n")
    os.chmod(victim, 0o600)
    shared = tmp_path / "tmp"
    shared.mkdir()
    os.chmod(shared, 0o1777)  # as /tmp
    link = shared / "runtime.log"
    os.link(victim, link)  # what anyone can do where fs.protected_hardlinks=0
    code, out, err = run(["doctor", "--log", str(link)] + DESKTOP, capsys)
    assert code == 3 and "planted-hash-of-root" not in out + err
