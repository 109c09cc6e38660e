"""Credentials redaction missed (review 2, G7/G10): a passphrase under a name that says PASS or AUTH
(any value, not only a random-looking one), the token shapes of GitHub fine-grained PATs, GitLab,
Slack, AWS access keys and PEM private keys, and a token given as a URL's user name. hostctl's own
verdicts (`pass`, `qualify.pass`, `all_pass`) stay readable."""

from __future__ import annotations

import json

import pytest

from hostctl.secrets import redact
from hostctl.secrets import looks_secret
from hostctl.urldisplay import display

PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAq8zK1p/9+Zz==\nQmFzZTY0Ym9keQ==\n-----END RSA PRIVATE KEY-----"


@pytest.mark.parametrize("text, secret", [
    ("DB_PASS: correcthorsebatterystaple", "correcthorsebatterystaple"),
    ('REDIS_AUTH: "Tr0ub4dor&3xyzzy!"', "Tr0ub4dor"),
    ("redis-auth=hunter2hunter2", "hunter2hunter2"),
    ('password="p a s s phrase"', "a s s"),
    ('{"db_pass": "correct horse battery"}', "horse"),
    ("GH_PAT=github_pat_11ABCDEFG0123456789_abcdefghij", "11ABCDEFG"),
    ("mirror token glpat-abcDEF123456789xyz used", "abcDEF123456789xyz"),
    ("hook xoxb-1234567890-abcdefABCDEF", "1234567890-abcdef"),
    ("aws AKIAIOSFODNN7EXAMPLE here", "IOSFODNN7EXAMPLE"),
    (f"key:\n{PEM}\nafter", "MIIEowIBAAKCAQEA"),
    (json.dumps({"k": PEM}), "QmFzZTY0Ym9keQ"),
    ("fetching https://glpat-abcDEF123456789xyz@mirror.corp.example/hf", "abcDEF123456789xyz"),
    ("fetching https://s3cr3tT0kenValue99@mirror.example/x", "s3cr3tT0kenValue99"),
    ("GET https://ghp_abcdefghijklmnopqrstuvwxyz0123456789:x-oauth-basic@github.com/o/r", "abcdefghijklmnop"),
])
def test_redact_hides_the_credential(text, secret):
    out = redact(text)
    assert secret not in out and "REDACTED" in out, out


@pytest.mark.parametrize("text", [
    "qualify.pass: FAIL: 1 of 4 rung(s) failed", '{"pass": "PASS", "warn": "WARN"}', '"all_pass": true',
    "ssh://admin@gpu-box:22", "mail admin@example.com", "http://127.0.0.1:8000/v1?a=b:c@d",
    '"api_key_env": "HOSTCTL_API_KEY"', "passes: 3",
])
def test_hostctls_own_words_stay_readable(text):
    assert redact(text) == text


@pytest.mark.parametrize("name, value", [("DB_PASS", "correcthorsebatterystaple"), ("REDIS_AUTH", "Tr0ub4dor&3xyzzy!"),
                                         ("DB_PASSPHRASE", "a long phrase"), ("GH", "github_pat_11ABCDEFG0123456789_abc"),
                                         ("KEYFILE", PEM)])
def test_env_values_are_secret_by_name_or_shape(name, value):
    assert looks_secret(name, value)


@pytest.mark.parametrize("url, shown", [
    ("https://glpat-abcDEF123456789xyz@mirror.corp.example/hf", "https://***REDACTED***@mirror.corp.example/hf"),
    ("https://user@mirror.example/x", "https://***REDACTED***@mirror.example/x"),  # a bare user: hidden off ssh
    ("https://ghp_abcdefghijklmnopqrstuvwxyz0123456789:x-oauth-basic@github.com/r", "https://***REDACTED***@github.com/r"),
    ("ssh://admin@gpu-box", "ssh://admin@gpu-box"),
    ("admin@gpu-box", "admin@gpu-box"),
])
def test_display_hides_a_token_given_as_the_user(url, shown):
    assert display(url) == shown
    assert redact(f"url {url} x") == f"url {shown} x"
