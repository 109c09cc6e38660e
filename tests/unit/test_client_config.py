"""`hostctl client opencode|openai-env|json` (hostctl.service.clientconfig, hostctl/cli/client.py):
each format from the bundled demo profile and from one with an API key variable and tool calling
off; the key only by reference unless --with-key, and then only in a 0600 file; a symlink at --out
refused; what vLLM's parser reads from the recipe (tool calling, the output cap) in every spelling.

The opencode documents are read by the real opencode (`opencode models`: the provider and model as
it will use them; test.sh installs it, pinned, under /var/cache/hostctl/opencode). The OpenAI SDK
against the running demo is tests/system/test_client_sdk.py's.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from hostctl import paths, serveflags
from hostctl.cli import main
from hostctl.cli.client import ClientFormat
from hostctl.service import clientconfig
from tests.attacker import NOBODY, make_victim
from tests.need import need

HOSTS = paths.hosts_dir()
DEMO = HOSTS / "demo-cpu.toml"
DEMO_RECIPE = paths.recipes_dir() / "demo-cpu-tiny-moe.yaml"
KEY_ENV = "HC_CLIENT_TEST_API_KEY"
KEY = "hc-client-test-key-4f9b2c7e1d"
# test.sh: npm install --prefix /var/cache/hostctl/opencode opencode-ai@<pinned>
OPENCODE = Path("/var/cache/hostctl/opencode/node_modules/.bin/opencode")


def run(argv, capsys):
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def keyed(tmp_path) -> Path:
    """A profile whose runtime checks a key (runtime.api_key_env), listens on every address, and
    serves the demo recipe with tool calling off."""
    recipe = yaml.safe_load(DEMO_RECIPE.read_text())
    recipe["serve_args"] = [a for a in recipe["serve_args"] if "tool" not in a]
    recipe["smoke"] = [t for t in recipe["smoke"] if t["kind"] != "tool_call"]
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(recipe, sort_keys=False))
    profile = tmp_path / "hostctl.toml"
    profile.write_text('name = "keyed"\nrecipe = "recipe.yaml"\n[memory]\nhost_reserve = "4GiB"\n[runtime]\n'
                       f'api_host = "0.0.0.0"\napi_port = 8123\nproject = "hc-keyed"\napi_key_env = "{KEY_ENV}"\n')
    return profile


def sourced(path: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """The two variables after `. FILE` in POSIX sh."""
    return subprocess.run(["sh", "-c", '. "$1" && printf "%s\\n%s\\n" "$OPENAI_BASE_URL" "$OPENAI_API_KEY"', "sh",
                           str(path)], capture_output=True, text=True, env={"PATH": os.environ["PATH"], **env},
                          timeout=30)


def test_the_cli_choices_are_the_formats():
    assert tuple(f.value for f in ClientFormat) == clientconfig.FORMATS


# -- the demo profile: no key, tool calling on ---------------------------------------------------

def test_json_from_the_demo_profile(capsys):
    code, out, err = run(["client", "json", "--config", str(DEMO)], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["schema"] == "hostctl.client/v1" and doc["profile"] == "demo-cpu"
    assert doc["base_url"] == "http://127.0.0.1:8000/v1" and doc["model"] == "tiny-moe"
    assert (doc["context"], doc["max_output"], doc["tool_calling"], doc["api_key_env"]) == (2048, 512, True, None)
    assert "--enable-auto-tool-choice" in doc["reasons"]["tool_calling"] and "api_key" not in doc


def test_opencode_from_the_demo_profile(capsys):
    code, out, err = run(["client", "opencode", "--config", str(DEMO)], capsys)
    assert code == 0, err
    doc = json.loads(out)
    provider = doc["provider"]["hostctl"]
    assert provider["npm"] == "@ai-sdk/openai-compatible"
    assert provider["options"] == {"baseURL": "http://127.0.0.1:8000/v1"}  # no key checked, none sent
    assert provider["models"] == {"tiny-moe": {"name": "tiny-moe", "tool_call": True,
                                               "limit": {"context": 2048, "output": 512}}}
    assert doc["model"] == "hostctl/tiny-moe"


def test_openai_env_from_the_demo_profile_sources_in_sh(capsys, tmp_path):
    code, out, err = run(["client", "openai-env", "--config", str(DEMO)], capsys)
    assert code == 0, err
    (tmp_path / "client.env").write_text(out)
    # a real OpenAI key in the caller's shell is replaced, never sent to the local runtime
    done = sourced(tmp_path / "client.env", {"OPENAI_API_KEY": "sk-the-callers-real-openai-key"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["http://127.0.0.1:8000/v1", "none"]
    assert "# model (the served name): tiny-moe" in out and "# tool calling: on" in out


# -- a profile with a key and tool calling off ----------------------------------------------------

@pytest.mark.parametrize("fmt", clientconfig.FORMATS)
def test_no_key_in_what_is_printed_or_written_without_with_key(fmt, keyed, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv(KEY_ENV, KEY)
    code, printed, err = run(["client", fmt, "--config", str(keyed)], capsys)
    assert code == 0, err
    code, _, err = run(["client", fmt, "--config", str(keyed), "--out", str(tmp_path / "out")], capsys)
    assert code == 0, err
    written = (tmp_path / "out").read_text()
    assert written == printed and KEY not in written and KEY_ENV in written
    assert stat.S_IMODE(os.stat(tmp_path / "out").st_mode) == 0o644


def test_json_with_a_key_variable_and_tool_calling_off(keyed, capsys):
    code, out, err = run(["client", "json", "--config", str(keyed)], capsys)
    assert code == 0, err
    doc = json.loads(out)
    # the endpoint as this host reaches an API listening on every address
    assert doc["base_url"] == "http://127.0.0.1:8123/v1" and doc["api_key_env"] == KEY_ENV
    assert doc["tool_calling"] is False and "off" in doc["reasons"]["tool_calling"]


def test_opencode_refers_to_the_key_as_opencode_does(keyed, capsys):
    code, out, err = run(["client", "opencode", "--config", str(keyed)], capsys)
    assert code == 0, err
    provider = json.loads(out)["provider"]["hc-keyed"]
    assert provider["options"]["apiKey"] == "{env:" + KEY_ENV + "}"
    assert provider["models"]["tiny-moe"]["tool_call"] is False


def test_openai_env_takes_the_key_from_its_variable_and_stops_without_it(keyed, capsys, tmp_path):
    code, out, err = run(["client", "openai-env", "--config", str(keyed), "--out", str(tmp_path / "c.env")], capsys)
    assert code == 0, err
    done = sourced(tmp_path / "c.env", {KEY_ENV: KEY})
    assert done.returncode == 0 and done.stdout.splitlines() == ["http://127.0.0.1:8123/v1", KEY], done.stderr
    done = sourced(tmp_path / "c.env", {})
    assert done.returncode != 0 and f"set {KEY_ENV}" in done.stderr and done.stdout == ""


# -- --with-key ------------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", clientconfig.FORMATS)
def test_with_key_writes_the_key_itself_0600(fmt, keyed, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv(KEY_ENV, KEY)
    out = tmp_path / "client.out"
    out.write_text("an older, readable file\n")
    os.chmod(out, 0o644)
    code, printed, err = run(["client", fmt, "--with-key", "--out", str(out), "--config", str(keyed)], capsys)
    assert code == 0, err
    assert printed == "" and KEY not in err and "0600" in err
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600 and KEY in out.read_text()
    if fmt == "openai-env":
        assert sourced(out, {}).stdout.splitlines()[1] == KEY
    else:
        doc = json.loads(out.read_text())
        got = doc["api_key"] if fmt == "json" else doc["provider"]["hc-keyed"]["options"]["apiKey"]
        assert got == KEY
    # written again without the key: a readable file again, and the key gone
    code, _, err = run(["client", fmt, "--out", str(out), "--config", str(keyed)], capsys)
    assert code == 0, err
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o644 and KEY not in out.read_text()


@pytest.mark.parametrize("argv, says", [
    (["--with-key"], "never to the terminal"),
    (["--with-key", "--out", "-"], "never to the terminal"),
])
def test_with_key_needs_a_file(argv, says, keyed, capsys, monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    code, out, err = run(["client", "json", *argv, "--config", str(keyed)], capsys)
    assert code == 2 and out == "" and says in err and "fix: add --out PATH" in err


def test_with_key_needs_the_variable_set(keyed, capsys, monkeypatch, tmp_path):
    monkeypatch.delenv(KEY_ENV, raising=False)
    code, _, err = run(["client", "json", "--with-key", "--out", str(tmp_path / "c.json"), "--config", str(keyed)],
                       capsys)
    assert code == 2 and f"{KEY_ENV} (the profile's runtime.api_key_env) is not set" in err and "fix:" in err
    assert not (tmp_path / "c.json").exists()


def test_with_key_needs_a_runtime_that_checks_one(capsys, tmp_path):
    code, _, err = run(["client", "json", "--with-key", "--out", str(tmp_path / "c.json"), "--config", str(DEMO)],
                       capsys)
    assert code == 2 and "checks no API key" in err and not (tmp_path / "c.json").exists()


# -- --out: never through a link -------------------------------------------------------------------

def test_a_symlink_at_out_is_refused_and_left_alone(capsys, tmp_path):
    target = tmp_path / "real.json"
    target.write_text("mine\n")
    (tmp_path / "link.json").symlink_to(target)
    code, out, err = run(["client", "opencode", "--out", str(tmp_path / "link.json"), "--config", str(DEMO)], capsys)
    assert code == 3 and "symlink" in err and "realpath" in err
    assert target.read_text() == "mine\n" and (tmp_path / "link.json").is_symlink()


def test_as_root_a_link_another_user_planted_is_refused(capsys, monkeypatch, tmp_path, keyed):
    need(os.geteuid() == 0, "needs root: the link is planted as nobody")
    monkeypatch.delenv("SUDO_UID", raising=False)
    monkeypatch.setenv(KEY_ENV, KEY)
    victim = make_victim(tmp_path)
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)  # as /tmp
    os.symlink(victim, shared / "client.env")
    os.lchown(shared / "client.env", NOBODY, NOBODY)
    code, _, err = run(["client", "openai-env", "--with-key", "--out", str(shared / "client.env"),
                        "--config", str(keyed)], capsys)
    assert code == 3 and "symlink" in err and "nobody" in err
    assert victim.read_text() == "root's secret\n" and stat.S_IMODE(os.stat(victim).st_mode) == 0o600
    assert os.listdir(shared) == ["client.env"] and (shared / "client.env").is_symlink()


def test_under_sudo_the_file_is_the_users(capsys, monkeypatch, tmp_path, keyed):
    need(os.geteuid() == 0, "needs root: the file is handed to another user")
    monkeypatch.setenv("SUDO_UID", str(NOBODY))
    monkeypatch.setenv("SUDO_GID", str(NOBODY))
    monkeypatch.setenv(KEY_ENV, KEY)
    out = tmp_path / "opencode.json"
    code, _, err = run(["client", "opencode", "--with-key", "--out", str(out), "--config", str(keyed)], capsys)
    assert code == 0, err
    st = os.stat(out)
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (NOBODY, NOBODY, 0o600)


# -- what the server does, as vLLM's parser reads the recipe --------------------------------------

@pytest.mark.parametrize("argv, on", [
    ([], False),
    (["--enable-auto-tool-choice"], True),
    (["--enable_auto_tool_choice"], True),
    (["--enable-auto-tool"], True),                 # a prefix argparse takes
    (["--enable"], False),                          # ambiguous: vLLM itself refuses it
    (["--enable-auto-tool-choice", "--no-enable-auto-tool-choice"], False),  # the last wins
    (["--no-enable-auto-tool-choice", "--enable-auto-tool-choice"], True),
    (["--enable-auto-tool-choice.x", "1"], True),   # a dotted key is its KEY
    (["--tool-call-parser", "hermes"], False),
])
def test_tool_calling_is_read_as_vllm_reads_the_flags(argv, on):
    assert clientconfig.tool_calling(argv)[0] is on


@pytest.mark.parametrize("argv, context, expected", [
    ([], 2048, 512),
    ([], 1_000_000, 32768),
    ([], 3, 1),
    (["--override-generation-config", '{"max_new_tokens": 300}'], 2048, 300),
    (["--override-generation-config={\"max_new_tokens\": 300, \"temperature\": 0.6}"], 2048, 300),
    (["--override-generation-config.max_new_tokens", "300"], 2048, 300),
    (["--override_generation_config.max_new_tokens=300"], 2048, 300),
    (["--override-generation-config", '{"max_new_tokens": 300}', "--override-generation-config", "{}"], 2048, 512),
    (["--override-generation-config", '{"max_new_tokens": 4096}'], 2048, 512),  # no cap below the context
    (["--override-generation-config", '{"temperature": 0.6}'], 2048, 512),
    (["--override-generation-config", "not json"], 2048, 512),
])
def test_max_output_is_the_recipes_cap_else_a_quarter_of_the_context(argv, context, expected):
    assert clientconfig.max_output(context, argv)[0] == expected


def test_every_option_read_has_its_shortest_prefix():
    for flag, read in serveflags.READ.items():
        assert flag.startswith(read.shortest) and len(read.shortest) > len("--no-")


# -- the real opencode ----------------------------------------------------------------------------

def opencode_models(config: Path, provider: str, home: Path) -> dict:
    """The model as opencode will use it (`opencode models PROVIDER --verbose`), offline, with a home
    of its own and no other config (no project config, no global one, no plugins)."""
    need(os.access(OPENCODE, os.X_OK), f"opencode is not installed at {OPENCODE} (test.sh installs it from npm)")
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "XDG_CONFIG_HOME": str(home / "config"),
           "XDG_DATA_HOME": str(home / "data"), "XDG_CACHE_HOME": str(home / "cache"),
           "XDG_STATE_HOME": str(home / "state"), "OPENCODE_CONFIG": str(config),
           "OPENCODE_DISABLE_PROJECT_CONFIG": "1", "OPENCODE_DISABLE_MODELS_FETCH": "1",
           "OPENCODE_DISABLE_AUTOUPDATE": "1"}
    done = subprocess.run([str(OPENCODE), "models", provider, "--verbose", "--pure"], capture_output=True, text=True,
                          env=env, cwd=home, timeout=60)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    head, _, body = done.stdout.partition("\n")
    assert head.strip() == f"{provider}/tiny-moe", done.stdout
    return json.loads(body)


@pytest.mark.parametrize("profile, provider, tools", [("demo", "hostctl", True), ("keyed", "hc-keyed", False)])
def test_opencode_reads_the_provider_and_model_as_written(profile, provider, tools, keyed, capsys, monkeypatch,
                                                          tmp_path):
    monkeypatch.setenv(KEY_ENV, KEY)
    config = DEMO if profile == "demo" else keyed
    out = tmp_path / "opencode.json"
    code, _, err = run(["client", "opencode", "--out", str(out), "--config", str(config)], capsys)
    assert code == 0, err
    home = tmp_path / "home"
    home.mkdir()
    model = opencode_models(out, provider, home)
    assert model["providerID"] == provider and model["api"]["npm"] == "@ai-sdk/openai-compatible"
    assert model["capabilities"]["toolcall"] is tools
    assert (model["limit"]["context"], model["limit"]["output"]) == (2048, 512)
    if profile == "keyed":  # the key itself, 0600, reads the same
        code, _, err = run(["client", "opencode", "--with-key", "--out", str(out), "--config", str(config)], capsys)
        assert code == 0, err
        assert opencode_models(out, provider, home)["capabilities"]["toolcall"] is False
