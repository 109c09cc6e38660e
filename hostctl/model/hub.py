"""The hub, through huggingface_hub: the only module that imports it, and only inside these
functions, so the commands that never download (`--help`, `plan`, `status`, `up`) never load it.

What is used (huggingface_hub 1.15, pinned in pyproject.toml):
- `HfApi.model_info(repo, revision=commit, files_metadata=True)`: the commit the revision
  resolves to and every file with its size, git blob id and, for LFS files, the sha256
  (GET {endpoint}/api/models/{repo}/revision/{revision}?blobs=true);
- `hf_hub_download(..., local_dir=...)`: one file into the checkpoint directory
  (HEAD then GET {endpoint}/{repo}/resolve/{commit}/{file}). An interrupted download stays in
  `<dir>/.cache/huggingface/download/<hash>.<etag>.incomplete` (written in 10 MiB pieces, so a
  kill loses at most the piece in flight) and the next call resumes it with a Range request; huggingface_hub 1.18 and later start over instead (a unique file per process),
  which is why it is pinned below that.
- the token: huggingface_hub's own lookup (HF_TOKEN, then the token file under HF_HOME).
  hostctl never reads, prints or stores it.
Where the hub serves a file through Xet and hf_xet is installed, huggingface_hub takes that path;
hostctl's tests exercise the plain HTTP path only (HF_HUB_DISABLE_XET=1 against a loopback hub).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable

from pydantic import ConfigDict

from hostctl.data import Data
from hostctl.errors import FailedError, InputError, RefusedError
from hostctl.safepaths import relative_names_problem
from hostctl.urldisplay import display

INCOMPLETE_DIR = os.path.join(".cache", "huggingface", "download")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_BLOB_ID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # git's sha1 blob id (sha256 in a sha256 repository)


class RemoteFile(Data):
    model_config = ConfigDict(frozen=True)

    name: str
    size: int
    lfs_sha256: str | None  # LFS (and Xet) files: the content sha256 the hub publishes
    blob_id: str | None  # the git blob id (for an LFS file, that of its pointer)

    @property
    def etag(self) -> str | None:
        """What huggingface_hub names the incomplete download after."""
        return self.lfs_sha256 or self.blob_id


class RemoteSnapshot(Data):
    model_config = ConfigDict(frozen=True)

    repo: str
    commit: str
    files: list[RemoteFile]

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)


class UnsafeListingError(RefusedError):
    """The hub listed a file name that is not a plain relative path (exit 3): hostctl joins those
    names onto the model folder, so one such name refuses the whole listing before any file is
    written, replaced or deleted. Refused for safety rather than failed (exit 1): running the pull
    again cannot help, the hub (or whatever answers at HF_ENDPOINT) has to change."""

    code = "unsafe-hub-listing"

    def __init__(self, message: str, *, name: str, fix: str):
        self.name = name
        super().__init__(message, fix=fix)


def _endpoint() -> str:
    """HF_ENDPOINT or the hub's default; show it only through hostctl.urldisplay.display."""
    from huggingface_hub import constants

    return constants.ENDPOINT


def _translate(exc: Exception, repo: str, revision: str, what: str) -> Exception:
    """huggingface_hub's errors as hostctl's, by type (never by message); no header or token is echoed."""
    from huggingface_hub import errors as hf

    if isinstance(exc, hf.GatedRepoError):
        return FailedError(f"{repo} is gated: the hub wants an account that accepted its terms",
                           fix="accept the terms on the model's page, then export HF_TOKEN (or `hf auth login`)")
    if isinstance(exc, hf.RevisionNotFoundError):
        return InputError(f"the hub has no revision {revision} of {repo}",
                          fix="check the commit hash (the model's page lists its history)")
    if isinstance(exc, hf.RepositoryNotFoundError):
        return InputError(f"the hub has no repository {repo} (or it is private and the token, if any, may not read it)",
                          fix="check the name; for a private repository export HF_TOKEN")
    if isinstance(exc, hf.RemoteEntryNotFoundError):
        return FailedError(f"{what}: the hub lists the file but does not serve it at {revision}",
                           fix="run the pull again; if it persists the repository changed under the revision")
    if isinstance(exc, hf.HfHubHTTPError):
        status = exc.response.status_code if exc.response is not None else "?"
        return FailedError(f"{what}: the hub answered HTTP {status}", fix="run the pull again (it resumes)")
    if isinstance(exc, hf.OfflineModeIsEnabled):
        return FailedError(f"{what}: HF_HUB_OFFLINE is set", fix="unset HF_HUB_OFFLINE to download")
    import httpx

    if isinstance(exc, httpx.HTTPError):
        return FailedError(f"{what}: cannot reach the hub at {display(_endpoint())}: {exc.__class__.__name__}",
                           fix="check the network (or HF_ENDPOINT), then run the pull again (it resumes)")
    return exc


