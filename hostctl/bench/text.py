"""The texts hostctl's probes send: the filler words prompts are built from, the needle's
sentence and question (the code is drawn at random for every request, so only a model that
copies it from its context answers it), the decode prompt, and hostctl's own arithmetic and
coherence sets."""

from __future__ import annotations

import random

# Filler: plain lower-case words, so the needle sentence is the only sentence in the prompt.
WORDS = (
    "apple river stone garden window candle forest bridge meadow lantern harbor pebble "
    "orchard valley basket feather mirror thunder willow ember cloud marble saddle ribbon "
    "copper wagon falcon tulip canyon island velvet pepper"
).split()
# The secret: one of these, drawn at random for every request (none is a filler word), so an
# answer is right only when it was copied from the prompt (a guess is right 1 time in 48).
CODE_WORDS = (
    "ALPHA BRAVO CHARLIE DELTA ECHO FOXTROT GOLF HOTEL INDIA JULIET KILO LIMA MIKE NOVEMBER "
    "OSCAR PAPA QUEBEC ROMEO SIERRA TANGO UNIFORM VICTOR WHISKEY XRAY YANKEE ZULU AMBER BASALT "
    "COBALT DUNE GRANITE HELIUM IRIS JASPER KRYPTON LUMEN MAGMA NEON ONYX PRISM QUARTZ RADON "
    "SILICA TOPAZ UMBRA VAPOR WOLFRAM ZENITH"
).split()

NEEDLE_SENTENCE = "The secret code is {code}."
NEEDLE_QUESTION = "Question: what was the secret code? Reply with the code only."

DECODE_PROMPT = "Write a long story about a lighthouse keeper who finds a map in a bottle."

# hostctl's own questions: (prompt, exact integer answer).
ARITHMETIC = (
    ("What is 23 * 47? Reply with only the final number.", 1081),
    ("What is 615 + 289? Reply with only the final number.", 904),
    ("What is 1000 - 378? Reply with only the final number.", 622),
    ("What is 144 / 12? Reply with only the final number.", 12),
    ("What is 19 + 26 + 83? Reply with only the final number.", 128),
)

# Twelve prompts, as many as vLLM-MoET's coherence probe asks (bench/runner/probes.py: coherence).
COHERENCE = (
    "Explain in two sentences why bread goes stale.",
    "List three things a bicycle needs to be safe at night.",
    "Describe a rainy morning in a small harbour town.",
    "Write a short paragraph about why people keep gardens.",
    "What should someone pack for a one-day hike? Answer in one paragraph.",
    "Summarise, in one sentence, what a library is for.",
    "Give two reasons a kettle might switch itself off early.",
    "Write a Python function that returns the largest of three numbers.",
    "What is the difference between weather and climate? Answer briefly.",
    "Describe how to plant a tree, step by step, in four short steps.",
    "Name three animals that live in the Arctic and say one fact about each.",
    "Write two sentences a shopkeeper might say to greet a customer.",
)


def filler(rng: random.Random, n_words: int) -> list[str]:
    return [rng.choice(WORDS) for _ in range(n_words)]


def random_code(rng: random.Random) -> str:
    return rng.choice(CODE_WORDS)


def needle_text(words: list[str], depth: float, code: str) -> str:
    """The user message: filler with the needle sentence at `depth` (0..1), then the question."""
    at = max(0, min(len(words), int(round(len(words) * depth))))
    parts = words[:at] + [NEEDLE_SENTENCE.format(code=code)] + words[at:]
    return " ".join(parts) + "\n" + NEEDLE_QUESTION

