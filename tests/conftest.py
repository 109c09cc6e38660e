import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
# CI installs every real part: there, a missing part must fail the test, not skip it (tests/need.py).
import killhook  # noqa: E402  (after the path: tests/killhook.py)
import need  # noqa: E402  (after the path: tests/need.py)
from need import IN_CI, needs  # noqa: E402,F401  (IN_CI: re-exported for the tier conftests)
from vm import early as vm_early  # noqa: E402

UNIT_TIER = ROOT / "tests" / "unit"

# The kill points (HOSTCTL_TEST_KILL_AT) are hooked in now, at import, so that a child forked from
# this process (tests/system/test_storage_safety.py) has them too.
killhook.install()


def _has_compose() -> bool:
    return shutil.which("docker") is not None and subprocess.run(
        ["docker", "compose", "version"], capture_output=True).returncode == 0


needs_compose = needs(_has_compose(), "Docker Compose v2 not installed (.ci/run installs it)")
needs_root = needs(os.geteuid() == 0, "needs root")
needs_systemd_analyze = needs(shutil.which("systemd-analyze") is not None, "systemd-analyze not installed")


@pytest.fixture(autouse=True)
def _private_sysroot(tmp_path_factory, monkeypatch):
    """Every test writes hostctl's /etc and /var/lib files under its own temporary root unless it
    sets HOSTCTL_SYSROOT itself: a test that forgets must not change this machine."""
    monkeypatch.setenv("HOSTCTL_SYSROOT", str(tmp_path_factory.mktemp("sysroot")))


@pytest.fixture(autouse=True)
def _storage_guest_beside_the_unit_tier(request, tmp_path_factory):
    """With the first unit test, the vm tier's storage guest starts on the other CPU when the
    session holds it (tests/vm/early.py); a no-op after that, and in every other tier."""
    if UNIT_TIER in request.node.path.parents:
        vm_early.start_storage(request.session.items, tmp_path_factory)


def pytest_sessionfinish(session):
    vm_early.stop_untaken()


@pytest.fixture
def repo_root() -> Path:
    return ROOT


# ---------------------------------------------------------------- the shared demo runtime (tests/system)

sys.path.insert(0, str(ROOT / "tests" / "system"))
import runtime_fixtures  # noqa: E402  (after the path: tests/system/runtime_fixtures.py)

_boots: runtime_fixtures.BootCounter | None = None


def pytest_configure(config):
    global _boots
    config.addinivalue_line("markers", f"{need.MARK}(ok, reason): a part the test needs (tests/need.py)")
    config.addinivalue_line("markers", f"{runtime_fixtures.STOPS_MARK}: takes the shared demo runtime down "
                            "(runs after every test that uses it)")
    _boots = runtime_fixtures.BootCounter()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    need.check_marks(item)


def pytest_collection_modifyitems(config, items):
    runtime_fixtures.order(items)


def pytest_terminal_summary(terminalreporter):
    names = _boots.stop() if _boots is not None else None
    if names is None:
        return
    ours = [n for n in names if n.startswith("hc5-")]  # the tests' own projects
    if ours:
        shared = sum(1 for n in ours if n == f"hc5-{runtime_fixtures.SHARED_NAME}-runtime")
        terminalreporter.write_line(f"runtime boots: {len(ours)} container start(s) of the demo runtime or a stub "
                                    f"({shared} shared): " + ", ".join(sorted(set(ours))))


@pytest.fixture(scope="session")
def demo_image():
    return runtime_fixtures.build_demo_image()


@pytest.fixture(scope="session")
def shared_runtime(demo_image, tmp_path_factory):
    """The session's one demo runtime (tests/system/runtime_fixtures.py)."""
    yield from runtime_fixtures.shared_runtime(demo_image, tmp_path_factory)


@pytest.fixture
def host_factory(tmp_path):
    made: list = []

    def make(name: str, port: int, **kw):
        (tmp_path / name).mkdir()
        h = runtime_fixtures.Host(tmp_path / name, name, port, **kw)
        made.append(h)
        return h

    yield make
    for h in made:
        h.cleanup()
