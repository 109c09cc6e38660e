"""Packaging hook: ship templates/, systemd/, runtime/, compose/ and prometheus/ in the wheel as data files under
share/hostctl, where hostctl.paths.resource_root() looks after `pip install hostctl-*.whl`.

pyproject.toml holds the metadata; setup.py only lists the data files, by walking the
folders, so a file another change adds to them ships without editing a list.
"""

import os

from setuptools import setup

RESOURCE_DIRS = ("templates", "systemd", "runtime", "compose", "prometheus")
SKIP_DIRS = {"__pycache__"}


def data_files() -> list[tuple[str, list[str]]]:
    out = []
    for top in RESOURCE_DIRS:
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
            files = sorted(os.path.join(dirpath, f) for f in filenames if not f.startswith(".") and not f.endswith(".pyc"))
            if files:
                out.append((os.path.join("share", "hostctl", dirpath), files))
    return out


setup(data_files=data_files())
