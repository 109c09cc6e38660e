"""Progress of long work on checkpoint and cache files, on stderr: at a terminal one live line
(this file and the whole run, with the rate), elsewhere a line when each file starts and ends, so
a log stays readable."""

from __future__ import annotations

import threading
import time
from typing import TextIO

from hostctl.bytesizes import fmt_bytes

REFRESH_S = 0.25


class Progress:
    def __init__(self, err: TextIO, verb: str, total_files: int, total_bytes: int):
        self.err, self.verb = err, verb
        self.live = err.isatty()
        self.total_files, self.total_bytes = total_files, total_bytes
        self.index = 0
        self.current_verb = verb
        self.done_bytes = 0
        self.file_name, self.file_size, self.file_done = "", 0, 0
        self.t0 = time.monotonic()
        self.last = 0.0
        self.lock = threading.Lock()  # files may be hashed in parallel

    def start(self, name: str, size: int, already: int = 0, verb: str | None = None) -> None:
        with self.lock:
            self._start(name, size, already, verb)

    def _start(self, name: str, size: int, already: int, verb: str | None) -> None:
        self.index += 1
        self.current_verb = verb or self.verb
        self.file_name, self.file_size, self.file_done = name, size, already
        if not self.live:
            resumed = f", resuming at {fmt_bytes(already)}" if already else ""
            self.err.write(f"[{self.index}/{self.total_files}] {self.current_verb} {name} ({fmt_bytes(size)}{resumed})\n")
            self.err.flush()
        self._draw(force=True)

    def add(self, n: int) -> None:
        with self.lock:
            self.file_done += n
            self.done_bytes += n
            self._draw()

    def finish(self, note: str = "", name: str | None = None) -> None:
        with self.lock:
            self._finish(note, name)

    def _finish(self, note: str, name: str | None) -> None:
        if self.live:
            self._draw(force=True)
            self.err.write("\n")
        elif note:
            self.err.write(f"[{self.index}/{self.total_files}] {name or self.file_name}: {note}\n")
        self.err.flush()

    def _draw(self, force: bool = False) -> None:
        if not self.live:
            return
        now = time.monotonic()
        if not force and now - self.last < REFRESH_S:
            return
        self.last = now
        rate = self.done_bytes / max(now - self.t0, 1e-6)
        self.err.write(f"\r[{self.index}/{self.total_files}] {self.current_verb} {self.file_name} "
                       f"{fmt_bytes(self.file_done)}/{fmt_bytes(self.file_size)} | all "
                       f"{fmt_bytes(self.done_bytes)}/{fmt_bytes(self.total_bytes)} | {fmt_bytes(rate)}/s\x1b[K")
        self.err.flush()
