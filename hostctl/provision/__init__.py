"""Acting on the host: the only code that changes it, in one protocol for every part.

Each part (storage, system, gpu; parts.py holds their order) reads the facts and the system files
it manages, then decides purely (`decide(...) -> Decision`, actions.py) the Actions still needed:
none when the host already matches. One executor (executor.py) runs any list of them under one
lock, then reads the host again and decides again until nothing is left, so a re-run is a no-op,
--dry-run prints exactly what would run, and every part proves its effect by a fresh look.
"""
