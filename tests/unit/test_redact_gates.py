"""The redaction's gates skip a shape only where it could not match: redact() with its gates hides
exactly what every shape applied to every text hides, on ASCII text and on text whose characters
fold to ASCII letters under `(?i)` (KELVIN SIGN is K, LONG S is s)."""

from __future__ import annotations

import random

import pytest

from hostctl import secrets
from hostctl.secrets import MASK, redact

WORDS = ("API_KEY", "api-key", "apikey", "token", "secret", "password", "passwd", "passphrase", "_pass", "-PASS",
         "_auth", "credentials", "private_key", "key", "pass", "auth", "cred", "private", "signature", "cookie",
         "session", "authorization", "Proxy-Authorization", "Bearer", "basic", "hf_", "sk-", "ghp_", "github_pat_",
         "glpat-", "xoxb-", "AKIA", "ASIA", "-----BEGIN RSA PRIVATE KEY-----", "-----END RSA PRIVATE KEY-----",
         "https://", "ssh://", "user:pw@", "--api-key", "--hf-token", "--token=", "${", MASK, "null", "error",
         "_ENV", " = ", ": ", "=", '"')
# Characters that `(?i)` matches to an ASCII letter although str.lower() does not give that letter.
FOLDING = {"k": "\u212a", "s": "\u017f", "i": "\u0130"}
CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-~+/=:'\" \n\t,{}[]\\"


def every_shape(text: str) -> str:
    """What redact() hid before it had gates: each shape applied to the whole text."""
    text = secrets.redact_values(text)
    for _gate, pattern, repl in secrets._PATTERNS:
        text = pattern.sub(repl, text)
    return text


def texts(seed: int, count: int, fold: bool):
    rng = random.Random(seed)

    def piece() -> str:
        r = rng.random()
        if r < 0.4:
            word = rng.choice(WORDS)
            if fold:
                word = "".join(FOLDING[c.lower()] if c.lower() in FOLDING and rng.random() < 0.5 else c for c in word)
            return word.upper() if rng.random() < 0.3 else word
        if r < 0.55:
            return "".join(rng.choice("ABCDEFabcdef0123456789") for _ in range(rng.randint(8, 40)))
        return "".join(rng.choice(CHARS) for _ in range(rng.randint(1, 6)))

    for _ in range(count):
        yield "".join(piece() for _ in range(rng.randint(1, 25)))


@pytest.mark.parametrize("fold", [False, True], ids=["ascii", "case-folding"])
def test_the_gates_hide_what_every_shape_hides(fold):
    hidden = 0
    for text in texts(seed=28, count=4000, fold=fold):
        expected = every_shape(text)
        assert redact(text) == expected, text
        hidden += expected != text
    assert hidden > 400  # the corpus holds secrets the shapes hide, not only text they pass


@pytest.mark.parametrize("text", [
    "API_\u212aEY=abcdef0123456789abcdef",             # KELVIN SIGN for K: the secret-name shape
    "WANDB_\u212aEY=9f8e7d6c5b4a39281706f5e4d3c2b1a0",  # the hinting-name shape
    "\u017fecret: hunter2hunter2",                      # LONG S for s
    "Authorization: Bearer abcdefgh12345678",
])
def test_a_name_written_with_folding_characters_is_still_a_secret_name(text):
    assert redact(text) == every_shape(text)
    assert MASK in redact(text)
