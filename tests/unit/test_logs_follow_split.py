"""`hostctl logs -f` through a real pipe: a secret docker split across two log chunks (its 16 KiB
cut, or two partial writes) is redacted whole, a line longer than the hold cap still flows (with a
secret at the cut hidden), and a line the container never ends shows after the idle time.
Review 2, G5: each chunk was flushed, so each half was redacted alone and the terminal showed the
key joined."""

from __future__ import annotations

import io
import os
import threading
import time

import pytest

from hostctl import secrets

KEY = "sk-ABCDEFGHIJKLMNOPQRSTUVWXYZ0123"  # an OpenAI-style shape: redacted by shape alone


@pytest.fixture
def pipe(monkeypatch):
    """(a RedactingStream over the write end of an os.pipe, a function that closes it and returns
    everything the read end got)."""
    monkeypatch.setattr(secrets, "_known", set())
    r, w = os.pipe()
    got: list[bytes] = []

    def reader():
        while chunk := os.read(r, 65536):
            got.append(chunk)
    t = threading.Thread(target=reader, daemon=True)
    t.start()
    target = io.TextIOWrapper(io.BufferedWriter(io.FileIO(w, "w")), encoding="utf-8")
    stream = secrets.RedactingStream(target)

    def read_now() -> bytes:
        return b"".join(got)

    def close() -> bytes:
        stream.drain()
        target.close()
        t.join(5)
        os.close(r)
        return read_now()
    return stream, read_now, close


def test_a_key_split_at_dockers_16k_cut_is_redacted(pipe):
    stream, _, close = pipe
    write = secrets.follow_writer(stream.buffer, idle_s=30)
    pad = b"x" * 16370
    first = pad + b" " + KEY[:12].encode()
    write(first)  # docker's first 16 KiB message
    write(KEY[12:].encode() + b" done\n")
    out = close()
    assert KEY.encode() not in out and KEY[12:].encode() not in out
    assert out.endswith(b"***REDACTED*** done\n") and out.count(b"x") == len(pad)


def test_a_known_secret_split_in_two_writes_is_redacted(pipe):
    stream, _, close = pipe
    secrets.remember(["Q7-plain-known-value-5c1d"])
    write = secrets.follow_writer(stream.buffer, idle_s=30)
    write(b"engine args: key=Q7-plain-kn")
    write(b"own-value-5c1d ok\n")
    out = close()
    assert b"Q7-plain" not in out and b"value-5c1d" not in out and out.endswith(b"ok\n")


def test_a_very_long_line_flows_and_a_secret_at_the_cut_is_hidden(pipe):
    stream, read_now, close = pipe
    write = secrets.follow_writer(stream.buffer, idle_s=30)
    # 64 KiB of words without a newline, the key straddling every likely cut point
    for i in range(64):
        write((b"word " * 200)[: 1024 - 40] + b" " + KEY.encode()[: 20 if i % 2 else 10])
        write(KEY.encode()[20 if i % 2 else 10:] + b" ")
    time.sleep(0.2)
    flowed = read_now()
    assert len(flowed) > 32 * 1024  # held is bounded: most of the line is out before its end
    out = close()
    assert KEY.encode() not in out and out.count(b"REDACTED") == 64


def test_a_partial_line_shows_after_the_idle_time(pipe):
    stream, read_now, close = pipe
    write = secrets.follow_writer(stream.buffer, idle_s=0.2)
    write(b"Loading weights ... ")
    assert b"Loading" not in read_now()
    deadline = time.monotonic() + 5
    while b"Loading" not in read_now() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert b"Loading weights ... " in read_now()
    close()


def test_a_prompt_shows_when_hostctl_flushes_it(pipe):
    """A consent prompt has no newline: the text stream passes a partial line on at flush(), or
    input() would wait for an answer to a question nobody sees (`cache prune` at a terminal hung)."""
    stream, read_now, close = pipe
    stream.write("type 'prune' to remove 3 generations: ")
    stream.flush()
    deadline = time.monotonic() + 5
    while b"type 'prune'" not in read_now() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert read_now().endswith(b"generations: ")
    close()
