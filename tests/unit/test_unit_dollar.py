"""systemd expands `${VAR}` (and a word that is `$VAR`) in an Exec*= line's arguments when the
command runs, and reads `$$` as one `$` (systemd.service(5) "Command lines"); the program's path is
not expanded. A profile path holding `$` must reach hostctl as written (issue 26, class 3: L2)."""

import re
import shutil
import subprocess

from conftest import needs_systemd_analyze
from hostctl.plan import build_plan
from hostctl.service.render import render_files
from test_cluster import replicas, write_cluster
from test_cluster_units import keys, units

import snapshots

# what systemd would expand in an argument: ${NAME} or a word that is $NAME, once every $$ is taken as one $
_EXPANDS = re.compile(r'\$\{[A-Za-z_][A-Za-z0-9_]*\}|(?:^|\s)"?\$[A-Za-z_][A-Za-z0-9_]*"?(?:\s|$)')


def _expanded(line: str) -> bool:
    return bool(_EXPANDS.search(line.replace("$$", "")))


def test_a_profile_path_with_dollar_reaches_hostctl_unexpanded():
    config, facts = snapshots.desktop()
    files = render_files(build_plan(config, facts), config_path="/etc/hostctl/p${HOME}.toml")
    for unit in ("hostctl-runtime.service", "hostctl-power.service", "hostctl-metrics.service"):
        (start,) = keys(files[unit])["ExecStart"]
        assert not _expanded(start), start
        from hostctl.service.rendercheck import exec_argv

        assert exec_argv(start)[:3] == ["/usr/local/bin/hostctl", "--config", "/etc/hostctl/p${HOME}.toml"]


def test_a_cluster_path_with_dollar_reaches_hostctl_unexpanded(tmp_path):
    odd = tmp_path / "c${HOME}"
    odd.mkdir()
    path = write_cluster(odd, replicas())
    _, rendered = units(path, "/usr/local/bin/hostctl")
    for _, text in rendered:
        for key in ("ExecStart", "ExecStop"):
            (line,) = keys(text)[key]
            assert not _expanded(line), line
            from hostctl.service.rendercheck import exec_argv

            assert exec_argv(line)[2:4] == ["--cluster", str(path)]


@needs_systemd_analyze
def test_the_program_path_is_written_as_systemd_takes_it(tmp_path):
    # systemd does not expand the program's path: a $ there stays one $ (a $$ would name another file)
    odd = tmp_path / "a$HOME"
    odd.mkdir()
    exe = odd / "hostctl"
    shutil.copy(shutil.which("true"), exe)
    config, facts = snapshots.desktop()
    files = render_files(build_plan(config, facts), hostctl_bin=str(exe), config_path="/etc/hostctl/p$x.toml")
    (tmp_path / "hostctl-runtime.service").write_text(files["hostctl-runtime.service"])
    res = subprocess.run(["systemd-analyze", "verify", "--man=no", str(tmp_path / "hostctl-runtime.service")],
                         capture_output=True, text=True)
    assert "is not executable" not in res.stderr, res.stderr


def test_exec_argv_reads_as_systemd_does():
    from hostctl.service.rendercheck import exec_argv

    assert exec_argv('"/a b/h" --config "/p/$${X}" "100%%"') == ["/a b/h", "--config", "/p/${X}", "100%"]
    assert exec_argv('"/a$b/h" x') == ["/a$b/h", "x"]  # the program's path: not expanded
    assert exec_argv('/h --config "/p/${X}"') is None  # systemd would put $X's value there
    assert exec_argv("/h $X") is None
    assert exec_argv("/h %h") is None  # a specifier
    assert exec_argv('/h "unclosed') is None