def remote_snapshot(repo: str, revision: str) -> RemoteSnapshot:
    from huggingface_hub import HfApi

    try:
        info = HfApi().model_info(repo, revision=revision, files_metadata=True)
    except Exception as exc:
        raise _translate(exc, repo, revision, f"listing {repo}@{revision}") from None
    siblings = list(info.siblings or [])
    bad = relative_names_problem([s.rfilename for s in siblings])
    if bad is not None:
        raise UnsafeListingError(
            f"the hub at {display(_endpoint())} lists {bad[0]!r} in {repo}@{revision}, which is not a plain path inside the "
            f"model folder ({bad[1]}); nothing was downloaded, written or deleted", name=bad[0],
            fix="a real repository never names a file like that: check HF_ENDPOINT (a mirror or proxy may be "
                "altering the listing) and the repository id")
    files = []
    for s in siblings:
        if s.size is None:
            raise FailedError(f"the hub listed {s.rfilename} without a size", fix="run the pull again")
        sha = s.lfs.sha256 if s.lfs is not None else None
        if not (_HEX64.fullmatch(sha or "") or (sha is None and _BLOB_ID.fullmatch(s.blob_id or ""))):
            # Without a well-formed hash the file could not be checked (and the pull says every file
            # was); the hash also names huggingface_hub's partial download, so it must be plain hex.
            raise FailedError(f"the hub at {display(_endpoint())} listed {s.rfilename!r} without a usable hash (LFS sha256 "
                              f"{sha!r}, git blob id {s.blob_id!r}): it could not be checked after the download; "
                              "nothing was downloaded", fix="run the pull again; if it persists, check HF_ENDPOINT")
        files.append(RemoteFile(name=s.rfilename, size=int(s.size),
                                lfs_sha256=(s.lfs.sha256 if s.lfs is not None else None), blob_id=s.blob_id))
    return RemoteSnapshot(repo=repo, commit=info.sha or "", files=sorted(files, key=lambda f: f.name))


def token_source() -> str | None:
    """Where huggingface_hub will take a token from, in words (never the token)."""
    if os.environ.get("HF_TOKEN"):
        return "HF_TOKEN"
    from huggingface_hub import constants

    return "the hub's token file" if os.path.isfile(constants.HF_TOKEN_PATH) else None


def partial_sizes(model_dir: str) -> dict[str, int]:
    """Bytes each interrupted download left, by the etag huggingface_hub names its incomplete file
    after (`<hash>.<etag>.incomplete`); read without following a link below the model folder."""
    from hostctl import safefs

    sizes: dict[str, int] = {}
    try:
        with safefs.opened_dir(model_dir) as base, \
                safefs.closing_fd(safefs.open_below(base, INCOMPLETE_DIR, shown=model_dir)) as dfd:
            for entry in os.listdir(dfd):
                parts = entry.split(".")
                if len(parts) != 3 or parts[2] != "incomplete":
                    continue
                st = os.stat(entry, dir_fd=dfd, follow_symlinks=False)
                if stat.S_ISREG(st.st_mode):
                    sizes[parts[1]] = max(sizes.get(parts[1], 0), st.st_size)
    except (FileNotFoundError, NotADirectoryError):
        pass
    return sizes


def remove_partials(model_dir: str) -> None:
    """Remove what interrupted downloads left (once every file is in, it is garbage), by its
    folder's fd: a link there is removed itself, never what it points to."""
    from hostctl import safefs

    try:
        with safefs.opened_dir(model_dir) as base, \
                safefs.closing_fd(safefs.open_below(base, INCOMPLETE_DIR, shown=model_dir)) as dfd:
            for entry in os.listdir(dfd):
                if entry.endswith(".incomplete"):
                    try:
                        os.unlink(entry, dir_fd=dfd)
                    except (FileNotFoundError, IsADirectoryError):
                        pass
    except (FileNotFoundError, NotADirectoryError):
        pass


def download(repo: str, commit: str, f: RemoteFile, model_dir: str, on_bytes: Callable[[int], None]) -> str:
    """One file into model_dir (resuming what an earlier run left); returns its path."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.utils import tqdm as hf_tqdm

    class Bar(hf_tqdm):
        """Feeds hostctl's progress instead of drawing tqdm's bar."""

        def __init__(self, *args, **kwargs):
            kwargs["disable"] = True  # `initial` (bytes resumed) is counted by the caller already
            super().__init__(*args, **kwargs)

        def update(self, n=1):
            if n:
                on_bytes(int(n))
            return super().update(n)

    try:
        return hf_hub_download(repo, f.name, revision=commit, local_dir=model_dir, tqdm_class=Bar)
    except Exception as exc:
        raise _translate(exc, repo, commit, f"downloading {f.name}") from None
