"""Matching log text hostctl did not write (the runtime's log, a saved log, the kernel log) in
time linear in its length: lines cut to a bound before any pattern sees them, and the one
pattern shape the failure catalogue needs that Python's regex engine runs quadratically
("A, later on the line, B") done as two linear searches.

Why: `re.search("A.*B", line)` retries `.*` from every A, so a 400 KB line of a repeated word
took 13 s and the 64 MiB cap of `doctor --log` would run for days. The same text comes from a
container anyone able to write its log (a model's own code, a request echoed back) controls.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import lru_cache

# What of one line a pattern sees. The lines the catalogue knows name their cause within the
# first few hundred characters after the logger's prefix; vLLM's longest lines (the engine
# config, "non-default args") are a few KiB. 8 KiB keeps all of those whole and caps one line's
# cost at a constant, so a log costs its length, never its longest line squared.
MAX_LINE_CHARS = 8 * 1024


def bounded(line: str) -> str:
    return line[:MAX_LINE_CHARS]


@lru_cache(maxsize=4)
def lines(text: str) -> tuple[str, ...]:
    """The text's lines, each cut to MAX_LINE_CHARS (cached: every signature reads the same log)."""
    return tuple(bounded(line) for line in text.splitlines())


def numbered(text: str) -> Iterator[tuple[int, str]]:
    return enumerate(lines(text), 1)


class Then:
    """Patterns that must occur on one line in this order, each searched from where the previous
    one's first match ended: `A.*B` in two linear searches instead of one quadratic one."""

    def __init__(self, parts: tuple[re.Pattern, ...]) -> None:
        self.parts = parts

    def search(self, line: str) -> bool:
        pos = 0
        for rx in self.parts:
            m = rx.search(line, pos)
            if m is None:
                return False
            pos = m.end()
        return True


class LinePattern:
    """Any of its alternatives matches one (bounded) line. An alternative is a regex or a Then.
    Every regex in one is free of unbounded repetition that can backtrack across the line
    (tests/unit/test_failures_bounded.py runs each against pathological 1 MiB input)."""

    def __init__(self, alternatives: tuple[re.Pattern | Then, ...]) -> None:
        self.alternatives = alternatives

    def search(self, line: str) -> bool:
        line = bounded(line)
        return any(alt.search(line) for alt in self.alternatives)

    def search_text(self, text: str) -> bool:
        return any(self.search(line) for line in lines(text))


def pattern(*alternatives: str | tuple[str, ...], flags: int = 0) -> LinePattern:
    """pattern("X", ("A", "B")) matches a line with X, or with A and then B after it."""
    built: list[re.Pattern | Then] = []
    for alt in alternatives:
        if isinstance(alt, tuple):
            built.append(Then(tuple(re.compile(p, flags) for p in alt)))
        else:
            built.append(re.compile(alt, flags))
    return LinePattern(tuple(built))
