"""What a client needs to reach the runtime, from the profile and recipe alone (`hostctl client`):
the base URL, the served name, the context, the most output to ask for, whether tool calling is
on, and the API key by reference (the variable runtime.api_key_env names); and the three documents
made of it: opencode's opencode.json, the OpenAI SDK's environment (sh) and hostctl.client/v1 JSON.

Pure: nothing here reads the host or the environment. The key itself, when the user asks for it,
comes in as an argument (hostctl/cli/client.py reads it and writes the file).
"""

from __future__ import annotations

import json
import shlex
from typing import TYPE_CHECKING

from pydantic import ConfigDict

from hostctl import serveflags
from hostctl.data import Data
from hostctl.service import identity

if TYPE_CHECKING:
    from hostctl.config import Config

SCHEMA = "hostctl.client/v1"
FORMATS = ("opencode", "openai-env", "json")
OPENCODE_SCHEMA = "https://opencode.ai/config.json"
# The AI SDK provider opencode talks to an OpenAI-compatible server through.
OPENCODE_NPM = "@ai-sdk/openai-compatible"
# With no cap in the recipe, a client may ask for a quarter of the context, at most 32K tokens: a
# request's prompt and output must fit the context together (vLLM cuts the output at what is left),
# and a client that reserves the output from its budget (opencode compacts its history once the
# prompt passes context - output) keeps three quarters for the prompt. 32K holds a long reasoning
# answer; opencode itself never asks for more than 32,000.
OUTPUT_SHARE = 4
OUTPUT_MAX = 32768
# What the SDK needs in OPENAI_API_KEY when the runtime checks none: it refuses to start with the
# variable unset, and a placeholder keeps a real OpenAI key in the caller's shell from being sent here.
NO_KEY = "none"
TOOL_SWITCHES = ("--enable-auto-tool-choice", "--no-enable-auto-tool-choice")


class ClientSettings(Data):
    model_config = ConfigDict(frozen=True)

    profile: str
    provider: str  # the runtime's Compose project: opencode's provider id, one per runtime on a host
    base_url: str
    served_name: str
    context: int
    max_output: int
    max_output_reason: str
    tool_calling: bool
    tool_calling_reason: str
    api_key_env: str | None


def output_cap(argv: list[str]) -> int | None:
    """The most tokens the server writes for any request, when the recipe says: max_new_tokens in
    --override-generation-config (vLLM 0.32 caps every request's max_tokens at it)."""
    given = serveflags.last(argv, ("--override-generation-config",))
    if given is None or not given[1]:
        return None
    try:
        value = json.loads(given[1])
    except ValueError:
        return None  # vLLM refuses it at start: no server to describe
    cap = value.get("max_new_tokens") if isinstance(value, dict) else None
    return cap if isinstance(cap, int) and not isinstance(cap, bool) and cap > 0 else None


