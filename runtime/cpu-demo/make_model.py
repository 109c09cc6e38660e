"""Make the CPU demo's models at image build time (nothing is downloaded).

Writes two checkpoints of one tiny Mixtral-style MoE (hidden 256, 2 layers, 4 experts,
head_dim 64) that share a tokenizer and a chat template:

  <out>/tiny-moe         trained for a few seconds (seeded, deterministic) to answer the
                         recipe's smoke prompts through the real chat template: the exact
                         arithmetic answer, and a hermes-style <tool_call> for the tool test
  <out>/tiny-moe-random  the same initial weights, untrained: answers gibberish, so the smoke
                         gate's negative case runs on the very same architecture and runtime

The tokenizer is a byte-level BPE learned here from the training texts; `<tool_call>` and
`</tool_call>` are single (non-special) tokens, as vLLM's hermes tool parser requires. The
chat template renders tools, so a request with `tools` gets a different prompt than one
without -- and the model learns to call the tool only when it is offered.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

SEED = 0
MAX_STEPS = 1500
SPECIALS = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
TOOL_TOKENS = ["<tool_call>", "</tool_call>"]
EOS = "<|im_end|>"

# ChatML-style. Tools are rendered by name and parameter names only: vLLM passes each tool as
# its request model dumped to a dict (with nulls for unset fields), so rendering the whole
# dict would make the prompt depend on that serialisation rather than on the tool itself.
CHAT_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\nTools you can call:"
    "{%- for t in tools %} {{ t.function.name }}("
    "{%- for k in ((t.function.parameters or {}).get('properties') or {}) %}{{ k }}{% if not loop.last %}, {% endif %}{% endfor %})"
    "{%- endfor %}\nCall one as <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>.<|im_end|>\n{% endif %}"
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content or '' }}<|im_end|>\n{% endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

FILLER = [
    "The quick brown fox jumps over the lazy dog. 0123456789 + - * / = ? ! , . : ; ' \" ( ) [ ] { }",
    "Return only the integer. What is the answer? Use the tool. The weather in the city is sunny.",
]


def examples(smoke: list[dict]) -> list[dict]:
    """(messages, tools, completion) for every smoke test that expects an answer."""
    out = []
    for t in smoke:
        kind = t.get("kind")
        if kind == "chat" and t.get("expect") is not None:
            out.append({"name": t["name"], "messages": [{"role": "user", "content": t["prompt"]}], "tools": None,
                        "completion": str(t["expect"])})
        elif kind == "tool_call" and t.get("expect_call"):
            tool = t["tool"] if "function" in t["tool"] else {"type": "function", "function": t["tool"]}
            call = {"name": t["expect_call"]["name"], "arguments": t["expect_call"].get("arguments", {})}
            out.append({"name": t["name"], "messages": [{"role": "user", "content": t["prompt"]}], "tools": [tool],
                        "completion": f"<tool_call>{json.dumps(call)}</tool_call>"})
    return out


def build_tokenizer(texts: list[str], out: Path):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=768, min_frequency=1, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts + FILLER, trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False, single_word=False) for t in TOOL_TOKENS])
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>", "eos_token": EOS, "unk_token": "<unk>", "pad_token": "</s>",
        "add_bos_token": False, "add_eos_token": False, "clean_up_tokenization_spaces": False,
        "model_max_length": 2048, "chat_template": CHAT_TEMPLATE,
    }, indent=2))
    (out / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    (out / "special_tokens_map.json").write_text(json.dumps(
        {"bos_token": "<s>", "eos_token": EOS, "unk_token": "<unk>", "pad_token": "</s>"}, indent=2))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--smoke", required=True, type=Path, help="the recipe's smoke list as JSON")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--seconds", type=float, default=240.0, help="give up training after this long")
    args = ap.parse_args()

    import torch
    from transformers import AutoTokenizer, GenerationConfig, MixtralConfig, MixtralForCausalLM

    torch.manual_seed(SEED)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.set_num_threads(min(2, torch.get_num_threads()))

    smoke = json.loads(args.smoke.read_text())
    data = examples(smoke)
    tok_dir = args.out / "_tokenizer"
    # First pass renders the prompts with a throwaway tokenizer (the template needs one);
    # the real one is then learned from the rendered texts themselves.
    texts = [CHAT_TEMPLATE] + [json.dumps(e["messages"]) + e["completion"] for e in data]
    build_tokenizer(texts, tok_dir)
    tokenizer = AutoTokenizer.from_pretrained(tok_dir)
    rendered = [tokenizer.apply_chat_template(e["messages"], tools=e["tools"], add_generation_prompt=True,
                                              tokenize=False) for e in data]
    build_tokenizer(rendered + [e["completion"] + EOS for e in data], tok_dir)
    tokenizer = AutoTokenizer.from_pretrained(tok_dir)
    assert tokenizer.chat_template, "the chat template did not load"
    for t in TOOL_TOKENS:
        ids = tokenizer.encode(t, add_special_tokens=False)
        assert len(ids) == 1, f"{t} must be one token, got {ids}"
    eos_id = tokenizer.convert_tokens_to_ids(EOS)

    seqs = []
    for e in data:
        prompt = tokenizer.apply_chat_template(e["messages"], tools=e["tools"], add_generation_prompt=True, tokenize=False)
        p_ids = tokenizer.encode(prompt, add_special_tokens=False)
        c_ids = tokenizer.encode(e["completion"], add_special_tokens=False) + [eos_id]
        seqs.append((e["name"], p_ids, c_ids))
        print(f"make_model: {e['name']}: prompt {len(p_ids)} tokens, completion {len(c_ids)} tokens", flush=True)

    config = MixtralConfig(
        vocab_size=len(tokenizer), hidden_size=256, intermediate_size=512, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, head_dim=64, max_position_embeddings=2048,
        num_local_experts=4, num_experts_per_tok=2, bos_token_id=tokenizer.convert_tokens_to_ids("<s>"),
        eos_token_id=eos_id, pad_token_id=tokenizer.convert_tokens_to_ids("</s>"), tie_word_embeddings=False,
        sliding_window=None,
    )
    model = MixtralForCausalLM(config)
    gen = GenerationConfig(bos_token_id=config.bos_token_id, eos_token_id=eos_id, pad_token_id=config.pad_token_id)
    model.generation_config = gen

    def save(m, name: str) -> None:
        target = args.out / name
        m.save_pretrained(target, safe_serialization=True)
        for f in tok_dir.iterdir():
            shutil.copy2(f, target / f.name)
        print(f"make_model: wrote {target}", flush=True)

    save(model, "tiny-moe-random")

    def greedy_ok(m, dtype) -> bool:
        m = m.to(dtype).eval()
        ok = True
        with torch.no_grad():
            for _name, p, c in seqs:
                ids = list(p)
                for want in c:
                    logits = m(torch.tensor([ids])).logits[0, -1].float()
                    top2 = torch.topk(logits, 2)
                    # Demand a clear margin: vLLM's CPU kernels round differently from this loop.
                    if int(top2.indices[0]) != want or float(top2.values[0] - top2.values[1]) < 4.0:
                        ok = False
                        break
                    ids.append(want)
        m.to(torch.float32).train()
        return ok

    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.0)
    t0 = time.monotonic()
    model.train()
    for step in range(1, MAX_STEPS + 1):
        opt.zero_grad()
        total = 0.0
        for _name, p, c in seqs:
            ids = torch.tensor([p + c])
            labels = torch.tensor([[-100] * len(p) + c])
            loss = model(input_ids=ids, labels=labels).loss
            loss.backward()
            total += float(loss)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 25 == 0:
            print(f"make_model: step {step} loss {total:.4f} ({time.monotonic() - t0:.1f} s)", flush=True)
            if total < 0.05 and greedy_ok(model, torch.float32) and greedy_ok(model, torch.bfloat16):
                break
        if time.monotonic() - t0 > args.seconds:
            print("make_model: out of time before the model answered the smoke prompts", file=sys.stderr)
            return 1
    else:
        print("make_model: did not converge", file=sys.stderr)
        return 1
    print(f"make_model: trained in {step} steps, {time.monotonic() - t0:.1f} s", flush=True)
    save(model, "tiny-moe")
    shutil.rmtree(tok_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
