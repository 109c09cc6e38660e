"""`hostctl client` against its real clients on the running demo (the session's shared runtime):

- the OpenAI Python SDK, set up only by the `openai-env` file (sourced by sh, as a user would) and
  the served name from `client json`: one chat completion, one streamed chat completion and, since
  `client json` says tool calling is on, one tool call, each answered by the tiny model trained on
  exactly the recipe's smoke prompts;
- opencode, headless and offline, with the `opencode` document: it reaches the demo by the base
  URL and the served name and completes a turn. The demo's 2,048-token context is smaller than
  opencode's own agent prompt and tool list, so the test adds an agent with a one-line prompt and
  no tools; what the tiny model answers opencode is not asserted (it knows only its smoke prompts).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import needs_compose, needs_root
from need import need, need_module
from runtime_fixtures import DEMO_RECIPE, SHARED_PORT

pytestmark = [pytest.mark.system, needs_root, needs_compose]

OPENCODE = Path("/var/cache/hostctl/opencode/node_modules/.bin/opencode")  # test.sh installs it from npm

# Run after `. client.env`: the SDK reads OPENAI_BASE_URL and OPENAI_API_KEY itself.
SDK_SCRIPT = r"""
import json, sys
from openai import OpenAI

model, smoke = sys.argv[1], json.loads(sys.argv[2])
client = OpenAI(timeout=120, max_retries=0)
chat, tool = smoke["arithmetic"], smoke["tool-call"]
ask = dict(model=model, messages=[{"role": "user", "content": chat["prompt"]}], temperature=0, seed=0,
           max_completion_tokens=chat["max_completion_tokens"])
answer = client.chat.completions.create(**ask)
streamed = [c.choices[0].delta.content or "" for c in client.chat.completions.create(**ask, stream=True) if c.choices]
called = client.chat.completions.create(
    model=model, messages=[{"role": "user", "content": tool["prompt"]}], temperature=0, seed=0,
    max_completion_tokens=tool["max_completion_tokens"], tools=[{"type": "function", "function": tool["tool"]}],
    tool_choice="auto").choices[0].message.tool_calls or []
print(json.dumps({"base_url": str(client.base_url), "chat": answer.choices[0].message.content,
                  "chat_model": answer.model, "chunks": len(streamed), "streamed": "".join(streamed),
                  "calls": [{"name": c.function.name, "arguments": json.loads(c.function.arguments)} for c in called]}))
"""


def _client(h, fmt: str, out: Path) -> Path:
    rc, _, err, _ = h.run("client", fmt, "--out", str(out), timeout=60)
    assert rc == 0, err
    return out


def test_the_openai_sdk_reaches_the_demo_with_the_openai_env_file(shared_runtime, tmp_path):
    need_module("openai", "the OpenAI SDK is not installed (the test extra pins it)")
    h = shared_runtime
    h.require_ready()
    env_file = _client(h, "openai-env", tmp_path / "client.env")
    doc = json.loads(_client(h, "json", tmp_path / "client.json").read_text())
    assert doc["base_url"] == f"http://127.0.0.1:{SHARED_PORT}/v1" and doc["tool_calling"] is True, doc
    smoke = {t["name"]: t for t in yaml.safe_load(DEMO_RECIPE.read_text())["smoke"]}
    # Only what the file sets reaches the SDK: no OPENAI_* from this session's environment.
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    done = subprocess.run(["sh", "-c", '. "$1" && exec "$2" -c "$3" "$4" "$5"', "sh", str(env_file), sys.executable,
                           SDK_SCRIPT, doc["model"], json.dumps(smoke)], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["base_url"].rstrip("/") == doc["base_url"]
    assert got["chat"].strip() == smoke["arithmetic"]["expect"] and got["chat_model"] == doc["model"], got
    assert got["streamed"].strip() == smoke["arithmetic"]["expect"] and got["chunks"] > 1, got
    assert got["calls"] == [smoke["tool-call"]["expect_call"]], got


def test_opencode_reaches_the_demo_with_the_opencode_file(shared_runtime, tmp_path):
    need(os.access(OPENCODE, os.X_OK), f"opencode is not installed at {OPENCODE} (test.sh installs it from npm)")
    h = shared_runtime
    h.require_ready()
    config = _client(h, "opencode", tmp_path / "opencode.json")
    doc = json.loads(config.read_text())
    (provider, settings), = doc["provider"].items()
    limit = settings["models"]["tiny-moe"]["limit"]
    doc["agent"] = {"plain": {"mode": "primary", "prompt": "Answer the question.", "tools": {"*": False}}}
    config.write_text(json.dumps(doc))
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir(parents=True)
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "XDG_CONFIG_HOME": str(home / "config"),
           "XDG_DATA_HOME": str(home / "data"), "XDG_CACHE_HOME": str(home / "cache"),
           "XDG_STATE_HOME": str(home / "state"), "OPENCODE_CONFIG": str(config),
           "OPENCODE_DISABLE_PROJECT_CONFIG": "1", "OPENCODE_DISABLE_MODELS_FETCH": "1",
           "OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_CLAUDE_CODE": "1"}
    done = subprocess.run([str(OPENCODE), "run", "--pure", "--agent", "plain", "--format", "json", "-m", doc["model"],
                           "What is 17 times 19? Return only the integer."], capture_output=True, text=True, env=env,
                          cwd=project, timeout=180)
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    errors = [e for e in events if e.get("type") == "error"]
    finished = [e["part"] for e in events if e.get("type") == "step_finish"]
    assert done.returncode == 0 and not errors and finished, done.stdout[-3000:] + done.stderr[-2000:]
    assert provider == doc["model"].split("/")[0]
    tokens = finished[-1]["tokens"]
    # the demo read the prompt and answered within the output limit the file gives
    assert tokens["input"] > 0 and 0 < tokens["output"] <= limit["output"], finished[-1]
