"""The runtime service: its Compose project and units rendered and checked (render.py,
rendercheck.py), its lifecycle (`up`, `down`, `status`, `smoke`: lifecycle.py, preflight.py,
smoke.py, status.py), the supervisor that watches it (supervise.py, supervisor.py) and the state it
leaves for later commands (saved.py)."""
