"""The values hostctl knows to be secret, and hiding them by value wherever hostctl prints, logs
or packs text.

Pattern redaction (hostctl.doctor.redact) finds secrets by their shape (`HF_TOKEN=...`,
`Authorization: Bearer ...`); it cannot see a key that appears bare, inside vLLM's
`'api_key': ['...']` args dump, URL-quoted or JSON-escaped. What hostctl knows is secret is
hidden by value as well: the API key (the variable runtime.api_key_env names), every recipe env
value whose name says secret, a secret serve argument (`--hf-token X`), and the caller's own
secret-named variables (HF_TOKEN and the like). Besides names, a value is secret by its shape
(looks_secret: an hf_/sk- token, or a credential-like value under a hinting name such as
WANDB_KEY). The CLI remembers them as soon as it knows them (environment at start, the config
once loaded) and filters stdout and stderr through hostctl.doctor.redact.redact, the one
redaction every output uses.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Iterable, Mapping
from urllib.parse import quote

MASK = "***REDACTED***"
# A shorter value would blank ordinary words; a key of 5 characters is not a key.
MIN_SECRET_LEN = 6
# The same definition the pattern redactor uses: a name that says it holds a secret. Names that
# only point at one (api_key_env, *_ENV) are not secret.
# PASS and AUTH count as the last part of a compound name only (DB_PASS, REDIS_AUTH): a bare
# "pass" or "qualify.pass" is a test verdict hostctl prints, not a password.
_SECRET_NAME = re.compile(
    r"(?i)^[A-Za-z0-9_.-]*(?:API[_-]?KEY|ACCESS[_-]?KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|[_-]PASS|[_-]AUTH"
    r"|CREDENTIALS?|PRIVATE[_-]?KEY)$")
# Secret variables some tools read whatever their name says.
ENV_SECRETS = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "VLLM_API_KEY")

_known: set[str] = set()


# A name that only hints at a credential (WANDB_KEY, SESSION_AUTH, DB_PASS, X_SIGNING_KEY_ID): its
# value is taken for a secret when it also looks like one (high_entropy), so CACHE_KEY=layers or
# TOKENIZER=/models/x/tokenizer.json stay readable while WANDB_KEY=3f9c...e1 does not.
_HINT_NAME = re.compile(r"(?i)KEY|TOKEN|SECRET|PASS|AUTH|CRED|PRIVATE|SIGNATURE|COOKIE|SESSION")
# Values that are secrets whatever their name says: Hugging Face, OpenAI-style, GitHub (classic and
# fine-grained), GitLab, Slack and AWS access-key tokens, a bearer credential and a PEM private key.
# hostctl.doctor.redact finds the same shapes inside text.
SHAPES = re.compile(r"(?:hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_-]{20,}|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,}"
                    r"|glpat-[A-Za-z0-9_-]{16,}|xox[abprs]-[A-Za-z0-9-]{10,}|(?:AKIA|ASIA)[0-9A-Z]{16}"
                    r"|(?i:bearer)\s+[A-Za-z0-9._~+/=-]{8,}|-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY-----[\s\S]*)")
_TOKEN_CHARS = re.compile(r"[A-Za-z0-9_.~+/=:-]{16,}")


def is_secret_name(name: str) -> bool:
    """True for HF_TOKEN, VLLM_API_KEY, MY_SECRET, db_password; False for API_KEY_ENV, tokens_per_s."""
    return bool(_SECRET_NAME.match(name)) and not name.upper().endswith("_ENV")


def high_entropy(value: str) -> bool:
    """A value shaped like a generated credential: 16+ characters from a token's alphabet, letters
    and digits mixed, about as varied as random text (>= 3.3 bits a character), and not a path
    or URL (those are what a long value under such a name usually is)."""
    import math

    if not _TOKEN_CHARS.fullmatch(value) or value.startswith(("/", ".")) or "://" in value:
        return False
    if not (any(c.isdigit() for c in value) and any(c.isalpha() for c in value)):
        return False
    counts = {c: value.count(c) for c in set(value)}
    bits = -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())
    return bits >= 3.3


def looks_secret(name: str, value: object) -> bool:
    """Whether NAME=value holds a secret, by name (is_secret_name), by the value's shape (SHAPES),
    or by a hinting name with a credential-like value (WANDB_KEY=<40 random characters>)."""
    if not isinstance(value, str):
        return False
    if is_secret_name(name) or SHAPES.fullmatch(value.strip()):
        return True
    # A bare hint word ("key": a dictionary's or a cache's key) names nothing secret by itself.
    hinted = bool(_HINT_NAME.search(name)) and not _HINT_NAME.fullmatch(name.rstrip("sS"))
    return hinted and not name.upper().endswith("_ENV") and high_entropy(value.strip())


def _usable(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    value = value.strip()
    return value if len(value) >= MIN_SECRET_LEN else None


def from_environment(environ: Mapping[str, str] | None = None) -> set[str]:
    env = os.environ if environ is None else environ
    return {v for name, raw in env.items() if (name in ENV_SECRETS or looks_secret(name, raw)) and (v := _usable(raw))}


def from_config(config, environ: Mapping[str, str] | None = None) -> set[str]:
    """Every value the profile and recipe make secret."""
    from hostctl.config import SECRET_FLAGS_TO_ENV

    env = os.environ if environ is None else environ
    found: set[str] = set()
    key_env = config.profile.runtime.api_key_env
    if key_env and (v := _usable(env.get(key_env))):
        found.add(v)
    for name, raw in config.recipe.env.items():
        if looks_secret(name, raw) and (v := _usable(raw)):
            found.add(v)
    for flag, value in config.recipe.args().pairs:
        if value is not None and (flag in SECRET_FLAGS_TO_ENV or looks_secret(flag.lstrip("-").replace("-", "_"), value)):
            if v := _usable(value):
                found.add(v)
    return found


def remember(values: Iterable[str]) -> None:
    """Add values to the process's set of known secrets (never removed: hiding too much is safe)."""
    for v in values:
        if (u := _usable(v)) is not None:
            _known.add(u)


