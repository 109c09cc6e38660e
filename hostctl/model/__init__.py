"""`hostctl model`: the checkpoint a recipe names, pinned to a commit, pulled and checked.

registry.py reads models files (vLLM-MoET's bench/models.yaml format); resolve.py decides what a
recipe's `model:` means on this host; verify.py judges what hostctl/facts/checkpoint.py read of a
checkpoint directory (quick: presence and sizes; full: every hash, facts/hashing.py); manifest.py writes
the files hostctl writes next to a checkpoint (their names and format: hostctl/facts/manifest.py);
pull.py downloads through hub.py, the only module that imports huggingface_hub (and only when a pull runs: `--help`, `plan` and `status` never load it).
The formats are described in docs/model-and-cache-formats.md.
"""
