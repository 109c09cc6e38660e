"""hostctl's httpx client to the runtime's API on this machine (smoke, the `up` gate, bench,
the supervisor's /health): every connection proved to be the runtime's before anything is sent
(hostctl.service.apipeer), and every answer read up to a cap and parsed through
hostctl.safeload.parse_json.

Why caps: the answer comes from whatever holds the port, and `r.json()` reads it whole. What a
real answer can be: /health is empty and /v1/models lists a few served names (SMALL_CAP);
/metrics is the Prometheus text of a few dozen metrics (METRICS_CAP);
a completion is bounded by its max_tokens (completion_cap); /tokenize returns at most one id
per byte of the prompt (tokenize_cap). Past a cap the read stops (AnswerTooLarge), so an
endless body costs at most the cap in memory and time. Bodies are asked for and read
uncompressed (`Accept-Encoding: identity`, raw bytes): a compressed answer could expand past
any cap in one chunk.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import httpcore
import httpx

from hostctl.errors import InputError
from hostctl.safeload import parse_json
from hostctl.service import apipeer

SMALL_CAP = 1024 * 1024
# vLLM's /metrics: ~40 families, histograms with ~20 buckets per engine and model; tens of KiB for
# one engine, room for many.
METRICS_CAP = 8 * 1024 * 1024
# A generated token is a few bytes of text; JSON escapes (\uXXXX) and the per-chunk envelope of
# a stream (~200 bytes per token) stay far below 2 KiB a token.
PER_TOKEN = 2048
PER_PROMPT_BYTE = 16  # a token id and its separator ("123456, ") per byte of prompt, at most


def completion_cap(max_tokens: int | None) -> int:
    return SMALL_CAP + PER_TOKEN * max(0, int(max_tokens or 0))


def tokenize_cap(prompt: str) -> int:
    return SMALL_CAP + PER_PROMPT_BYTE * len(prompt.encode("utf-8", "replace"))


class BadAnswer(ValueError):
    """The API answered something that is not a usable answer (too large, not JSON)."""


class AnswerTooLarge(BadAnswer):
    pass


class _CheckedBackend(httpcore.NetworkBackend):
    """httpcore's own sockets, with apipeer.check between the handshake and the first byte."""

    def __init__(self) -> None:
        self._inner = httpcore.SyncBackend()

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        stream = self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        try:
            apipeer.check(stream.get_extra_info("socket"))
        except BaseException:
            stream.close()
            raise
        return stream

    def connect_unix_socket(self, path, timeout=None, socket_options=None):
        return self._inner.connect_unix_socket(path, timeout, socket_options)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class _Transport(httpx.HTTPTransport):
    def __init__(self, limits: httpx.Limits) -> None:
        super().__init__(trust_env=False, limits=limits)
        # httpx 0.28 (pinned in pyproject.toml) takes no network backend, so the pool it built is
        # replaced by the same pool over the checked backend (plain HTTP: no TLS context).
        self._pool = httpcore.ConnectionPool(max_connections=limits.max_connections,
                                             max_keepalive_connections=limits.max_keepalive_connections,
                                             keepalive_expiry=limits.keepalive_expiry,
                                             network_backend=_CheckedBackend())


def key_headers(api_key_env: str | None) -> dict[str, str]:
    """The Authorization header for the key in the variable api_key_env names (none when unset)."""
    key = os.environ.get(api_key_env) if api_key_env else None
    return {"Authorization": f"Bearer {key}"} if key else {}


def client(*, timeout: float, headers: dict[str, str] | None = None,
           limits: httpx.Limits = httpx.Limits(max_connections=10, max_keepalive_connections=10)) -> httpx.Client:
    return httpx.Client(timeout=timeout, headers={"Accept-Encoding": "identity", **(headers or {})},
                        trust_env=False, transport=_Transport(limits))


def _chunks(r: httpx.Response, cap: int, what: str) -> Iterator[bytes]:
    encoding = r.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise BadAnswer(f"{what}: the answer is {encoding}-encoded; hostctl asked for it uncompressed")
    total = 0
    for chunk in r.iter_raw():
        total += len(chunk)
        if total > cap:
            raise AnswerTooLarge(f"{what}: the answer is larger than {cap} bytes (hostctl's cap for it); "
                                 "stopped reading")
        yield chunk


class Answer:
    def __init__(self, status: int, body: bytes, what: str):
        self.status_code, self.body, self.what = status, body, what

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def json(self) -> Any:
        try:
            return parse_json(self.text, self.what)
        except InputError as exc:
            raise BadAnswer(exc.message) from None

    def raise_for_status(self) -> None:
        if self.status_code >= 400:
            raise BadAnswer(f"{self.what}: HTTP {self.status_code}: {self.text[:300]}")


def request(c: httpx.Client, method: str, url: str, *, cap: int, what: str, **kw) -> Answer:
    """One request; the whole answer read, up to `cap` bytes."""
    with c.stream(method, url, **kw) as r:
        return Answer(r.status_code, b"".join(_chunks(r, cap, what)), what)


def lines(r: httpx.Response, cap: int, what: str) -> Iterator[str]:
    """The lines of a streamed answer (server-sent events), the whole stream held to `cap` bytes."""
    held: list[bytes] = []  # the current line's pieces: each chunk is split once, not the whole line again
    for chunk in _chunks(r, cap, what):
        *done, rest = chunk.split(b"\n")
        for i, piece in enumerate(done):
            line = b"".join(held) + piece if i == 0 else piece
            held = []
            yield line.rstrip(b"\r").decode("utf-8", "replace")
        held.append(rest)
    tail = b"".join(held)
    if tail:
        yield tail.rstrip(b"\r").decode("utf-8", "replace")
