"""hostctl: make a Linux GPU workstation a reliable local inference host for huge MoE models.

facts (read the host) -> plan (pure decisions) -> act (idempotent steps) -> verify.
"""

__version__ = "0.1.0"
