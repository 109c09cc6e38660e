"""The probes: what each bench probe kind measures, and how. Every probe returns its raw samples
next to its aggregates (aggregates are derived, never the only record), and says `ok`, `failed`
or `skipped` with the reason. A probe that cannot fit the served context, or needs what hostctl
does not have, is skipped, never failed and never dropped.

  decode        one short prompt, greedy, ignore_eos, `max_tokens` out; 1 warm-up then `runs` runs;
                output tok/s per run (completion tokens / wall time), median, min, max, spread
                and how many distinct outputs (greedy is not bit-stable on every runtime)
  batch_decode  aggregate output tok/s at each concurrency, measured by vLLM's own `vllm bench
                serve` run from the runtime image (hostctl.bench.vllm_bench)
  prefill       a unique prompt per run (`words` filler words, or `context_frac` of the context in
                tokens), 1 output token, streamed: time to the first token and prompt tok/s
  needle        a random code word at `depth` inside filler of `sizes_words` words, else `sizes_frac`
                of the context (in tokens, through the chat template); pass = the exact code back
  arithmetic    hostctl's five questions (hostctl/bench/text.py); score = exact integers
  coherence     hostctl's open prompts; pass = every answer non-empty, not a loop, and not one
                answer to all of them; the texts are kept
  boundary      `concurrency` (default: max_num_seqs) requests at once at the exact boundary:
                input = context - output_tokens (token ids from the server's /tokenize);
                pass = every request got exactly that input and that many output tokens
  quality       vLLM-MoET's dataset evals: skipped, naming the dataset, the tool and the baseline that
                are missing (they need llm-inference-bench, its datasets and vLLM-MoET's baselines)
"""

from __future__ import annotations

import hashlib
import random
import re
import secrets
import statistics
import threading
import time
from collections.abc import Callable

from hostctl.bench import text
from hostctl.bench.client import Api, ApiError
from hostctl.bench.suites import ProbeSpec

Say = Callable[[str], None]


class Skip(Exception):
    """This probe (or case) cannot run here; the message says why."""


class ProbeContext:
    """What a probe works with: the client, the served context and where to say what it does (a
    plain class: it holds the client and callables)."""

    def __init__(self, *, api: Api, context: int, max_num_seqs: int | None, say: Say,
                 batch_runner: Callable[..., dict] | None = None, seed: int | None = None) -> None:
        self.api = api
        self.context = context  # the served context (max_model_len)
        self.max_num_seqs = max_num_seqs
        self.say = say
        self.batch_runner = batch_runner  # vllm bench serve (hostctl.bench.vllm_bench)
        self.seed = secrets.randbits(32) if seed is None else seed


def _median(xs: list[float]) -> float | None:
    return round(statistics.median(xs), 3) if xs else None


def _fits(ctx: ProbeContext, prompt_tokens: int, max_tokens: int, what: str) -> None:
    if prompt_tokens + max_tokens > ctx.context:
        raise Skip(f"{what}: {prompt_tokens:,} prompt + {max_tokens:,} output tokens do not fit the served context "
                   f"of {ctx.context:,} tokens")


def _filler_ids(ctx: ProbeContext, rng: random.Random, tokens: int) -> list[int]:
    """At least `tokens` token ids of filler, counted by the server's tokenizer."""
    words = max(16, tokens)
    while True:
        ids = ctx.api.tokenize(" ".join(text.filler(rng, words)))
        if len(ids) >= tokens:
            return ids[:tokens]
        words = int(words * (tokens / max(1, len(ids))) * 1.1) + 16


# ---------------------------------------------------------------- decode


