"""`hostctl cache`: the runtime's caches on the profile's drives (planes, expert-store packs and
their rank-store copies, vLLM's compile cache) by generation: what each holds, whether it is
complete, whether the current plan uses it, and removing the ones it does not.

hostctl/facts/cache_layout.py knows the runtime's names and keys (docs/model-and-cache-formats.md,
"Caches"); hostctl/facts/caches.py reads the directories; identity.py computes the runtime's
checkpoint identity; decide.py judges (pure); usage.py keeps what `up` learned; act.py lists and
verifies; prune.py removes, through hostctl.act.
"""
