"""The service's OpenAI-compatible API as the probes use it: completions (timed, optionally
streamed for the time to the first token), chat completions, and the server's own tokenizer
(/tokenize), which is how every length hostctl reports or aims for is counted.

Loopback only (hostctl.service.smoke.check_loopback); one connection pool per run, through
hostctl.service.apiclient: each connection proved to be the runtime's before the key is sent,
each answer read up to a cap set by the request's max_tokens or prompt.
"""

from __future__ import annotations

import time

import httpx

from pydantic import ConfigDict

from hostctl.data import Data
from hostctl.service import apiclient
from hostctl.service.smoke import check_loopback

REQUEST_TIMEOUT_S = 1800.0  # a 400K-token prefill on a slow host takes minutes


class Timed(Data):
    model_config = ConfigDict(defer_build=False)

    doc: dict
    wall_s: float
    ttft_s: float | None = None  # streamed requests only

    @property
    def usage(self) -> dict:
        return self.doc.get("usage") or {}

    @property
    def text(self) -> str:
        choice = (self.doc.get("choices") or [{}])[0]
        if "message" in choice:
            return (choice["message"] or {}).get("content") or ""
        return choice.get("text") or ""

    @property
    def finish_reason(self) -> str | None:
        return (self.doc.get("choices") or [{}])[0].get("finish_reason")


class ApiError(Exception):
    """The server answered with an error (status and its message), or not at all."""


class Api:
    def __init__(self, base_url: str, model: str, *, headers: dict | None = None,
                 timeout_s: float = REQUEST_TIMEOUT_S):
        self.base = check_loopback(base_url)
        self.model = model
        self._http = apiclient.client(timeout=timeout_s, headers=headers,
                                      limits=httpx.Limits(max_connections=64, max_keepalive_connections=64))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Api":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _post(self, path: str, body: dict, cap: int) -> dict:
        try:
            r = apiclient.request(self._http, "POST", self.base + path, json=body, cap=cap, what=path)
            if r.status_code >= 400:
                raise ApiError(f"{path}: HTTP {r.status_code}: {r.text[:300]}")
            doc = r.json()
        except httpx.HTTPError as exc:
            raise ApiError(f"{path}: {exc.__class__.__name__}: {str(exc)[:200]}") from exc
        except apiclient.BadAnswer as exc:
            raise ApiError(str(exc)) from exc
        if not isinstance(doc, dict):
            raise ApiError(f"{path}: expected a JSON object, got {type(doc).__name__}")
        return doc

    def completion(self, prompt: str | list[int], max_tokens: int, *, ignore_eos: bool = True, **extra) -> Timed:
        body = {"model": self.model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                "ignore_eos": ignore_eos, **extra}
        t0 = time.perf_counter()
        doc = self._post("/v1/completions", body, apiclient.completion_cap(max_tokens))
        return Timed(doc=doc, wall_s=time.perf_counter() - t0)

    def completion_streamed(self, prompt: str | list[int], max_tokens: int, *, ignore_eos: bool = True) -> Timed:
        """Time to the first generated token and to the last one; usage from the final chunk."""
        body = {"model": self.model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                "ignore_eos": ignore_eos, "stream": True, "stream_options": {"include_usage": True}}
        t0 = time.perf_counter()
        ttft = None
        usage: dict = {}
        text = []
        finish = None
        try:
            with self._http.stream("POST", self.base + "/v1/completions", json=body) as r:
                cap = apiclient.completion_cap(max_tokens)
                if r.status_code >= 400:
                    said = "\n".join(apiclient.lines(r, apiclient.SMALL_CAP, "/v1/completions"))[:300]
                    raise ApiError(f"/v1/completions: HTTP {r.status_code}: {said}")
                for line in apiclient.lines(r, cap, "/v1/completions"):
                    if not line.startswith("data: "):
                        continue
                    data = line[6:]
                    if data.strip() == "[DONE]":
                        break
                    chunk = apiclient.Answer(200, data.encode(), "/v1/completions (a streamed chunk)").json()
                    if not isinstance(chunk, dict):
                        continue
                    for ch in chunk.get("choices") or []:
                        if ch.get("text") and ttft is None:
                            ttft = time.perf_counter() - t0
                        text.append(ch.get("text") or "")
                        finish = ch.get("finish_reason") or finish
                    if chunk.get("usage"):
                        usage = chunk["usage"]
        except httpx.HTTPError as exc:
            raise ApiError(f"/v1/completions: {exc.__class__.__name__}: {str(exc)[:200]}") from exc
        except apiclient.BadAnswer as exc:
            raise ApiError(str(exc)) from exc
        wall = time.perf_counter() - t0
        doc = {"choices": [{"text": "".join(text), "finish_reason": finish}], "usage": usage}
        return Timed(doc=doc, wall_s=wall, ttft_s=ttft if ttft is not None else wall)

    def chat(self, content: str, max_tokens: int, **extra) -> Timed:
        body = {"model": self.model, "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
                "temperature": 0, **extra}
        t0 = time.perf_counter()
        doc = self._post("/v1/chat/completions", body, apiclient.completion_cap(max_tokens))
        return Timed(doc=doc, wall_s=time.perf_counter() - t0)

    def tokenize(self, text: str) -> list[int]:
        """Token ids of a raw prompt, as the completions endpoint would see it."""
        doc = self._post("/tokenize", {"model": self.model, "prompt": text, "add_special_tokens": True},
                         apiclient.tokenize_cap(text))
        return list(doc.get("tokens") or [])

    def chat_tokens(self, content: str) -> int:
        """How many tokens this user message becomes through the server's chat template."""
        doc = self._post("/tokenize", {"model": self.model, "messages": [{"role": "user", "content": content}],
                                       "add_generation_prompt": True}, apiclient.tokenize_cap(content))
        return int(doc.get("count") or len(doc.get("tokens") or []))