def decode(ctx: ProbeContext, spec: ProbeSpec) -> dict:
    runs, max_tokens = int(spec.params.get("runs", 5)), int(spec.params.get("max_tokens", 512))
    prompt_tokens = len(ctx.api.tokenize(text.DECODE_PROMPT))
    _fits(ctx, prompt_tokens, max_tokens, "decode")
    ctx.api.completion(text.DECODE_PROMPT, max_tokens)  # warm-up, dropped
    samples, tokens, walls, digests = [], [], [], []
    for i in range(runs):
        r = ctx.api.completion(text.DECODE_PROMPT, max_tokens)
        n = int(r.usage.get("completion_tokens") or 0)
        samples.append(round(n / r.wall_s, 2) if r.wall_s > 0 else 0.0)
        tokens.append(n)
        walls.append(round(r.wall_s, 4))
        digests.append(hashlib.sha1(r.text.encode()).hexdigest()[:10])
        ctx.say(f"decode run {i + 1}/{runs}: {samples[-1]:.1f} tok/s")
    med = statistics.median(samples)
    return {"ok": all(n > 0 for n in tokens), "samples_tok_s": samples, "completion_tokens": tokens, "wall_s": walls,
            "median_tok_s": round(med, 2), "min_tok_s": min(samples), "max_tok_s": max(samples),
            "spread_pct": round((max(samples) - min(samples)) / med * 100, 1) if med else None,
            "distinct_outputs": f"{len(set(digests))}/{len(digests)}", "prompt_tokens": prompt_tokens,
            "max_tokens": max_tokens}


# ---------------------------------------------------------------- batch decode (vllm bench serve)


def batch_decode(ctx: ProbeContext, spec: ProbeSpec) -> dict:
    levels = [int(c) for c in spec.params.get("concurrency", [1, 4, 8])]
    max_tokens = int(spec.params.get("max_tokens", 384))
    runs = int(spec.params.get("runs", 3))
    input_tokens = int(spec.params.get("input_tokens", 32))
    _fits(ctx, input_tokens, max_tokens, "batch_decode")
    if ctx.batch_runner is None:
        raise Skip("batch_decode runs vLLM's `vllm bench serve` from the runtime image; no image is known for this "
                   "endpoint")
    ctx.say(f"batch_decode: vllm bench serve at concurrency {', '.join(map(str, levels))}")
    out = ctx.batch_runner(levels=levels, input_tokens=input_tokens, output_tokens=max_tokens, runs=runs)
    return {"ok": bool(out["levels"]) and all(v.get("completed") for v in out["levels"].values()), **out,
            "max_tokens": max_tokens, "input_tokens": input_tokens, "runs": runs}


# ---------------------------------------------------------------- prefill


def prefill(ctx: ProbeContext, spec: ProbeSpec) -> dict:
    runs = int(spec.params.get("runs", 3))
    words = spec.params.get("words")
    frac = spec.params.get("context_frac")
    if words is None and frac is None:
        words = 8000
    rng = random.Random(ctx.seed ^ 0xC0FFEE)
    if words is not None:
        words = int(words)
        if words >= ctx.context:
            raise Skip(f"prefill: {words:,} words need at least {words:,} tokens; the served context is "
                       f"{ctx.context:,}")
    else:
        target = int(float(frac) * ctx.context)
        _fits(ctx, target, 1, f"prefill at {frac:g} of the context")
    samples = []
    for i in range(runs):
        # A new random prompt each run: the prefix cache must not answer for the model.
        if words is not None:
            prompt: str | list[int] = " ".join(text.filler(rng, words))
            n = len(ctx.api.tokenize(prompt))
            _fits(ctx, n, 1, f"prefill of {words:,} words")
        else:
            prompt = _filler_ids(ctx, rng, target)
        r = ctx.api.completion_streamed(prompt, 1, ignore_eos=False)
        pt = int(r.usage.get("prompt_tokens") or 0)
        samples.append({"prompt_tokens": pt, "ttft_s": round(r.ttft_s or r.wall_s, 4), "wall_s": round(r.wall_s, 4),
                        "tok_s": round(pt / (r.ttft_s or r.wall_s), 1) if pt else 0.0})
        ctx.say(f"prefill run {i + 1}/{runs}: {pt:,} tokens, first token after {samples[-1]['ttft_s']:.2f} s")
    return {"ok": all(s["prompt_tokens"] > 0 for s in samples), "samples": samples,
            "median_tok_s": _median([s["tok_s"] for s in samples]),
            "median_ttft_s": _median([s["ttft_s"] for s in samples]),
            "words": words, "context_frac": frac}


