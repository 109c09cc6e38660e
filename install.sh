#!/bin/sh
# Installs hostctl for root and for the boot units: a venv under /opt/hostctl that root owns,
# holding a copy of this checkout (not an editable link to it), and /usr/local/bin/hostctl
# linking to its console script, the path every unit calls. Why not the user's own venv: the
# units run hostctl as root at every boot, so code any other account can edit would be code
# that account runs as root; `hostctl provision` refuses such a hostctl (README "On a real host").
#
#   sudo ./install.sh          install or upgrade (re-run after `git pull`)
#
# HOSTCTL_PREFIX (default /opt/hostctl) and HOSTCTL_BIN_DIR (default /usr/local/bin) move the two
# places (tests install into a temporary tree).
set -eu
prefix=${HOSTCTL_PREFIX:-/opt/hostctl}
bin_dir=${HOSTCTL_BIN_DIR:-/usr/local/bin}
python=${PYTHON:-python3}

if [ "$(id -u)" != 0 ]; then
    echo "install.sh: expected to run as root, found uid $(id -u): run \`sudo $0\`" >&2
    exit 3
fi
src=$(cd "$(dirname "$0")" && pwd -P)
umask 022  # nothing the install makes may be group- or world-writable

# Built from root's own copy of the checkout: what is built is what was copied (the checkout may
# change meanwhile), and the build leaves nothing of root's (build/, *.egg-info) in the user's tree.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar -C "$src" --exclude=./.git --exclude=./.venv --exclude=./build --exclude='*.egg-info' -cf - . | tar -C "$work" -xf -

"$python" -m venv "$prefix"
# A plain install (not -e), so the venv holds root's copy and the checkout can stay the user's.
"$prefix/bin/python" -m pip install --quiet --disable-pip-version-check --no-cache-dir --upgrade "$work"
mkdir -p "$bin_dir"
ln -sfn "$prefix/bin/hostctl" "$bin_dir/hostctl"
echo "installed: $bin_dir/hostctl -> $prefix/bin/hostctl ($("$bin_dir/hostctl" --version 2>/dev/null || echo hostctl))"
