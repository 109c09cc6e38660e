"""Reading what a test guest left on its results disk: the files (copied out with debugfs, so
the host mounts nothing), the driver's state, and the JUnit XML of each in-guest phase."""

from __future__ import annotations

import json
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path


def read_results(disk: Path, dest: Path, folder: str = "out") -> Path:
    """Copy /<folder> of the results disk to dest/<folder>; returns that folder."""
    dest.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["debugfs", "-R", f"rdump /{folder} {dest}", str(disk)], capture_output=True, text=True,
                          timeout=120)
    out = dest / folder
    if proc.returncode != 0 or not out.is_dir():
        raise RuntimeError(f"debugfs could not read /{folder} from {disk}: {proc.stderr.strip()[-500:]}")
    return out


@dataclass
class Case:
    name: str
    outcome: str  # passed | failed | error | skipped
    message: str = ""


@dataclass
class Phase:
    name: str
    cases: list[Case] = field(default_factory=list)

    def with_outcome(self, *outcomes: str) -> list[Case]:
        return [c for c in self.cases if c.outcome in outcomes]

    def report(self) -> str:
        lines = [f"guest phase {self.name}: " + ", ".join(
            f"{n} {o}" for o in ("passed", "failed", "error", "skipped") if (n := len(self.with_outcome(o))))]
        for c in self.cases:
            if c.outcome != "passed":
                lines.append(f"  {c.outcome.upper()} {c.name}: {c.message.strip()[:1500]}")
        return "\n".join(lines)


def read_junit(path: Path) -> Phase:
    phase = Phase(path.stem)
    for tc in ET.parse(path).getroot().iter("testcase"):
        name = tc.get("name", "?")
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            el = tc.find(tag)
            if el is not None:
                outcome = {"failure": "failed"}.get(tag, tag)
                message = (el.get("message") or "") + ("\n" + el.text if el.text and tag != "skipped" else "")
                break
        phase.cases.append(Case(name, outcome, message))
    return phase


def read_state(out: Path) -> dict:
    try:
        return json.loads((out / "state.json").read_text())
    except (OSError, ValueError):
        return {}
