"""Test hooks on the executor's steps: the one way a test reaches into a run that changes the host
(tests/killhook.py kills hostctl there, to prove a killed run converges on the next one).

Production registers nothing, so a step costs one list test. The steps are those an action takes:
a command it is about to start (`command`, with its argv) and a file whose new text is written
and about to replace the old one (`write`, with its host path).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from hostctl.data import Data


class Step(Data):
    kind: Literal["command", "write"]
    argv: tuple[str, ...] = ()  # a command's exact argv
    path: str = ""  # the host path of a file being replaced


_callbacks: list[Callable[[Step], None]] = []


def before_step(callback: Callable[[Step], None]) -> Callable[[Step], None]:
    """Call `callback` before every step of every run in this process (and its forked children)."""
    _callbacks.append(callback)
    return callback


def command(argv: list[str] | tuple[str, ...]) -> None:
    """An action is about to start this command."""
    if _callbacks:
        _fire(Step(kind="command", argv=tuple(argv)))


def write(host_path: str) -> None:
    """An action wrote this file's new text and is about to put it in place of the old one."""
    if _callbacks:
        _fire(Step(kind="write", path=host_path))


def _fire(step: Step) -> None:
    for callback in _callbacks:
        callback(step)
