"""Ctrl-C and SIGTERM during long work (`up` today; `bench` and `tune` trials can use the same):
the first signal stops the work where it is and lets its owner take down what it started; a
second one, during that clean-up, says "do not wait" (the owner then kills instead of stopping
gracefully). The command then exits 128 + the signal's number (130 for SIGINT, 143 for SIGTERM),
as a shell reports a process killed by it, and the CLI records nothing as success.

Usage:

    with Interruptible() as guard:
        try:
            long_work()
        except Interrupted:
            with guard.cleaning_up():
                try:
                    stop_gracefully()
                except Hurry:
                    kill_now()
            raise

Signal handlers can only be installed from the main thread; elsewhere (a worker thread) the
guard does nothing and the default behaviour stays.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(BaseException):
    """Raised in the main thread at the first SIGINT/SIGTERM. A BaseException, like
    KeyboardInterrupt, so `except Exception` in the work does not swallow it."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    signal_name = name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class Hurry(BaseException):
    """Raised at a second signal while the owner cleans up: skip the graceful wait."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class Interruptible:
    def __init__(self) -> None:
        self.first: int | None = None  # the signal that interrupted the work
        self.hurried = False
        self._cleaning = False
        self._previous: dict[int, object] = {}
        self._active = False

    def _handler(self, signum, frame) -> None:
        if self.first is None:
            self.first = signum
            raise Interrupted(signum)
        if self._cleaning and not self.hurried:
            self.hurried = True
            raise Hurry(signum)
        # Further signals while hurrying are ignored: the clean-up is already as short as it gets.

    def __enter__(self) -> "Interruptible":
        if threading.current_thread() is threading.main_thread():
            for s in SIGNALS:
                self._previous[s] = signal.signal(s, self._handler)
            self._active = True
        return self

    def __exit__(self, *exc) -> None:
        if self._active:
            for s, h in self._previous.items():
                signal.signal(s, h)
            self._active = False

    @contextmanager
    def cleaning_up(self):
        """While this block runs, a second signal raises Hurry instead of Interrupted."""
        self._cleaning = True
        try:
            yield self
        finally:
            self._cleaning = False


@contextmanager
def signals_raise():
    """For work whose own `finally` blocks take down what it started (a bench run, a tune
    trial): the first SIGINT/SIGTERM raises Interrupted where the work is; later ones are ignored,
    so the clean-up is not cut short."""
    with Interruptible():
        try:
            yield
        except KeyboardInterrupt:  # a SIGINT that arrived before the handler was installed
            raise Interrupted(signal.SIGINT) from None

