"""A test image whose entrypoint exits at once (code 3) after one log line, FROM the
debootstrap base: the fastest possible death, for the benchmark's death-to-diagnosis time."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

TAG = "hc5-exit-at-once:bench"


def build_exit_image(base: str, tag: str = TAG) -> str:
    ctx = Path(tempfile.mkdtemp(prefix="hc5-exit-"))
    try:
        (ctx / "hostctl-entrypoint").write_text("#!/bin/sh\necho 'fatal: runtime refused to start (test image)' >&2\nexit 3\n")
        (ctx / "Dockerfile").write_text("ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\n"
                                        "COPY hostctl-entrypoint /usr/local/bin/hostctl-entrypoint\n"
                                        "RUN chmod 0755 /usr/local/bin/hostctl-entrypoint\n")
        subprocess.run(["docker", "build", "-q", "--network", "host", "--build-arg", f"BASE_IMAGE={base}", "-t", tag,
                        str(ctx)], check=True, capture_output=True, env=dict(os.environ, DOCKER_BUILDKIT="0"))
        return tag
    finally:
        shutil.rmtree(ctx, ignore_errors=True)
