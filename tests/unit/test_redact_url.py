"""redact() hides the whole password of a URL's userinfo, also one that holds '@' (URL parsers
end the userinfo at the last '@' before the host) or has no user name before it."""

from __future__ import annotations

import pytest

from hostctl.secrets import redact


@pytest.mark.parametrize("url, shown", [
    ("http://u:p@ss@127.0.0.1:1/v1", "http://u:***REDACTED***@127.0.0.1:1/v1"),
    ("https://me:a@b@c@hub.example/x?y=1", "https://me:***REDACTED***@hub.example/x?y=1"),
    ("http://:Pw0rd-secret@h", "http://:***REDACTED***@h"),
    ("https://u:PASSWORD@hub.example/x", "https://u:***REDACTED***@hub.example/x"),
])
def test_a_url_password_is_hidden_whole(url, shown):
    out = redact(f"fetching {url} failed; mail admin@example.com")
    assert out == f"fetching {shown} failed; mail admin@example.com"
    password = url.split("//", 1)[1].split(":", 1)[1].rsplit("@", 1)[0]
    assert password not in out and not any(part in out for part in password.split("@") if len(part) > 1)
