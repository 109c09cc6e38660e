"""The smoke suite: real requests a served model must answer correctly before hostctl calls it
ready (and `hostctl smoke` runs on demand). A model that "technically loads" is not a service.

Kinds (recipe `smoke:` list): `models` (the served name is listed with max_model_len equal
to the recipe's context), `chat` (an exact answer at temperature 0, seed 0), `tool_call` (the
answer must come back as `tool_calls` with the expected function and arguments, i.e. through
the runtime's tool parser), `needle` (a fact planted in a long prompt of `tokens` tokens must
be retrieved). Each result carries its latency and, when it fails, expected vs got.

HTTP goes to loopback addresses only, through hostctl.service.apiclient: the listener proved to
be the runtime before the key or a prompt is sent, every answer read up to a cap.
"""

from __future__ import annotations

import ipaddress
import json
import time
from datetime import datetime, timezone
from urllib.parse import urlparse

import httpx

from hostctl.config import Recipe, SmokeTest
from hostctl.errors import InputError
from hostctl.service import apiclient
from hostctl.service.smoke_report import SmokeReport, SmokeResult
from hostctl.urldisplay import display

REQUEST_TIMEOUT_S = 120.0
NEEDLE_FILLER = "The grass is green and the sky is blue on a quiet afternoon in the valley. "


def check_loopback(url: str) -> str:
    """hostctl only talks HTTP to this machine; refuse anything else before sending a byte."""
    parsed = urlparse(url)
    host = parsed.hostname or ""
    if parsed.scheme not in ("http", "https") or not host:
        raise InputError(f"--url: expected http://127.0.0.1:PORT, got {display(url)!r}")
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise InputError(f"--url {display(url)}: hostctl sends requests to loopback addresses only (127.0.0.0/8, ::1)",
                         fix="run hostctl on the machine that serves the model and use http://127.0.0.1:PORT")
    return url.rstrip("/")


def check_models(client: httpx.Client, base: str, served_name: str, context: int) -> tuple[bool, str, str]:
    """(ok, expected, got) for /v1/models: the served name with max_model_len == context."""
    expected = f"{served_name} with max_model_len {context}"
    r = apiclient.request(client, "GET", f"{base}/v1/models", cap=apiclient.SMALL_CAP, what="/v1/models")
    r.raise_for_status()
    doc = r.json()
    models = [m for m in (doc.get("data") if isinstance(doc, dict) else None) or [] if isinstance(m, dict)]
    listed = ", ".join(f"{m.get('id')} (max_model_len {m.get('max_model_len')})" for m in models) or "no models"
    match = next((m for m in models if m.get("id") == served_name), None)
    ok = match is not None and match.get("max_model_len") == context
    return ok, expected, listed


def _chat(client: httpx.Client, base: str, served_name: str, test: SmokeTest, content: str, **extra) -> dict:
    body = {
        "model": served_name,
        "messages": [{"role": "user", "content": content}],
        "temperature": 0,
        "seed": 0,
        "max_completion_tokens": test.max_completion_tokens,
        **extra,
    }
    r = apiclient.request(client, "POST", f"{base}/v1/chat/completions", json=body, what="/v1/chat/completions",
                          cap=apiclient.completion_cap(test.max_completion_tokens))
    r.raise_for_status()
    doc = r.json()
    message = dict(doc["choices"][0]["message"])
    message["_prompt_tokens"] = (doc.get("usage") or {}).get("prompt_tokens")
    return message


def _short(text: str | None, limit: int = 120) -> str:
    if text is None:
        return "nothing"
    text = text.replace("\n", "\\n")
    return repr(text if len(text) <= limit else text[:limit] + "...")


def needle_prompt(client: httpx.Client, base: str, served_name: str, test: SmokeTest) -> str:
    """A prompt of about `tokens` tokens (counted by the server's own tokenizer) with the needle
    planted in the middle."""
    needle = f"The secret code is {test.expect}. "
    question = test.prompt or "What is the secret code? Answer with the code only."
    r = apiclient.request(client, "POST", f"{base}/tokenize", json={"model": served_name, "prompt": NEEDLE_FILLER},
                          cap=apiclient.tokenize_cap(NEEDLE_FILLER), what="/tokenize")
    r.raise_for_status()
    doc = r.json()
    per_filler = max(1, int(doc.get("count") or len(doc.get("tokens") or [])))
    repeats = max(2, (test.tokens or 1024) // per_filler)
    half = repeats // 2
    return NEEDLE_FILLER * half + needle + NEEDLE_FILLER * (repeats - half) + "\n" + question


def run_test(client: httpx.Client, base: str, recipe: Recipe, test: SmokeTest) -> SmokeResult:
    t0 = time.monotonic()
    res = SmokeResult(name=test.name, kind=test.kind, ok=False, latency_s=0.0)
    try:
        if test.kind == "models":
            res.ok, res.expected, res.got = check_models(client, base, recipe.served_name, recipe.context)
        elif test.kind == "chat":
            msg = _chat(client, base, recipe.served_name, test, test.prompt or "")
            got = (msg.get("content") or "").strip()
            res.expected, res.got = _short(test.expect), _short(got)
            res.ok = got == (test.expect or "").strip()
        elif test.kind == "tool_call":
            msg = _chat(client, base, recipe.served_name, test, test.prompt or "",
                        tools=[test.openai_tool()], tool_choice="auto")
            want = test.expect_call or {}
            res.expected = f"{want.get('name')}({json.dumps(want.get('arguments', {}), sort_keys=True)})"
            calls = msg.get("tool_calls") or []
            if not calls:
                res.got = f"no tool_calls; content {_short(msg.get('content'))}"
            else:
                fn = calls[0].get("function") or {}
                try:
                    args = json.loads(fn.get("arguments") or "{}")
                except json.JSONDecodeError:
                    args = fn.get("arguments")
                res.got = f"{fn.get('name')}({json.dumps(args, sort_keys=True)})"
                res.ok = fn.get("name") == want.get("name") and args == want.get("arguments", {})
        elif test.kind == "needle":
            prompt = needle_prompt(client, base, recipe.served_name, test)
            msg = _chat(client, base, recipe.served_name, test, prompt)
            got = (msg.get("content") or "").strip()
            res.expected, res.got = f"{test.expect!r} in the answer", _short(got)
            res.ok = str(test.expect) in got
            res.detail = f"prompt of {msg.get('_prompt_tokens') or '?'} tokens (asked for {test.tokens})"
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
        res.ok = False
        res.got = res.got or f"request failed: {exc.__class__.__name__}: {str(exc)[:200]}"
        res.expected = res.expected or "a valid response"
    res.latency_s = time.monotonic() - t0
    return res


def run_suite(base_url: str, recipe: Recipe, *, api_key_env: str | None = None,
              timeout_s: float = REQUEST_TIMEOUT_S) -> SmokeReport:
    base = check_loopback(base_url)
    report = SmokeReport(url=base, served_name=recipe.served_name,
                         started_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    tests = list(recipe.smoke) or [SmokeTest(name="models", kind="models")]
    with apiclient.client(timeout=timeout_s, headers=apiclient.key_headers(api_key_env)) as client:
        for test in tests:
            report.results.append(run_test(client, base, recipe, test))
    return report
