"""hostctl.interrupt: the first signal interrupts the work, a second one during the clean-up says
hurry, exit codes are 128 + the signal; handlers are restored afterwards. Real signals, sent to
this process."""

import os
import signal
import time

import pytest

from hostctl.interrupt import Hurry, Interrupted, Interruptible


def _wait_for_signal():
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        time.sleep(0.01)
    raise AssertionError("no signal arrived")


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_first_signal_interrupts_with_its_exit_code(sig, code):
    before = signal.getsignal(sig)
    with Interruptible() as guard:
        with pytest.raises(Interrupted) as info:
            os.kill(os.getpid(), sig)
            _wait_for_signal()
    assert info.value.exit_code == code and info.value.name == signal.Signals(sig).name
    assert guard.first == sig
    assert signal.getsignal(sig) is before  # restored


def test_second_signal_during_clean_up_hurries_and_a_third_is_ignored():
    steps = []
    with Interruptible() as guard:
        try:
            os.kill(os.getpid(), signal.SIGINT)
            _wait_for_signal()
        except Interrupted:
            with guard.cleaning_up():
                try:
                    os.kill(os.getpid(), signal.SIGTERM)
                    _wait_for_signal()
                except Hurry:
                    steps.append("hurry")
                    os.kill(os.getpid(), signal.SIGINT)  # ignored: already as fast as it gets
                    time.sleep(0.1)
                    steps.append("killed")
    assert steps == ["hurry", "killed"] and guard.hurried
