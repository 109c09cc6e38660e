"""What `hostctl up` learned about cache use when the service became ready, kept in the state
directory (cache-use.json): the compile-cache directories the runtime named in its log (vLLM logs
"Using cache directory: .../torch_compile_cache/<hash>/rank_<i>_<j> for vLLM's torch.compile"),
the pack files it opened (its pack store logs each one), and when each generation the plan used
was last used. act.record_ready writes it (recording never fails an `up`); `cache list` shows it;
decide.py uses the compile hashes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from hostctl import loglines, paths

USAGE_FILE = "cache-use.json"
USAGE_SCHEMA = "hostctl.cache-use/v1"
COMPILE_DIR_RE = re.compile(r"torch_compile_cache/(?P<hash>[^/\s]+)/rank_\d+_\d+")
# The pack store names the file it opened: "moe_w2 store[base]: PACK-FILE backend /packs/<name>.pack (...)"
# (or "TIERED backend"); docs/model-and-cache-formats.md, "Expert-store packs".
# `(?:\S*/)?` and not `\S*?`: a lazy run before `[^/\s]+` retries the name from every character of a
# long word (quadratic in a runtime log line anyone can fill); the last slash is found once.
PACK_OPENED_RE = re.compile(r"moe_w2 store\[[^\]]{0,256}\]: (?:PACK-FILE|TIERED) backend (?:\S*/)?(?P<name>[^/\s]+\.pack)\b")


def compile_hashes(log_lines: Iterable[str]) -> list[str]:
    """The compile-cache hashes the runtime said it uses."""
    return sorted({m["hash"] for line in map(loglines.bounded, log_lines)
                   if "cache directory" in line.lower() for m in COMPILE_DIR_RE.finditer(line)})


def packs_opened(log_lines: Iterable[str]) -> list[str]:
    """The pack files the runtime said it opened (file names)."""
    return sorted({m["name"] for line in map(loglines.bounded, log_lines)
                   for m in PACK_OPENED_RE.finditer(line)})


def load() -> dict:
    from hostctl.errors import InputError, UntrustedPathError
    from hostctl.safeload import MAX_CONFIG_BYTES, load_json

    try:
        doc = load_json(paths.state_dir() / USAGE_FILE, "cache-use record", limit=MAX_CONFIG_BYTES)
    except (InputError, UntrustedPathError):
        return {}
    return doc if isinstance(doc, dict) and doc.get("schema") == USAGE_SCHEMA else {}


def last_up_for(doc: dict, profile: str, recipe: str, image: str) -> dict | None:
    last = doc.get("last_up")
    if isinstance(last, dict) and (last.get("profile"), last.get("recipe"), last.get("image")) == (profile, recipe, image):
        return last
    return None
