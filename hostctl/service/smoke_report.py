"""The smoke suite's result (hostctl.service.smoke runs it): one record per request, and the
report `up`'s gate and `hostctl smoke` print and save as last-smoke.json (service/saved.py).
Apart from the suite, so that `status` reads the saved report without the HTTP client."""

from __future__ import annotations

from pydantic import Field

from hostctl.data import Data
from hostctl.urldisplay import display

SMOKE_SCHEMA = "hostctl.smoke/v1"


class SmokeResult(Data):
    name: str
    kind: str
    ok: bool
    latency_s: float
    expected: str | None = None
    got: str | None = None
    detail: str | None = None

    def line(self) -> str:
        head = f"{'ok  ' if self.ok else 'FAIL'} {self.name} ({self.kind}) {self.latency_s * 1000:.0f} ms"
        if self.ok:
            return head + (f": {self.got}" if self.got else "")
        out = head + f": expected {self.expected!s}, got {self.got!s}"
        return out + (f" ({self.detail})" if self.detail else "")


class SmokeReport(Data):
    url: str
    served_name: str
    started_at: str
    results: list[SmokeResult] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.results) and all(r.ok for r in self.results)

    @property
    def failures(self) -> list[SmokeResult]:
        return [r for r in self.results if not r.ok]

    def to_dict(self) -> dict:
        return {"schema": SMOKE_SCHEMA, "url": display(self.url), "served_name": self.served_name, "started_at": self.started_at,
                "ok": self.ok, "results": [r.model_dump() for r in self.results]}

    def text(self) -> str:
        lines = [f"smoke {display(self.url)} ({self.served_name}): "
                 f"{'passed' if self.ok else 'FAILED'} {sum(r.ok for r in self.results)}/{len(self.results)}"]
        return "\n".join(lines + ["  " + r.line() for r in self.results]) + "\n"
