"""A loopback stand-in for the Hugging Face Hub, serving the endpoints huggingface_hub calls to
download a model repository, for a tiny repository made in the test:

- GET  /api/models/{repo}/revision/{revision}[?blobs=true]: the commit the revision resolves to
  and the files ("siblings") with size, git blob id and, for LFS files, {size, sha256, pointerSize};
- HEAD and GET /{repo}/resolve/{revision}/{file}: the file, with the headers huggingface_hub reads
  (X-Repo-Commit, ETag, and for LFS files X-Linked-Etag / X-Linked-Size), Accept-Ranges, and
  206 Partial Content for `Range: bytes=N-` (how an interrupted download resumes).

Errors carry the hub's X-Error-Code (RepoNotFound, RevisionNotFound, GatedRepo, EntryNotFound).
No Xet headers are sent, so huggingface_hub takes its plain HTTP path. It can throttle file bodies
(to kill a download mid-file) and require a bearer token (a gated repository); every request is
logged (method, path, Range, and whether the right token came with it; never the token itself).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(data: bytes) -> bytes:
    return (f"version https://git-lfs.github.com/spec/v1\noid sha256:{hashlib.sha256(data).hexdigest()}\n"
            f"size {len(data)}\n").encode()


@dataclass
class Repo:
    repo_id: str
    files: dict[str, bytes]
    lfs: set[str]  # names served as LFS files
    commit: str = field(default_factory=lambda: os.urandom(20).hex())
    branches: dict[str, str] = field(default_factory=dict)

    def __post_init__(self):
        self.branches.setdefault("main", self.commit)

    def resolve(self, revision: str) -> str | None:
        if revision == self.commit:
            return revision
        return self.branches.get(revision)

    def sibling(self, name: str) -> dict:
        data = self.files[name]
        if name in self.lfs:
            pointer = lfs_pointer(data)
            return {"rfilename": name, "size": len(data), "blobId": git_blob_id(pointer),
                    "lfs": {"size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "pointerSize": len(pointer)}}
        return {"rfilename": name, "size": len(data), "blobId": git_blob_id(data)}

    def etag(self, name: str) -> str:
        data = self.files[name]
        return hashlib.sha256(data).hexdigest() if name in self.lfs else git_blob_id(data)


@dataclass
class Logged:
    method: str
    path: str
    range: str | None
    authorized: bool
    status: int = 0


class Hub:
    def __init__(self, repo: Repo, token: str | None = None, also: tuple[Repo, ...] = ()):
        self.repo = repo
        self.repos = {r.repo_id: r for r in (repo, *also)}  # `also`: more repositories on the same hub
        self.token = token
        self.log: list[Logged] = []
        self.throttle_bps: int | None = None  # bytes per second for file bodies
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="hub", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> "Hub":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def requests(self, method: str | None = None, contains: str = "") -> list[Logged]:
        with self.lock:
            return [r for r in self.log if (method is None or r.method == method) and contains in r.path]

    def _handler(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet: the test reads hub.log
                pass

            def _entry(self) -> Logged:
                auth = self.headers.get("Authorization")
                entry = Logged(self.command, self.path, self.headers.get("Range"),
                               authorized=hub.token is not None and auth == f"Bearer {hub.token}")
                with hub.lock:
                    hub.log.append(entry)
                return entry

            def _error(self, entry: Logged, status: int, code: str, message: str = "") -> None:
                entry.status = status
                body = json.dumps({"error": message or code}).encode()
                self.send_response(status)
                self.send_header("X-Error-Code", code)
                if message:
                    self.send_header("X-Error-Message", message)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body) if self.command != "HEAD" else 0))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _gate(self, entry: Logged) -> bool:
                if hub.token is not None and not entry.authorized:
                    self._error(entry, 401, "GatedRepo", "Access to model is restricted.")
                    return False
                return True

            def do_GET(self) -> None:
                self._serve(body=True)

            def do_HEAD(self) -> None:
                self._serve(body=False)

            def _serve(self, body: bool) -> None:
                entry = self._entry()
                path = unquote(urlsplit(self.path).path)
                repo = next((r for r in hub.repos.values() if path.startswith((f"/api/models/{r.repo_id}/revision/",
                                                                              f"/{r.repo_id}/resolve/"))), hub.repo)
                api = f"/api/models/{repo.repo_id}/revision/"
                resolve = f"/{repo.repo_id}/resolve/"
                if path.startswith(api):
                    if not self._gate(entry):
                        return
                    commit = repo.resolve(path[len(api):])
                    if commit is None:
                        return self._error(entry, 404, "RevisionNotFound", "Invalid rev id")
                    doc = {"_id": "0" * 24, "id": repo.repo_id, "modelId": repo.repo_id, "sha": commit,
                           "private": False, "gated": "auto" if hub.token else False, "disabled": False,
                           "siblings": [repo.sibling(n) for n in sorted(repo.files)]}
                    data = json.dumps(doc).encode()
                    entry.status = 200
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    if body:
                        self.wfile.write(data)
                    return
                if path.startswith(resolve):
                    if not self._gate(entry):
                        return
                    revision, _, name = path[len(resolve):].partition("/")
                    commit = repo.resolve(revision)
                    if commit is None:
                        return self._error(entry, 404, "RevisionNotFound", "Invalid rev id")
                    if name not in repo.files:
                        return self._error(entry, 404, "EntryNotFound", "Entry not found")
                    return self._file(entry, repo, commit, name, body)
                return self._error(entry, 404, "RepoNotFound", "Repository not found")

            def _file(self, entry: Logged, repo: Repo, commit: str, name: str, body: bool) -> None:
                data = repo.files[name]
                start = 0
                rng = self.headers.get("Range")
                if rng and rng.startswith("bytes=") and rng.endswith("-"):
                    start = int(rng[len("bytes="):-1])
                status = 206 if start else 200
                entry.status = status
                self.send_response(status)
                self.send_header("X-Repo-Commit", commit)
                etag = repo.etag(name)
                self.send_header("ETag", f'"{etag}"')
                if name in repo.lfs:
                    self.send_header("X-Linked-Etag", f'"{etag}"')
                    self.send_header("X-Linked-Size", str(len(data)))
                self.send_header("Accept-Ranges", "bytes")
                self.send_header("Content-Type", "application/octet-stream")
                if start:
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                self.send_header("Content-Length", str(len(data) - start))
                self.end_headers()
                if not body:
                    return
                view = memoryview(data)[start:]
                step = 64 * 1024
                try:
                    for i in range(0, len(view), step):
                        self.wfile.write(view[i:i + step])
                        if hub.throttle_bps:
                            time.sleep(step / hub.throttle_bps)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        return Handler