def max_output(context: int, argv: list[str]) -> tuple[int, str]:
    """The most output tokens a client should ask for, with the reason."""
    cap = output_cap(argv)
    if cap is not None and cap < context:
        return cap, f"the recipe caps every answer at {cap} tokens (--override-generation-config max_new_tokens)"
    share = max(1, min(context // OUTPUT_SHARE, OUTPUT_MAX))
    return share, (f"a quarter of the {context}-token context (at most {OUTPUT_MAX}), the rest left to the prompt; "
                   "the recipe caps no answer below the context")


def tool_calling(argv: list[str]) -> tuple[bool, str]:
    """Whether the server parses tool calls (vLLM's --enable-auto-tool-choice, as its parser reads
    the recipe's serve_args), with the reason."""
    given = serveflags.last(argv, TOOL_SWITCHES)
    if given is not None and given[0] == TOOL_SWITCHES[0]:
        return True, "the recipe's serve_args turn on --enable-auto-tool-choice: the server returns tool calls"
    return False, ("the recipe's serve_args leave --enable-auto-tool-choice off: the server refuses requests that "
                   "let the model choose a tool, so a client must offer none")


def settings(config: Config) -> ClientSettings:
    rt = identity.of_config(config)
    recipe = config.recipe
    argv = recipe.args().argv()
    output, output_why = max_output(recipe.context, argv)
    tools, tools_why = tool_calling(argv)
    return ClientSettings(profile=config.profile.name, provider=rt.project, base_url=rt.endpoint + "/v1",
                          served_name=rt.served_name, context=recipe.context, max_output=output,
                          max_output_reason=output_why, tool_calling=tools, tool_calling_reason=tools_why,
                          api_key_env=rt.api_key_env)


def opencode(s: ClientSettings, key: str | None = None) -> str:
    """opencode.json: one provider (the runtime) with one model (the served name) and its limits;
    the key as opencode's own reference to the variable ({env:NAME}), or itself when given."""
    options: dict[str, str] = {"baseURL": s.base_url}
    if key is not None:
        options["apiKey"] = key
    elif s.api_key_env:
        options["apiKey"] = "{env:" + s.api_key_env + "}"
    model = {"name": s.served_name, "tool_call": s.tool_calling,
             "limit": {"context": s.context, "output": s.max_output}}
    doc = {"$schema": OPENCODE_SCHEMA,
           "provider": {s.provider: {"npm": OPENCODE_NPM, "name": f"hostctl {s.profile}", "options": options,
                                     "models": {s.served_name: model}}},
           "model": f"{s.provider}/{s.served_name}"}
    return json.dumps(doc, indent=2) + "\n"


def openai_env(s: ClientSettings, key: str | None = None) -> str:
    """sh lines that export the two variables the OpenAI SDK reads (OPENAI_BASE_URL, OPENAI_API_KEY),
    the rest as comments. The key is a reference to its variable, which must be set where the file
    is sourced (`${NAME:?...}` stops a script that runs without it), or itself when given."""
    if key is not None:
        key_value = shlex.quote(key)
    elif s.api_key_env:
        key_value = f'"${{{s.api_key_env}:?set {s.api_key_env} to the API key of the runtime}}"'
    else:
        key_value = shlex.quote(NO_KEY)
    lines = [
        f"# hostctl client openai-env: the OpenAI SDK's settings for the runtime of profile {s.profile}",
        "# use: . ./THIS-FILE, then run the program (the SDK reads OPENAI_BASE_URL and OPENAI_API_KEY)",
        f"# model (the served name): {s.served_name}",
        f"# context: {s.context} tokens; max output: {s.max_output} tokens ({s.max_output_reason})",
        f"# tool calling: {'on' if s.tool_calling else 'off'}",
    ]
    if key is None and not s.api_key_env:
        lines.append("# the runtime checks no key (the profile names no runtime.api_key_env), but the SDK needs one")
    lines += [f"export OPENAI_BASE_URL={shlex.quote(s.base_url)}", f"export OPENAI_API_KEY={key_value}"]
    return "\n".join(lines) + "\n"


def document(s: ClientSettings, key: str | None = None) -> dict:
    """hostctl.client/v1: every setting with the reasons for the two hostctl derives."""
    doc = {"schema": SCHEMA, "profile": s.profile, "base_url": s.base_url, "model": s.served_name,
           "context": s.context, "max_output": s.max_output, "tool_calling": s.tool_calling,
           "api_key_env": s.api_key_env,
           "reasons": {"max_output": s.max_output_reason, "tool_calling": s.tool_calling_reason}}
    if key is not None:
        doc["api_key"] = key
    return doc


def render(fmt: str, s: ClientSettings, key: str | None = None) -> str:
    """The document for one of FORMATS, as the file's text."""
    if fmt == "opencode":
        return opencode(s, key)
    if fmt == "openai-env":
        return openai_env(s, key)
    if fmt == "json":
        return json.dumps(document(s, key), indent=2) + "\n"
    raise ValueError(f"unknown client format {fmt!r}: one of {', '.join(FORMATS)}")
