"""The runtime's own /metrics (vLLM's Prometheus exposition) read into one RuntimeSample, and the
rates between two samples: what `status --watch` shows, what `hostctl metrics` exports, and the
counters supervision judges progress by (hostctl.service.liveness).

Read through prometheus_client's parser, imported here only. Each value is summed over its labels
(one series per engine and per model), but the KV cache's share, which is the fullest engine's; a series the server does not export is None, so a rate
that cannot be told (no speculative decoding, an older vLLM) is absent rather than zero.
"""

from __future__ import annotations

from pydantic import ConfigDict

from hostctl.data import Data

# vLLM's names (v1 engine). Counters carry _total in the exposition.
KV_CACHE_USAGE = "vllm:kv_cache_usage_perc"  # a fraction despite its name: 1 means the cache is full
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
PROMPT_TOKENS = "vllm:prompt_tokens_total"
GENERATION_TOKENS = "vllm:generation_tokens_total"
REQUEST_SUCCESS = "vllm:request_success_total"
ENGINE_STEPS = "vllm:iteration_tokens_total_count"  # one observation per engine step
PREFIX_HITS = "vllm:prefix_cache_hits_total"
PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
SPEC_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
SPEC_DRAFTED = "vllm:spec_decode_num_draft_tokens_total"
_FIELDS = {KV_CACHE_USAGE: "kv_cache_usage", RUNNING: "running", WAITING: "waiting", PROMPT_TOKENS: "prompt_tokens",
           GENERATION_TOKENS: "generation_tokens", REQUEST_SUCCESS: "requests_finished", ENGINE_STEPS: "engine_steps",
           PREFIX_HITS: "prefix_cache_hits", PREFIX_QUERIES: "prefix_cache_queries",
           SPEC_ACCEPTED: "spec_accepted_tokens", SPEC_DRAFTED: "spec_draft_tokens"}


class RuntimeSample(Data):
    """One reading of the runtime's /metrics; None: the server exports no such series."""

    model_config = ConfigDict(frozen=True)

    kv_cache_usage: float | None = None  # 0..1
    running: float | None = None
    waiting: float | None = None
    prompt_tokens: float | None = None
    generation_tokens: float | None = None
    requests_finished: float | None = None
    engine_steps: float | None = None
    prefix_cache_hits: float | None = None
    prefix_cache_queries: float | None = None
    spec_accepted_tokens: float | None = None
    spec_draft_tokens: float | None = None


def parse(text: str) -> RuntimeSample | None:
    """The sample in a Prometheus exposition, or None when it holds none of vLLM's series (another
    server, or metrics turned off). ValueError: not the exposition format."""
    from prometheus_client.parser import text_string_to_metric_families

    sums: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name in _FIELDS:
                field = _FIELDS[s.name]
                # a fraction per engine: the fullest one is what saturates (a sum could pass 1)
                combine = max if s.name == KV_CACHE_USAGE else (lambda a, b: a + b)
                sums[field] = s.value if field not in sums else combine(sums[field], s.value)
    return RuntimeSample(**sums) if sums else None


class RuntimeRates(Data):
    """What happened between two samples; None where a series is missing or nothing was asked."""

    model_config = ConfigDict(frozen=True)

    prompt_tokens_per_s: float | None = None
    generation_tokens_per_s: float | None = None
    prefix_cache_hit_rate: float | None = None  # hits / queries, in tokens
    spec_acceptance_rate: float | None = None  # accepted / drafted tokens


def _delta(a: float | None, b: float | None) -> float | None:
    # a counter that went down is a restarted server: no rate across it
    return None if a is None or b is None or b < a else b - a


def _ratio(num: float | None, den: float | None) -> float | None:
    return None if num is None or not den else num / den


def rates(before: RuntimeSample, after: RuntimeSample, seconds: float) -> RuntimeRates:
    if seconds <= 0:
        return RuntimeRates()
    prompt, gen = _delta(before.prompt_tokens, after.prompt_tokens), _delta(before.generation_tokens, after.generation_tokens)
    return RuntimeRates(
        prompt_tokens_per_s=None if prompt is None else prompt / seconds,
        generation_tokens_per_s=None if gen is None else gen / seconds,
        prefix_cache_hit_rate=_ratio(_delta(before.prefix_cache_hits, after.prefix_cache_hits),
                                     _delta(before.prefix_cache_queries, after.prefix_cache_queries)),
        spec_acceptance_rate=_ratio(_delta(before.spec_accepted_tokens, after.spec_accepted_tokens),
                                    _delta(before.spec_draft_tokens, after.spec_draft_tokens)),
    )


def read(client, endpoint: str) -> RuntimeSample | None:
    """GET {endpoint}/metrics through a checked client (hostctl.service.apiclient); None when it
    cannot be read or holds no vLLM series."""
    import httpx

    from hostctl.service import apiclient, apipeer

    try:
        answer = apiclient.request(client, "GET", endpoint.rstrip("/") + "/metrics", cap=apiclient.METRICS_CAP,
                                   what="/metrics")
    except (httpx.HTTPError, apiclient.BadAnswer, apipeer.ListenerRefused):
        return None
    if answer.status_code != 200:
        return None
    try:
        return parse(answer.text)
    except ValueError:  # not the exposition format
        return None
