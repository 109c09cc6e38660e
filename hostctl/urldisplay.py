"""How a URL is shown to a person or written to a file: the one place that strips a password
from its userinfo (`scheme://user:PASSWORD@host` is shown `scheme://user:***REDACTED***@host`,
with hostctl.secrets' one mask) and hides a user name that is no plain login (`https://TOKEN@host`
is shown `https://***REDACTED***@host`; only ssh-like targets keep a bare user).

Every message, JSON document, log line or bundle entry that names a URL hostctl did not build
itself (an ssh:// target, HF_ENDPOINT, a router or server URL given on the command line) goes
through display(), so a password typed into a URL never reaches the screen, a report or a
support bundle.
"""

from __future__ import annotations

from hostctl.secrets import shown_userinfo



def display(url: object, *, limit: int = 200) -> str:
    """`url` with any password in its userinfo replaced by the mask, cut to `limit` characters.

    Done on the text, not with urllib: a URL that fails to parse (which is when it gets shown in
    an error) must lose its password all the same. The authority is what follows `://` up to the
    first `/`, `?` or `#`; its userinfo is everything before the last `@` there, and a password
    is whatever follows the first `:` of the userinfo."""
    text = str(url)
    head, sep, rest = text.partition("://")
    if not sep:
        head, rest = "", text  # no scheme: still an authority if it holds user:pw@host
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    authority, tail = rest[:end], rest[end:]
    userinfo, at, hostport = authority.rpartition("@")
    if at:
        authority = f"{shown_userinfo(head, userinfo)}@{hostport}"
    shown = f"{head}{sep}{authority}{tail}"
    return shown if len(shown) <= limit else shown[:limit] + "..."
