"""What one `hostctl doctor` run was asked for: the options the CLI passes to hostctl.doctor.run.

A module of its own so that the CLI names the options without importing the checks.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ConfigDict

from hostctl.data import Data


class DoctorOptions(Data):
    model_config = ConfigDict(frozen=True)

    config_path: Path | None = None
    facts_path: Path | None = None
    level: str = "quick"
    as_json: bool = False  # `json` would shadow pydantic's BaseModel.json
    strict: bool = False
    log: Path | None = None
    bundle: Path | None = None
