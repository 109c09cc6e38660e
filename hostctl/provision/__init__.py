"""Provisioning the host: the parts of `hostctl provision`, each run by the one executor
(hostctl.act).

Each part (storage, system, gpu; parts.py holds their order, storage_part.py the storage part)
reads the facts and the system files it manages, then decides purely (`decide(...) ->
Assessment`: storage.py, system.py, gpu.py) the Actions still needed: none when the host already
matches. executor.py holds what provision brings to the executor (its lock, the disk locks, its
report's schema tag); converged.py what it records of a part that converged.
"""
