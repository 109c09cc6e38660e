"""hostctl.act: the one executor of every change to the host (docs/house.md, "One executor").

A part reads the host (facts), decides purely what is still needed (actions.py: an Assessment
of Actions, each saying what it changes and why), and the executor (executor.py) prints that,
asks consent (consent.py), runs the actions under the host lock (lock.py), reads again and
decides again until nothing is left: verified. `--dry-run` reads and decides once and changes
nothing. Every run is reported in one JSON shape (report.py); tests reach into a run only through
hooks.py, never through code in the runner.
"""
