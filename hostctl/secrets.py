"""Secrets: which values hostctl knows to be secret, and the one redaction every output uses.

Two ways a secret is hidden. By value: what hostctl knows is secret (the API key, the variable
runtime.api_key_env names; every recipe env value whose name says secret; a secret serve argument
such as `--hf-token X`; the caller's own secret-named variables such as HF_TOKEN) is remembered
as soon as it is known (environment at start, the config once loaded) and hidden in any written
form, bare, URL-quoted or JSON-escaped. By shape: `HF_TOKEN=...`, `Authorization: Bearer ...`,
`--api-key X`, a password in a URL, a key in a Python args dump (`'api_key': ['...']`), an hf_/sk-
token; each match keeps its name and loses its value, so a reader still sees *that* a key was set.
A value is secret by its name, by its shape (looks_secret), or by a hinting name (WANDB_KEY) with a
credential-like value. redact() does both; stdout and stderr pass through it (RedactingStream), and
so do JSON, errors, doctor's report and every member of a support bundle.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Callable, Iterable, Mapping
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
# redact() finds the same shapes inside text.
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


# Serve flags whose value is a secret and the variable the runtime reads it from instead, so the
# plan moves it out of argv (and out of compose.yaml) into the 0600 env file.
SECRET_FLAGS_TO_ENV = {"--hf-token": "HF_TOKEN"}


def from_config(config, environ: Mapping[str, str] | None = None) -> set[str]:
    """Every value the profile and recipe (a hostctl.config.Config) make secret."""
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
    return redact(data.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")


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


class RedactingStream:
    """A text stream in front of stdout or stderr that hides every known secret in what passes
    through. Whole lines are passed on as they complete (a secret split across two writes is still
    seen whole); a partial line waits for its end, for flush() (a prompt) or for drain(), which the
    CLI calls when the command ends. Its `buffer` (bytes: `logs -f`) holds a partial line through
    flush() too, bounded (HOLD_MAX), until drain()."""

    def __init__(self, target):
        self._t = target
        self._held = _Held(target.write, redact, "")
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


# ---------------------------------------------------------------- redaction by shape

# A login name as ssh and URL users write one; anything else in a user name is hidden.
_LOGIN = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}")
# Schemes whose bare user name is a login, never a credential: an ssh target's `admin@gpu-box`
# (and a target with no scheme). Every other scheme's bare user is hidden: `https://TOKEN@mirror`
# is how GitLab/GitHub/Artifactory mirrors take a token, and hostctl builds no such URL itself.
_LOGIN_SCHEMES = frozenset({"", "ssh", "git+ssh", "sftp"})


def shown_userinfo(scheme: str, userinfo: str) -> str:
    """The userinfo of a URL as shown: `user:MASK` when it has a password and the user is a plain
    login name that does not look like a token; the user kept alone only for ssh-like schemes;
    MASK otherwise."""
    user, colon, _ = userinfo.partition(":")
    plain = user == "" or (_LOGIN.fullmatch(user) is not None and not SHAPES.fullmatch(user) and not high_entropy(user))
    if colon:
        return f"{user}:{MASK}" if plain else MASK
    return user if plain and user and scheme.lower() in _LOGIN_SCHEMES else MASK


# The longest name a secret-name pattern looks at. Bounded, because a run of name characters that
# repeats the hint ("KEYKEY...", "TOKEN.TOKEN...") made an unbounded `[...]*` before and after the
# hint backtrack over the whole run from every hint in it: 60 KB took 49 s. Real variable names
# are far shorter; a longer one is still caught by the value-shape patterns below.
_NAME_MAX = 128
# A variable or key whose name says "secret". Names that only *point at* a secret
# (api_key_env = "MY_KEY_VAR") keep their value: it is a variable name, not the key.
_SECRET_HINT = r"(?:API[_-]?KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|[_-]PASS|[_-]AUTH|CREDENTIALS?|PRIVATE[_-]?KEY)"
_SECRET_NAME_TEXT = rf"[A-Za-z0-9_.-]{{0,{_NAME_MAX}}}{_SECRET_HINT}(?![A-Za-z0-9])(?<![_-]ENV)"
# Where a name may start: at the start of a run of name characters, not inside one. `\b` also
# starts after every `.` or `-` of a run, and each start rescans the rest of the run: "a.a.a..."
# of 8 KB took 10 s, quadratic in every log line a bundle or `up`'s evidence redacts.
_NAME_START = r"(?<![A-Za-z0-9_.-])"


def _has(literal: str) -> Callable[[str], bool]:
    return lambda text: literal in text


def _found(pattern: re.Pattern) -> Callable[[str], bool]:
    return lambda text: pattern.search(text) is not None


def _has_word(words: tuple[str, ...], exact: re.Pattern, then: re.Pattern | None = None) -> Callable[[str], bool]:
    """A gate for a shape that ignores case: one of `words` (lower case), followed by what `then`
    matches. An ASCII text is searched for the words in its lower-case form: no character of it
    folds to a letter but its own two cases. Any other text is searched with `exact`, the same
    condition with the shape's own flags ("\u212aEY" is KEY to `(?i)`, not to str.lower())."""
    def admits(text: str) -> bool:
        if not text.isascii():
            return exact.search(text) is not None
        low = text.lower()
        if then is None:
            return any(word in low for word in words)
        for word in words:
            at = low.find(word)
            while at != -1:
                if then.match(text, at + len(word)):
                    return True
                at = low.find(word, at + 1)
        return False
    return admits


