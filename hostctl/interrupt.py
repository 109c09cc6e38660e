"""Ctrl-C and SIGTERM during long work (a bench run, a tune trial): both become one exception,
raised in the main thread where the work is, so `finally` blocks take down what was started and
the caller records the run as interrupted before exiting 130 (SIGINT) or 143 (SIGTERM), the
shell's convention of 128 + the signal number.

`Interrupted` derives from BaseException, as KeyboardInterrupt does: an `except Exception` that
guards one probe or one trial must not swallow the user's request to stop.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Interrupted(BaseException):
    def __init__(self, signum: int):
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name


@contextmanager
def signals_raise() -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM raise Interrupted; the previous handlers come back after.
    Outside the main thread (where Python delivers signals) it changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, _frame):
        # Once is enough: a second signal during the clean-up must not cut the clean-up short.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Interrupted(signum)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    except KeyboardInterrupt:  # a SIGINT that arrived before the handler was installed
        raise Interrupted(signal.SIGINT) from None
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
