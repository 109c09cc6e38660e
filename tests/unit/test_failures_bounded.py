"""The failure catalogue, and every other pattern hostctl applies to a log it did not write,
costs time linear in the log: pathological 1 MiB lines (a phrase of the catalogue's own
excerpts repeated, the same less its last character, repeated separators) are classified in
well under a second. A quadratic pattern takes minutes on these (13 s on one 400 KB line), so
the bounds below are safety bounds with ~100x room, not benchmarks; an alarm ends a run that
would take minutes instead of waiting for it.
"""

from __future__ import annotations

import re
import signal
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from hostctl import failures, kernel_events
from hostctl.cache import usage
from hostctl.failures import SIGNATURES, StartEvidence, classify
from hostctl.safeload import load_yaml
from hostctl.service import lifecycle, progress

MIB = 1024 * 1024
BOUND_S = 1.0
LOG_BYTES = 256 * 1024  # per pattern and near miss: 32 lines of the longest a pattern sees
FIXTURES = load_yaml(Path(__file__).resolve().parent / "data" / "failures.yaml", "fixtures").data
SEPARATORS = [" ", "] ", ":", "(", "'", '"', "/", ".", "a.", "A-", "=", ",", "\t", "0", "x"]


def _excerpt_lines() -> list[str]:
    out: list[str] = []
    for case in FIXTURES.values():
        for c in (case, case.get("near_miss") or {}):
            for key in ("log", "kernel_log"):
                out += [line.strip() for line in (c.get(key) or "").splitlines() if line.strip()]
    return out


LINES = _excerpt_lines()


def _phrases() -> list[str]:
    """Every run of 1 to 3 words of every excerpt line (which holds each pattern's first words)."""
    seen: dict[str, None] = {}
    for line in LINES:
        words = line.split()
        for n in (1, 2, 3):
            for i in range(len(words) - n + 1):
                seen.setdefault(" ".join(words[i:i + n]), None)
    return list(seen)


def _fill(unit: str, size: int = MIB) -> str:
    return (unit * (size // max(len(unit), 1) + 1))[:size]


class _TooSlow(Exception):
    pass


@contextmanager
def _alarm(seconds: float):
    """Stop a run after `seconds` (Python's regex engine checks for signals while it backtracks)."""
    def fire(signum, frame):
        raise _TooSlow(f"still running after {seconds} s")
    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _timed(fn) -> float:
    """The CPU seconds `fn` took (a run past the alarm: inf). CPU time, not wall: the bound is on
    the work a pattern does, and other processes on a shared 2-CPU machine stretch wall time (a
    0.5 s classification took 1.6 s of wall at a load of 4.8)."""
    t0 = time.process_time()
    try:
        with _alarm(20 * BOUND_S):
            fn()
    except _TooSlow:
        return float("inf")
    return time.process_time() - t0


def test_the_catalogue_excerpts_give_phrases_for_every_signature():
    assert set(FIXTURES) == {s.id for s in SIGNATURES}
    assert len(_phrases()) > 500


@pytest.mark.parametrize("sig_id", [s.id for s in SIGNATURES])
def test_each_signature_classifies_pathological_1mib_lines_in_under_a_second(sig_id):
    """The signature's own excerpt (so every gate a signature has is passed) plus one 1 MiB line of
    each phrase of it repeated, and of it less its last character: the whole classification."""
    case = FIXTURES[sig_id]
    words = " ".join(case.get("log", "").split() + case.get("kernel_log", "").split()).split()
    units = {" ".join(words[i:i + n]) + " " for n in (1, 2) for i in range(len(words) - n + 1)}
    units |= {u[:-2] for u in list(units) if len(u) > 2}
    slow = []
    for unit in sorted(units):
        line = _fill(unit)
        ev = StartEvidence(log=case.get("log", "") + line + "\n", kernel_log=case.get("kernel_log", "") + line + "\n",
                           oom_killed=case.get("oom_killed"), exit_code=case.get("exit_code"),
                           stalled_s=case.get("stalled_s"))
        took = _timed(lambda: classify(ev))
        if took > BOUND_S:
            slow.append(f"{unit[:40]!r}: {took:.2f} s")
            break  # one is enough (and each costs up to the alarm)
    assert not slow, f"{sig_id}: classification of a 1 MiB line took too long: {slow[:5]}"


def _parts() -> list[tuple[str, re.Pattern]]:
    """Every regex hostctl applies to runtime or kernel log text, from the modules themselves."""
    from hostctl import loglines
    out: list[tuple[str, re.Pattern]] = []
    for n, lp in enumerate(failures.PATTERNS):
        for alt in lp.alternatives:
            for rx in (alt.parts if isinstance(alt, loglines.Then) else (alt,)):
                out.append((f"failures.PATTERNS[{n}] {rx.pattern[:50]}", rx))
    for module in (kernel_events, lifecycle, usage):
        out += [(f"{module.__name__}.{k}", v) for k, v in vars(module).items() if isinstance(v, re.Pattern)]
    out += [(f"progress {p.id}", p.pattern) for p in progress.PHASES]
    return out


def test_every_log_pattern_is_linear_on_its_own_near_misses():
    """Each regex on its own, on one bounded line's worth (loglines.MAX_LINE_CHARS) of every text it
    matches in the excerpts, repeated, and the same less its last character, and on separators;
    256 KiB of such lines must take < 0.25 s per pattern (a pattern that backtracks across
    the line costs the line's length squared: seconds per line, minutes per log)."""
    from hostctl import loglines

    parts = _parts()
    assert len(parts) > 40
    slow = []
    for name, rx in parts:
        units = set(SEPARATORS)
        for line in LINES:
            for m in rx.finditer(line):
                if m.group():
                    units |= {m.group(), m.group() + " ", m.group()[:-1], line[:m.end() - 1]}
        logs = [_fill(_fill(u, loglines.MAX_LINE_CHARS) + "\n", LOG_BYTES) for u in sorted(units)]

        def run():
            for log in logs:
                for line in loglines.lines(log):
                    rx.search(line)
        took = _timed(run) / max(len(logs), 1)
        if took > BOUND_S * LOG_BYTES / MIB:
            slow.append(f"{name}: {took:.2f} s per {LOG_BYTES // 1024} KiB")
    assert not slow, slow


def test_a_log_of_long_lines_costs_its_length():
    """Four times the log (4 MiB of 8 KiB lines holding many patterns' first words) costs about four
    times the time, not sixteen: what `doctor --log` at its 64 MiB cap relies on."""
    from hostctl import loglines

    unit = "F8_E8M0 c10d NCCL INFO oom-kill: Killed process 1 ( ProcessGroupNCCL flashinfer "
    small = _fill(_fill(unit, loglines.MAX_LINE_CHARS) + "\n", MIB)
    big = small * 4

    def run(text):
        loglines.lines.cache_clear()
        classify(StartEvidence(log=text, kernel_log=text))
    t_small = min(_timed(lambda: run(small)) for _ in range(3))
    t_big = _timed(lambda: run(big))
    assert t_big < max(4 * t_small, BOUND_S) * 3, (t_small, t_big)
