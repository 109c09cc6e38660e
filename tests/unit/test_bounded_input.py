"""Input that costs too much, on routes the CLI corpus (tests/hostile_inputs.py, bounded_cases)
cannot reach without reading this host: a bench suite with a 5,000-digit integer, and a state
file planted by another user with a pid past 64 bits. Each is refused (exit 2, the file named)
or ignored as no state; never a crash."""

from __future__ import annotations

import os
import time

import pytest

from hostctl import paths
from hostctl.errors import EXIT_BAD_INPUT, InputError

NOBODY = 65534


def _refused_fast(load, path):
    t0 = time.perf_counter()
    with pytest.raises(InputError) as info:
        load()
    assert time.perf_counter() - t0 < 1.0
    assert info.value.exit_code == EXIT_BAD_INPUT and str(path) in str(info.value)
    return info.value


def test_a_suite_integer_of_5000_digits_names_its_line(tmp_path):
    from hostctl.bench import suites

    path = tmp_path / "suite.yaml"
    path.write_text("id: hostile\nprobes:\n  - kind: decode\n    max_tokens: " + "9" * 5000 + "\n")
    assert "line 4" in str(_refused_fast(lambda: suites.load_suite(str(path)), path))


@pytest.mark.parametrize("pid", [str(2 ** 64), "1" + "0" * 4000])
def test_a_planted_supervisor_record_with_a_huge_pid_is_no_supervisor(tmp_path, monkeypatch, pid):
    """Another user (nobody) plants the record `down` reads: os.kill got a 4,001-digit pid
    (OverflowError, exit 70) and `status` crashed; now it is no supervisor at all."""
    from hostctl.service import supervisor

    monkeypatch.setenv(paths.SYSROOT_ENV, str(tmp_path))
    state = paths.state_dir()
    state.mkdir(parents=True)
    record = state / supervisor.SUPERVISOR_FILE
    record.write_text('{"pid": ' + pid + ', "start": 1, "container": "x", "since": "now"}\n')
    os.chown(record, NOBODY, NOBODY)
    before = record.read_bytes()
    assert supervisor.running() is None
    supervisor.clear()
    assert record.read_bytes() == before  # not ours: left where it is


@pytest.mark.parametrize("unit", ["a.", "A-", "x.y-", "API_KEY.", "KEY", "KEY.", "TOKEN.", "'TOKEN",
                                  # review 2: PASS/AUTH names with quoted values, URL userinfo, PEM blocks
                                  "x_pass=\"", "_AUTH: '", "https://a@", "a@b://", "-----BEGIN PRIVATE KEY-----",
                                  "Proc-Type: ", "xoxb-", "github_pat_"])
def test_redaction_of_a_long_run_of_name_characters_is_linear(unit):
    """Every log line a bundle or `up`'s evidence shows is redacted: a name pattern that could start
    after every `.` or `-` of a run rescanned the rest of it (8 KB of "a." took 10 s). 64 KiB of
    each, under an alarm that ends a run of minutes."""
    import signal

    from hostctl.secrets import redact

    def fire(signum, frame):
        raise TimeoutError("redact still running after 5 s")
    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, 5.0)
    try:
        t0 = time.perf_counter()
        text = unit * (64 * 1024 // len(unit)) + " API_KEY=sk-value"
        out = redact(text)
        assert time.perf_counter() - t0 < 1.0
        assert "sk-value" not in out
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
