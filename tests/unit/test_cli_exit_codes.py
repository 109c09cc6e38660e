"""The exit codes a script relies on: an unexpected exception is one line, a hint and 70 (never a
traceback and 1), Ctrl-C is 130, and an interrupted `up` exits 128 + its signal."""

import signal

from hostctl import cli, paths
from hostctl.interrupt import Interrupted

HOSTS = paths.hosts_dir()


def test_an_internal_error_is_one_line_and_exit_70(monkeypatch, capsys, tmp_path):
    def boom(*a, **k):
        raise ZeroDivisionError("division by zero\nsecond line")

    monkeypatch.setattr("hostctl.plan.build_plan", boom)
    code = cli.main(["plan", "--config", str(HOSTS / "demo-cpu.toml"), "--facts", str(HOSTS / "demo-cpu.facts.json")])
    out, err = capsys.readouterr()
    assert code == 70 and out == ""
    lines = err.strip().splitlines()
    assert lines[0] == "hostctl: internal error: ZeroDivisionError: division by zero second line"
    assert "bug in hostctl" in lines[1] and len(lines) == 2 and "Traceback" not in err


def test_debug_prints_the_traceback(monkeypatch, capsys):
    monkeypatch.setattr("hostctl.plan.build_plan", lambda *a, **k: 1 / 0)
    monkeypatch.setenv("HOSTCTL_DEBUG", "1")
    assert cli.main(["plan", "--config", str(HOSTS / "demo-cpu.toml"), "--facts",
                     str(HOSTS / "demo-cpu.facts.json")]) == 70
    assert "Traceback (most recent call last)" in capsys.readouterr().err


def test_interruptions_exit_128_plus_the_signal(monkeypatch, capsys):
    for sig, code in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
        def interrupted(*a, _s=sig, **k):
            raise Interrupted(_s)

        monkeypatch.setattr("hostctl.plan.build_plan", interrupted)
        assert cli.main(["plan", "--config", str(HOSTS / "demo-cpu.toml"), "--facts",
                         str(HOSTS / "demo-cpu.facts.json")]) == code
        assert f"interrupted by {signal.Signals(sig).name}" in capsys.readouterr().err
    monkeypatch.setattr("hostctl.plan.build_plan", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
    assert cli.main(["plan", "--config", str(HOSTS / "demo-cpu.toml"), "--facts",
                     str(HOSTS / "demo-cpu.facts.json")]) == 130


def test_the_sigint_handler_is_restored_after_main():
    before = signal.getsignal(signal.SIGINT)
    cli.main(["--version"])
    assert signal.getsignal(signal.SIGINT) is before