def known() -> frozenset[str]:
    return frozenset(_known)


def _forms(value: str) -> set[str]:
    """The ways a value is written out: as is, JSON-escaped, URL-quoted."""
    return {value, json.dumps(value)[1:-1], quote(value, safe=""), quote(value)}


def redact_values(text: str, values: Iterable[str] | None = None) -> str:
    """`text` with every known secret (in any of its written forms) replaced by MASK."""
    pool = _known if values is None else set(values)
    if not pool or not text:
        return text
    for value in sorted(pool, key=len, reverse=True):
        for form in sorted(_forms(value), key=len, reverse=True):
            if form and form in text:
                text = text.replace(form, MASK)
    return text


def _redact_bytes(data: bytes) -> bytes:
    # Bytes written past the text layer get the same redaction; undecodable bytes pass unchanged.
    return _redact(data.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")


# A partial line is held back until its newline, so a secret split across two writes (docker cuts
# a log line at 16 KiB, and each partial write of the container is its own frame) is redacted
# whole. Held up to HOLD_MAX (loglines' 8 KiB line cap: the longest lines vLLM writes fit); a
# longer one is passed on up to a safe point, keeping at least _TAIL_MIN characters (more than any
# token shape, or the longest known secret's written form) so a secret that reaches the end of
# what arrived is never cut.
HOLD_MAX = 8 * 1024
_TAIL_MIN = 1024
# A safe point: whitespace that ends no `NAME:`/`NAME=`, starts no `: value`/`= value`, and follows
# no `Bearer`/`Basic`/`token` (each would part a name from its value). Searched only in the last
# _SAFE_WINDOW characters before the tail, so each cut costs a constant.
_SAFE_POINT = re.compile(r"(?i)(?<![:=,\"'\[\s])(?<!bearer)(?<!basic)(?<!token)\s(?![\s:=])")
_SAFE_WINDOW = 4096
# How long `logs -f` waits with a partial line held before passing it on (a line the container
# never ends, a prompt): docker delivers the pieces of one split line back to back.
IDLE_FLUSH_S = 1.0


def _tail_len() -> int:
    longest = max((len(f) for v in _known for f in _forms(v)), default=0)
    return max(_TAIL_MIN, longest + 1)


def _cut(held: str) -> int:
    """How much of a partial line longer than HOLD_MAX may go now (0: none)."""
    if len(held) <= HOLD_MAX:
        return 0
    limit = len(held) - _tail_len()
    if limit <= 0:
        return 0
    start = max(0, limit - _SAFE_WINDOW)
    last = None
    for last in _SAFE_POINT.finditer(held, start, limit):
        pass
    # No safe point in the window (one unbroken run of token characters): cut before the tail,
    # which still holds any secret of a known length or shape that reaches the end.
    return last.end() if last is not None else limit


class _Held:
    """The partial line a redacting stream holds, shared by the text and the byte stream."""

    def __init__(self, emit, redact, empty):
        self._emit, self._redact, self._buf = emit, redact, empty
        self._lock = threading.Lock()  # `logs -f` drains from a timer thread

    def write(self, data) -> None:
        with self._lock:
            self._buf += data
            # a line ends at "\n", or at "\r" (a progress bar redraws its line: it shows as it goes)
            nl, cr = ("\n", "\r") if isinstance(self._buf, str) else (b"\n", b"\r")
            end = max(self._buf.rfind(nl), self._buf.rfind(cr)) + 1
            if end:
                self._emit(self._redact(self._buf[:end]))
                self._buf = self._buf[end:]
            # bytes are cut as latin-1 text: one character a byte, so the offsets are the same
            n = _cut(self._buf if isinstance(self._buf, str) else self._buf.decode("latin-1"))
            if n:
                self._emit(self._redact(self._buf[:n]))
                self._buf = self._buf[n:]

    @property
    def held(self) -> int:
        return len(self._buf)

    def drain(self) -> None:
        with self._lock:
            if self._buf:
                self._emit(self._redact(self._buf))
                self._buf = self._buf[:0]


class _RedactingBinary:
    def __init__(self, target):
        self._t = target
        self._held = _Held(target.write, _redact_bytes, b"")

    def write(self, data: bytes) -> int:
        self._held.write(bytes(data))
        return len(data)

    @property
    def held(self) -> int:
        return self._held.held

    def flush(self) -> None:
        """Pass on every whole line; a partial line stays held (drain() passes it on)."""
        self._t.flush()

    def drain(self) -> None:
        """Pass on everything, the partial line too (the end of the stream, or `logs -f` idle)."""
        self._held.drain()
        self._t.flush()

    def __getattr__(self, name):
        return getattr(self._t, name)


def follow_writer(stream, idle_s: float = IDLE_FLUSH_S):
    """A write(chunk) for a followed byte stream (`logs -f`) into `stream` (a redacting stdout's
    buffer): whole lines go at once, a partial line after `idle_s` with nothing new, so a secret
    split across chunks is redacted whole and a line the container never ends still shows."""
    timer: threading.Timer | None = None
    pass_on = getattr(stream, "drain", stream.flush)

    def drain() -> None:
        try:
            pass_on()
        except (OSError, ValueError):
            pass  # the stream closed meanwhile (the command ended; main drained it) or the reader left

    def write(chunk: bytes) -> None:
        nonlocal timer
        if timer is not None:
            timer.cancel()
        stream.write(chunk)
        stream.flush()
        if getattr(stream, "held", 0):
            timer = threading.Timer(idle_s, drain)
            timer.daemon = True
            timer.start()

    return write


def _redact(text: str) -> str:
    # The one redaction (by value, then by shape) lives in hostctl.doctor.redact, which imports this
    # module for the values: imported here when first needed.
    from hostctl.doctor.redact import redact

    return redact(text)


class RedactingStream:
    """A text stream in front of stdout or stderr that hides every known secret in what passes
    through. Whole lines are passed on as they complete (a secret split across two writes is still
    seen whole); a partial line waits for its end, for flush() (a prompt) or for drain(), which the
    CLI calls when the command ends. Its `buffer` (bytes: `logs -f`) holds a partial line through
    flush() too, bounded (HOLD_MAX), until drain()."""

    def __init__(self, target):
        self._t = target
        self._held = _Held(target.write, _redact, "")
        self.buffer = _RedactingBinary(target.buffer) if hasattr(target, "buffer") else None

    def write(self, text: str) -> int:
        self._held.write(text)
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        """hostctl's own text is shown when it flushes, partial line and all: a prompt ("type the
        drive's identity: ") has no newline and must reach the terminal before input() waits.
        (A followed log, where a secret may straddle two chunks, goes through `buffer`, which holds
        its partial line through flush(); see follow_writer.)"""
        self._held.drain()
        if self.buffer is not None:
            self.buffer.flush()
        self._t.flush()

    def drain(self) -> None:
        self._held.drain()
        if self.buffer is not None:
            self.buffer.drain()
        self._t.flush()

    @property
    def target(self):
        return self._t

    def __getattr__(self, name):
        return getattr(self._t, name)
