"""Secret redaction for everything doctor prints or packs: API keys, Hugging Face tokens,
Authorization headers, `--api-key` arguments, any VAR=value whose name says it holds a
secret, a password in a URL and a key in a Python args dump (`'api_key': ['...']`). Each match
keeps its name and loses its value, so a reader still sees *that* a key was set. Every value
hostctl knows to be secret is hidden by value first (hostctl.secrets), whatever surrounds it."""

from __future__ import annotations

import re

from hostctl.secrets import MASK, looks_secret, redact_values
from hostctl.urldisplay import shown_userinfo

# The longest name a secret-name pattern looks at. Bounded, because a run of name characters that
# repeats the hint ("KEYKEY...", "TOKEN.TOKEN...") made an unbounded `[...]*` before and after the
# hint backtrack over the whole run from every hint in it: 60 KB took 49 s. Real variable names
# are far shorter; a longer one is still caught by the value-shape patterns below.
_NAME_MAX = 128
# A variable or key whose name says "secret". Names that only *point at* a secret
# (api_key_env = "MY_KEY_VAR") keep their value: it is a variable name, not the key.
_SECRET_NAME = rf"[A-Za-z0-9_.-]{{0,{_NAME_MAX}}}(?:API[_-]?KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|[_-]PASS|[_-]AUTH|CREDENTIALS?|PRIVATE[_-]?KEY)(?![A-Za-z0-9])(?<![_-]ENV)"
# Where a name may start: at the start of a run of name characters, not inside one. `\b` also
# starts after every `.` or `-` of a run, and each start rescans the rest of the run: "a.a.a..."
# of 8 KB took 10 s, quadratic in every log line a bundle or `up`'s evidence redacts.
_NAME_START = r"(?<![A-Za-z0-9_.-])"
_PATTERNS: tuple[tuple[re.Pattern, str], ...] = (
    # Authorization: Bearer xyz / "authorization": "Basic xyz"
    (re.compile(r"(?i)(\"?(?:proxy-)?authorization\"?\s*[:=]\s*\"?)(?:(bearer|basic|token)\s+)?[^\s\"',]+"),
     lambda m: f"{m.group(1)}{(m.group(2) + ' ') if m.group(2) else ''}{MASK}"),
    # --api-key VALUE, --api-key=VALUE, "--api-key", "VALUE" (an argv in JSON)
    (re.compile(r"(?i)(--(?:api-key|hf-token|token|password)(?:=|\s+|[\"']\s*,\s*[\"']))(?!-)[^\s\"',]+"),
     lambda m: m.group(1) + MASK),
    # a Python repr of parsed args: 'api_key': ['value'] or "hf_token": "value"
    (re.compile(rf"(?i)(['\"]{_SECRET_NAME}['\"]\s*:\s*\[?\s*['\"])(?!['\"])[^'\"]+"),
     lambda m: m.group(1) + MASK),
    # NAME=value, NAME: value, "NAME": "value", NAME = 'value' (not ${NAME:?...}, Compose interpolation).
    # JSON's null/true/false are no secret; an unquoted JSON value (a number) becomes a quoted mask,
    # so a redacted document (`model pull --json`: "token": null) still parses.
    (re.compile(rf"(?i)((?<!\$\{{){_NAME_START}{_SECRET_NAME}(\"?)'?\s*[:=]\s*([\"']?))(?![\"']?\s*(?:$|,|\}}))(?!\$\{{)"
                rf"(?!\*\*\*REDACTED)(?!(?:null|true|false)\b)(?:(?<=\")[^\"\n]+|(?<=')[^'\n]+|\[?[^\s\"',}}\[]+)"),
     lambda m: m.group(1) + (f'"{MASK}"' if m.group(2) and not m.group(3) else MASK)),
    # a URL's userinfo, as urldisplay shows it: the password hidden, and a user name hidden too
    # unless it is a plain login (an https:// "user" is how a mirror's token is usually given). The
    # last '@' before the path ends the userinfo (as URL parsers split it), so a password holding
    # '@' is hidden whole. One scan to the next space or '/' per scheme start, so linear.
    (re.compile(r"(?i)(?<![a-z0-9+.-])([a-z][a-z0-9+.-]*)://([^\s/?#]*)@"),
     lambda m: f"{m.group(1)}://{shown_userinfo(m.group(1), m.group(2))}@"),
    # NAME=value under a name that only hints at a credential (WANDB_KEY, DB_PASS): hidden when
    # the value looks generated (hostctl.secrets.looks_secret), so CACHE_KEY=layers stays; an
    # exception's name is no variable ("KeyError: 'chatcmpl-...'" is the evidence doctor shows)
    (re.compile(rf"(?i)((?<!\$\{{){_NAME_START}([A-Za-z0-9_.-]{{0,{_NAME_MAX}}}(?:KEY|TOKEN|SECRET|PASS|AUTH|CRED|PRIVATE|SIGNATURE|COOKIE|SESSION)"
                rf"[A-Za-z0-9_.-]{{0,{_NAME_MAX}}})(?<!error)(?<!exception)[\"']?\s*[:=]\s*[\"']?)([A-Za-z0-9_.~+/=:-]{{16,}})"),
     lambda m: m.group(1) + MASK if looks_secret(m.group(2), m.group(3)) else m.group(0)),
    # a bearer credential wherever it is quoted (a header dump, a curl line in a log)
    (re.compile(r"(?i)\b(bearer\s+)(?!\*\*\*REDACTED)[A-Za-z0-9._~+/=-]{8,}"), lambda m: m.group(1) + MASK),
    # bare tokens that are secrets whatever surrounds them
    (re.compile(r"\bhf_[A-Za-z0-9]{20,}\b"), lambda m: "hf_" + MASK),
    (re.compile(r"\bsk-[A-Za-z0-9_-]{20,}\b"), lambda m: "sk-" + MASK),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b"), lambda m: m.group(0)[:4] + MASK),
    (re.compile(r"\bgithub_pat_[A-Za-z0-9_]{22,}"), lambda m: "github_pat_" + MASK),
    (re.compile(r"\bglpat-[A-Za-z0-9_-]{16,}"), lambda m: "glpat-" + MASK),
    (re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}"), lambda m: m.group(0)[:5] + MASK),
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), lambda m: MASK),
    # a PEM private key, the BEGIN line kept: its body (base64 lines, `\n` when JSON-escaped, and the
    # `Proc-Type: ...` headers of an encrypted one) and END line go. Possessive, so one pass.
    (re.compile(r"(-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY-----)(?:[A-Za-z0-9+/=\s\\]|[A-Za-z-]{1,40}: [^\n]{0,200})*+"
                r"(?:-----END [A-Z0-9 ]{0,40}PRIVATE KEY-----)?"), lambda m: m.group(1) + MASK),
)


def redact(text: str) -> str:
    """`text` with every secret hidden: the values hostctl knows (hostctl.secrets), then every
    shape above. The one redaction for every output: stdout and stderr (secrets.RedactingStream),
    JSON, errors, doctor's report and every member of a support bundle."""
    text = redact_values(text)
    for pattern, repl in _PATTERNS:
        text = pattern.sub(repl, text)
    return text


def count(text: str) -> int:
    """How many secrets redact() would hide (for the bundle's manifest)."""
    return redact(text).count(MASK) - text.count(MASK)
