"""Log diagnosis: a runtime log (and what else is known: the kernel log's OOM and Xid lines, the
container's exit) classified against the failure catalogue in hostctl.failures.

`doctor --log FILE` calls diagnose_file(); `up` calls diagnose() on a failed start with the
container's log and state, then prints diagnosis_text(). Evidence lines are redacted.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import ConfigDict, Field

from hostctl.data import Data
from hostctl import safefs
from hostctl.failures import StartEvidence, Finding, classify
from hostctl.secrets import redact
from hostctl.errors import InputError
from hostctl.facts.records import HostFacts

MAX_LOG_BYTES = 64 * 1024 * 1024  # the tail of a bigger log is what matters


class Diagnosis(Data):
    model_config = ConfigDict(frozen=True)

    source: str  # the log's path, or what it came from ("container hostctl-runtime")
    lines: int
    findings: list[Finding] = Field(default_factory=list)
    kernel_lines: int = 0  # kernel log lines that took part

    def to_dict(self) -> dict:
        return {
            "source": self.source,
            "lines": self.lines,
            "kernel_lines": self.kernel_lines,
            "findings": [{"id": f.id, "title": f.title, "cause": f.cause, "fix": f.fix, "lines": list(f.lines)}
                         for f in self.findings],
        }


def kernel_text(facts: HostFacts | None) -> str:
    """The kernel log lines the catalogue needs (OOM kills, Xids) from the facts, if they carry any."""
    if facts is None or facts.kernel_log is None or not facts.kernel_log.available:
        return ""
    return "\n".join(e.line for e in facts.kernel_log.events)


def diagnose(log: str, *, source: str = "log", kernel_log: str = "", oom_killed: bool | None = None,
             exit_code: int | None = None, stalled_s: float | None = None) -> Diagnosis:
    findings = classify(StartEvidence(log=log, kernel_log=kernel_log, oom_killed=oom_killed, exit_code=exit_code,
                                 stalled_s=stalled_s))
    clean = [Finding(id=f.id, title=f.title, cause=f.cause, fix=f.fix, lines=[redact(line) for line in f.lines]) for f in findings]
    return Diagnosis(source=source, lines=len(log.splitlines()), findings=clean,
                     kernel_lines=len(kernel_log.splitlines()))


def read_log(path: Path) -> str:
    """The last MAX_LOG_BYTES of the log at `path`, opened as safefs.open_regular opens it: root
    reads it for whoever asked, so a link another user owns (their `runtime.log -> /etc/shadow`)
    is refused (exit 3), not followed into the diagnosis and the bundle."""
    try:
        fd, st, _ = safefs.open_regular(path)
    except FileNotFoundError:
        raise InputError(f"--log {path}: no such file", fix="save the runtime's log first, e.g. "
                         "`docker logs hostctl-runtime > runtime.log 2>&1`") from None
    except IsADirectoryError:
        raise InputError(f"--log {path} is a directory; expected a log file") from None
    except safefs.NotRegularFileError:
        raise InputError(f"--log {path} is not a regular file (a pipe or a device); expected a log file",
                         fix="save the log to a file first") from None
    except NotADirectoryError:
        raise InputError(f"--log {path}: a part of the path is not a folder") from None
    try:
        if st.st_nlink > 1:
            # A second name of another file: where fs.protected_hardlinks is off, anyone can give
            # /etc/shadow a name in /tmp, and the file's owner (root) says nothing about who did.
            raise safefs.UntrustedPathError(path, f"it is one of {st.st_nlink} hard links to the same file "
                                                  f"({safefs.describe(st)}); hostctl reads a log only by its one name",
                                            fix=f"copy the log: cp {path} ./runtime.log")
        if st.st_size > MAX_LOG_BYTES:
            os.lseek(fd, st.st_size - MAX_LOG_BYTES, os.SEEK_SET)
        chunks, size = [], 0
        while size < MAX_LOG_BYTES and (chunk := os.read(fd, min(1 << 20, MAX_LOG_BYTES - size))):
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks).decode("utf-8", "replace")
    except OSError as exc:
        raise InputError(f"--log {path}: cannot read it: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def diagnose_file(path: Path, facts: HostFacts | None = None) -> Diagnosis:
    return diagnose(read_log(path), source=str(path), kernel_log=kernel_text(facts))


def diagnosis_text(d: Diagnosis) -> str:
    kernel = f" with {d.kernel_lines} kernel log line(s)" if d.kernel_lines else ""
    head = f"log diagnosis of {d.source} ({d.lines} lines{kernel}):"
    if not d.findings:
        return head + " no known failure signature matched\n"
    out = [head]
    for f in d.findings:
        out.append(f"  {f.id}: {f.title}")
        out.append(f"      cause: {f.cause}")
        for line in f.lines:
            out.append(f"      | {line}")
        out.append(f"      fix: {f.fix}")
    return "\n".join(out) + "\n"