# Each shape is tried only on a text that holds what any match of it must hold (its gate), so an
# output without a credential-like word is not scanned by every shape: redacting `doctor --json`
# (18 KB, twice: the report, then stdout) took 16 ms each time on the 2-CPU machine, 0.6 ms with
# the gates. tests/unit/test_redact_gates.py holds them to hiding what every shape hides.
# The secret-name shapes need one of _SECRET_HINT's words; in lower case, as _has_word takes them.
_SECRET_HINT_WORDS = ("key", "token", "secret", "passw", "passphrase", "_pass", "-pass", "_auth", "-auth", "credential")
_SECRET_HINT_GATE = _has_word(_SECRET_HINT_WORDS, re.compile(rf"(?i){_SECRET_HINT}"))
# The hinting-name shape from its hint on: the hint, the rest of the name, the separator and a
# credential-long value ("pass": 7 in doctor's summary has the hint and not the value).
_HINT_WORDS = ("key", "token", "secret", "pass", "auth", "cred", "private", "signature", "cookie", "session")
_HINT = f"(?:{'|'.join(_HINT_WORDS)})"  # under (?i), as every pattern it is part of
_HINTED_VALUE = rf"[A-Za-z0-9_.-]{{0,{_NAME_MAX}}}[\"']?\s*[:=]\s*[\"']?[A-Za-z0-9_.~+/=:-]{{16}}"
_HINTED_VALUE_GATE = _has_word(_HINT_WORDS, re.compile(rf"(?i){_HINT}{_HINTED_VALUE}"), re.compile(rf"(?i){_HINTED_VALUE}"))
_PATTERNS: tuple[tuple[Callable[[str], bool], re.Pattern, Callable[[re.Match], str]], ...] = (
    # Authorization: Bearer xyz / "authorization": "Basic xyz"
    (_has_word(("authorization",), re.compile(r"(?i)authorization")),
     re.compile(r"(?i)(\"?(?:proxy-)?authorization\"?\s*[:=]\s*\"?)(?:(bearer|basic|token)\s+)?[^\s\"',]+"),
     lambda m: f"{m.group(1)}{(m.group(2) + ' ') if m.group(2) else ''}{MASK}"),
    # --api-key VALUE, --api-key=VALUE, "--api-key", "VALUE" (an argv in JSON)
    (_has("--"), re.compile(r"(?i)(--(?:api-key|hf-token|token|password)(?:=|\s+|[\"']\s*,\s*[\"']))(?!-)[^\s\"',]+"),
     lambda m: m.group(1) + MASK),
    # a Python repr of parsed args: 'api_key': ['value'] or "hf_token": "value"
    (_SECRET_HINT_GATE, re.compile(rf"(?i)(['\"]{_SECRET_NAME_TEXT}['\"]\s*:\s*\[?\s*['\"])(?!['\"])[^'\"]+"),
     lambda m: m.group(1) + MASK),
    # NAME=value, NAME: value, "NAME": "value", NAME = 'value' (not ${NAME:?...}, Compose interpolation).
    # JSON's null/true/false are no secret; an unquoted JSON value (a number) becomes a quoted mask,
    # so a redacted document (`model pull --json`: "token": null) still parses.
    (_SECRET_HINT_GATE,
     re.compile(rf"(?i)((?<!\$\{{){_NAME_START}{_SECRET_NAME_TEXT}(\"?)'?\s*[:=]\s*([\"']?))(?![\"']?\s*(?:$|,|\}}))(?!\$\{{)"
                rf"(?!\*\*\*REDACTED)(?!(?:null|true|false)\b)(?:(?<=\")[^\"\n]+|(?<=')[^'\n]+|\[?[^\s\"',}}\[]+)"),
     lambda m: m.group(1) + (f'"{MASK}"' if m.group(2) and not m.group(3) else MASK)),
    # a URL's userinfo, as urldisplay shows it: the password hidden, and a user name hidden too
    # unless it is a plain login (an https:// "user" is how a mirror's token is usually given). The
    # last '@' before the path ends the userinfo (as URL parsers split it), so a password holding
    # '@' is hidden whole. One scan to the next space or '/' per scheme start, so linear.
    (_has("://"), re.compile(r"(?i)(?<![a-z0-9+.-])([a-z][a-z0-9+.-]*)://([^\s/?#]*)@"),
     lambda m: f"{m.group(1)}://{shown_userinfo(m.group(1), m.group(2))}@"),
    # NAME=value under a name that only hints at a credential (WANDB_KEY, DB_PASS): hidden when
    # the value looks generated (the values remembered here.looks_secret), so CACHE_KEY=layers stays; an
    # exception's name is no variable ("KeyError: 'chatcmpl-...'" is the evidence doctor shows)
    (_HINTED_VALUE_GATE,
     re.compile(rf"(?i)((?<!\$\{{){_NAME_START}([A-Za-z0-9_.-]{{0,{_NAME_MAX}}}{_HINT}"
                rf"[A-Za-z0-9_.-]{{0,{_NAME_MAX}}})(?<!error)(?<!exception)[\"']?\s*[:=]\s*[\"']?)([A-Za-z0-9_.~+/=:-]{{16,}})"),
     lambda m: m.group(1) + MASK if looks_secret(m.group(2), m.group(3)) else m.group(0)),
    # a bearer credential wherever it is quoted (a header dump, a curl line in a log)
    (_has_word(("bearer",), re.compile(r"(?i)bearer")), re.compile(r"(?i)\b(bearer\s+)(?!\*\*\*REDACTED)[A-Za-z0-9._~+/=-]{8,}"), lambda m: m.group(1) + MASK),
    # bare tokens that are secrets whatever surrounds them
    (_has("hf_"), re.compile(r"\bhf_[A-Za-z0-9]{20,}\b"), lambda m: "hf_" + MASK),
    (_has("sk-"), re.compile(r"\bsk-[A-Za-z0-9_-]{20,}\b"), lambda m: "sk-" + MASK),
    (_found(re.compile(r"gh[pousr]_")), re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b"), lambda m: m.group(0)[:4] + MASK),
    (_has("github_pat_"), re.compile(r"\bgithub_pat_[A-Za-z0-9_]{22,}"), lambda m: "github_pat_" + MASK),
    (_has("glpat-"), re.compile(r"\bglpat-[A-Za-z0-9_-]{16,}"), lambda m: "glpat-" + MASK),
    (_has("xox"), re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}"), lambda m: m.group(0)[:5] + MASK),
    (_found(re.compile(r"AKIA|ASIA")), re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), lambda m: MASK),
    # a PEM private key, the BEGIN line kept: its body (base64 lines, `\n` when JSON-escaped, and the
    # `Proc-Type: ...` headers of an encrypted one) and END line go. Possessive, so one pass.
    (_has("-----BEGIN "), re.compile(r"(-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY-----)(?:[A-Za-z0-9+/=\s\\]|[A-Za-z-]{1,40}: [^\n]{0,200})*+"
                r"(?:-----END [A-Z0-9 ]{0,40}PRIVATE KEY-----)?"), lambda m: m.group(1) + MASK),
)


def redact(text: str) -> str:
    """`text` with every secret hidden: the values hostctl knows (the values remembered here), then every
    shape above. The one redaction for every output: stdout and stderr (secrets.RedactingStream),
    JSON, errors, doctor's report and every member of a support bundle."""
    text = redact_values(text)
    for gate, pattern, repl in _PATTERNS:
        if gate(text):
            text = pattern.sub(repl, text)
    return text


def count(text: str) -> int:
    """How many secrets redact() would hide (for the bundle's manifest)."""
    return redact(text).count(MASK) - text.count(MASK)