# ---------------------------------------------------------------- needle


def _needle_message(ctx: ProbeContext, rng: random.Random, depth: float, code: str, *, words: int | None = None,
                    target: int | None = None) -> tuple[str, int, int]:
    """(message, filler words, tokens through the chat template). With a target, the filler is
    sized so the templated prompt is as close to `target` tokens as the words allow, never over."""
    filler_pool = text.filler(rng, words if words is not None else max(16, target or 16))
    if words is not None:
        msg = text.needle_text(filler_pool, depth, code)
        return msg, words, ctx.api.chat_tokens(msg)
    assert target is not None
    n = min(len(filler_pool), target)
    best = None
    for _ in range(8):
        while len(filler_pool) < n:
            filler_pool += text.filler(rng, n - len(filler_pool))
        msg = text.needle_text(filler_pool[:n], depth, code)
        count = ctx.api.chat_tokens(msg)
        if count <= target and (best is None or count > best[2]):
            best = (msg, n, count)
        if count == target or (count < target and best is not None and target - count <= max(1, target // 500)):
            break
        per_word = max(count - 20, 1) / max(n, 1)
        n = max(1, n + int((target - count) / per_word) - (1 if count > target else 0))
    if best is None:
        bare = ctx.api.chat_tokens(text.needle_text([], depth, code))
        raise Skip(f"a needle prompt of {target:,} tokens cannot be built: the needle sentence and question alone "
                   f"take {bare:,} tokens")
    return best


def needle(ctx: ProbeContext, spec: ProbeSpec) -> dict:
    depth = float(spec.params.get("depth", 0.5))
    max_tokens = int(spec.params.get("max_tokens", 512))
    sizes_words = spec.params.get("sizes_words")
    sizes_frac = spec.params.get("sizes_frac")
    # As vLLM-MoET (bench/runner/probes.py: needle): sizes_words, when given, are the sizes and
    # sizes_frac is not read; without either the sizes are 3% and 50% of the context.
    if sizes_words:
        plan = [("words", int(w)) for w in sizes_words]
    else:
        plan = [("frac", float(f)) for f in (sizes_frac or [0.03, 0.5])]
    rng = random.Random(ctx.seed ^ 0x5EED)
    cases = []
    for i, (how, size) in enumerate(plan):
        label = f"{size:,} words" if how == "words" else f"{size:g} of the context"
        case = {"size": size, "size_unit": "words" if how == "words" else "context_frac", "depth": depth}
        t0 = time.perf_counter()
        try:
            code = text.random_code(rng)
            if how == "words":
                if size >= ctx.context:
                    raise Skip(f"{size:,} words need at least {size:,} tokens; the served context is {ctx.context:,}")
                msg, n_words, count = _needle_message(ctx, rng, depth, code, words=size)
            else:
                target = int(size * ctx.context)
                _fits(ctx, target, max_tokens, f"a needle at {size:g} of the context")
                msg, n_words, count = _needle_message(ctx, rng, depth, code, target=target)
                case["target_tokens"] = target
            _fits(ctx, count, max_tokens, f"a needle of {label}")
            r = ctx.api.chat(msg, max_tokens)
            reply = r.text.strip()
            ok = re.search(rf"\b{re.escape(code)}\b", reply) is not None
            case.update({"words": n_words, "prompt_tokens": int(r.usage.get("prompt_tokens") or count), "code": code,
                         "reply": reply[:200], "pass": ok, "seconds": round(r.wall_s, 3)})
            ctx.say(f"needle {i + 1}/{len(plan)} ({label}, {case['prompt_tokens']:,} tokens): "
                    f"{'pass' if ok else 'FAIL'}")
        except Skip as exc:
            case.update({"pass": None, "skipped": str(exc)})
            ctx.say(f"needle {i + 1}/{len(plan)} ({label}): skipped: {exc}")
        except ApiError as exc:
            case.update({"pass": False, "error": str(exc), "seconds": round(time.perf_counter() - t0, 3)})
            ctx.say(f"needle {i + 1}/{len(plan)} ({label}): FAIL: {exc}")
        cases.append(case)
    ran = [c for c in cases if c["pass"] is not None]
    if not ran:
        raise Skip("no needle size fits the served context: " + "; ".join(c["skipped"] for c in cases))
    return {"ok": all(c["pass"] for c in ran), "cases": cases, "all_pass": all(c["pass"] for c in ran),
            "passed": sum(1 for c in ran if c["pass"]), "ran": len(ran), "skipped_cases": len(cases) - len(ran),
            "max_tokens": max_tokens}


# ---------------------------------------------------------------- arithmetic, coherence


def arithmetic(ctx: ProbeContext, spec: ProbeSpec) -> dict:
    min_score = int(spec.params.get("min_score", 1))
    # vLLM-MoET's own budget (bench/runner/probes.py: arithmetic): a reasoning model thinks first;
    # a smaller budget fails a model that would answer right. Capped below by the context's room.
    max_tokens = int(spec.params.get("max_tokens", 4096))
    rows = []
    for i, (q, gold) in enumerate(text.ARITHMETIC):
        room = ctx.context - ctx.api.chat_tokens(q)
        if room < 8:
            raise Skip(f"arithmetic: a question leaves {room} tokens for the answer in a {ctx.context}-token context")
        r = ctx.api.chat(q, min(max_tokens, room))
        content = r.text.strip()
        nums = re.findall(r"-?\d+", content.replace(",", ""))
        got = int(nums[-1]) if nums else None
        rows.append({"question": q, "gold": gold, "got": got, "ok": got == gold, "reply": content[:200],
                     "seconds": round(r.wall_s, 3)})
        ctx.say(f"arithmetic {i + 1}/{len(text.ARITHMETIC)}: {'ok' if got == gold else 'wrong'}")
    score = sum(r["ok"] for r in rows)
    return {"ok": score >= min_score, "score": score, "of": len(rows), "min_score": min_score, "rows": rows}


def degenerate(s: str) -> bool:
    """A cheap loop detector: the answer ends in one short chunk repeated back to back."""
    if len(s) < 48:
        return False
    for w in (1, 2, 3, 4, 6, 8, 12, 16):
        chunk = s[-w:]
        if chunk.strip() and s.endswith(chunk * min(8, len(s) // w)):
            return True
    return False


def coherence(ctx: ProbeContext, spec: ProbeSpec) -> dict:
    max_tokens = int(spec.params.get("max_tokens", 128))
    rows = []
    for i, prompt in enumerate(text.COHERENCE):
        r = ctx.api.chat(prompt, max_tokens)
        answer = r.text
        loop = degenerate(answer)
        rows.append({"prompt": prompt, "text": answer, "empty": not answer.strip(), "degenerate": loop,
                     "completion_tokens": int(r.usage.get("completion_tokens") or 0), "seconds": round(r.wall_s, 3)})
        ctx.say(f"coherence {i + 1}/{len(text.COHERENCE)}: {'loop' if loop else ('empty' if not answer.strip() else 'ok')}")
    return judge_coherence(rows)


def judge_coherence(rows: list[dict]) -> dict:
    bad = sum(1 for r in rows if r["empty"] or r["degenerate"])
    # One answer to every question is degenerate too (a model that says "323" to everything).
    same = len(rows) > 1 and len({r["text"].strip() for r in rows}) == 1
    ok = bad == 0 and not same
    return {"ok": ok, "pass": ok, "degenerate": sum(r["degenerate"] for r in rows),
            "empty": sum(r["empty"] for r in rows), "same_answer_to_all": same, "of": len(rows), "rows": rows}


# ---------------------------------------------------------------- boundary


def boundary(ctx: ProbeContext, spec: ProbeSpec) -> dict:
    out_tokens = int(spec.params.get("output_tokens", 128))
    n = spec.params.get("concurrency") or ctx.max_num_seqs
    if not n:
        raise Skip("boundary: the recipe sets no --max-num-seqs and the probe no concurrency")
    n = int(n)
    in_tokens = ctx.context - out_tokens
    if in_tokens < 1:
        raise Skip(f"boundary: {out_tokens} output tokens leave no input in a {ctx.context}-token context")
    rng = random.Random(ctx.seed ^ 0xB0B)
    # A distinct prompt per request: a shared prefix would let the prefix cache hold one copy.
    prompts = [_filler_ids(ctx, rng, in_tokens) for _ in range(n)]
    results: list[dict | None] = [None] * n
    barrier = threading.Barrier(n)

    def one(i: int) -> None:
        row: dict = {"request": i, "input_tokens": in_tokens}
        try:
            barrier.wait(timeout=60)
            row["start_s"] = time.perf_counter()
            r = ctx.api.completion(prompts[i], out_tokens)
            row["end_s"] = time.perf_counter()
            row.update({"prompt_tokens": int(r.usage.get("prompt_tokens") or 0),
                        "completion_tokens": int(r.usage.get("completion_tokens") or 0),
                        "finish_reason": r.finish_reason, "wall_s": round(r.wall_s, 3)})
            row["pass"] = row["prompt_tokens"] == in_tokens and row["completion_tokens"] == out_tokens
        except (ApiError, threading.BrokenBarrierError) as exc:
            row.update({"pass": False, "error": str(exc)})
        results[i] = row

    ctx.say(f"boundary: {n} request(s) at once of {in_tokens:,} + {out_tokens} tokens")
    threads = [threading.Thread(target=one, args=(i,), daemon=True, name=f"hostctl-boundary-{i}") for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rows = [r or {"pass": False, "error": "no result"} for r in results]
    starts = [r["start_s"] for r in rows if "start_s" in r]
    ends = [r["end_s"] for r in rows if "end_s" in r]
    overlapped = bool(starts and ends and len(ends) == n and max(starts) < min(ends))
    t0 = min(starts) if starts else 0.0
    for r in rows:
        for k in ("start_s", "end_s"):
            if k in r:
                r[k] = round(r[k] - t0, 3)
    ok = all(r["pass"] for r in rows)
    return {"ok": ok, "pass": ok, "concurrency": n, "input_tokens": in_tokens, "output_tokens": out_tokens,
            "overlapped": overlapped, "requests": rows}


def quality(ctx: ProbeContext, spec: ProbeSpec) -> dict:
    # Said per probe, naming what is missing, so a skipped quality probe is never read as a pass.
    dataset = spec.params.get("profile") or "its"
    why = [f"needs llm-inference-bench (vLLM-MoET's quality tool) and the {dataset} dataset; hostctl has neither"]
    if spec.params.get("baseline"):
        why.append(f"its baseline {spec.params['baseline']} is an entry of vLLM-MoET's bench/baselines registry, "
                   "which hostctl does not have")
    raise Skip("quality: " + "; ".join(why) + ": run it with vLLM-MoET's bench/runner/bench.py")


PROBES: dict[str, Callable[[ProbeContext, ProbeSpec], dict]] = {
    "decode": decode, "batch_decode": batch_decode, "prefill": prefill, "needle": needle,
    "arithmetic": arithmetic, "coherence": coherence, "boundary": boundary, "quality": quality,
}
