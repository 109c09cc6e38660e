"""Benchmark: the wall time of hostctl's read-only commands (`--help`, `doctor` at the quick
level, `facts`, `plan`, `status`), each a fresh process, next to the same facts gathered by a
shell script of nvidia-smi, lsblk, findmnt and swapon calls (benchmarks/doctor_quick_facts.sh).

Run from the repository root:  python3 benchmarks/doctor_quick.py [--runs N] [--config PROFILE]

Only the standard library is imported here, and hostctl runs from this checkout (PYTHONPATH), so
it runs on a machine that has just Python and hostctl's own dependencies, e.g. the GPU machine:
  pip install --no-index --no-deps --target /tmp/site WHEELS...; PYTHONPATH=/tmp/site python3 benchmarks/doctor_quick.py
(no Docker there: status then says the engine cannot be asked, which is still a whole run). A system
python also runs its site-packages' .pth hooks on every start (39 ms of `python3 -c pass` on one H100,
a numba hook), which hostctl in install.sh's venv does not; to time what a user waits for, run it
from such a venv as well:
  python3 -m venv --without-pip /tmp/v
  pip install --no-index --no-deps --target "$(/tmp/v/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" WHEELS...
  /tmp/v/bin/python benchmarks/doctor_quick.py
Before timing, each
command runs once untimed, with bytecode writing allowed (PYTHONDONTWRITEBYTECODE is dropped for
the children): an installed hostctl has its .pyc files, and compiling ~100 modules from source
on every run is not what a user waits for.

It prints, per row, the median and the fastest of N runs (interleaved, so drift on a busy
machine hits every row alike) and the ratio of each command's median to the shell script's:
  python start-up      `python3 -c pass`: the interpreter and site alone
  import typer+rich    the chosen dependencies every command uses to parse and print, no
                       hostctl module: the floor under every command
  import hostctl.cli   what every hostctl command pays before it parses its arguments
  --help               the command list
  doctor quick         `doctor --json`, the whole process
    in-process         config + facts + plan + checks, from the document's own timings
  facts, plan, status  as a user types them (text); plan and status read and validate a profile
  shell script         the hand-gathered facts
doctor and facts run without a profile unless --config is given (as on a fresh machine); plan and
status need one and use --config, default the bundled runtime/hosts/demo-cpu.toml. The doctor
judges more than the script reads (Docker, kernel log, /dev/shm, ports, NUMA, IOMMU); the script
is the floor of "just reading".
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "doctor_quick_facts.sh"
DEMO_PROFILE = ROOT / "runtime" / "hosts" / "demo-cpu.toml"
# The budget of every read-only command (docs/house.md, "Start-up"): the median under 0.5 s on
# the GPU machine and at most 4x the shell script's, reached by importing a heavy module only on the
# path that needs it and pydantic's defer_build, never by re-implementing a library.
GOAL_S = 0.5
GOAL_RATIO = 4.0


def timed(argv: list[str], env: dict[str, str], ok: tuple[int, ...] = (0, 1)) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT, stdin=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    # doctor, plan and status exit 1 when a check fails, the plan has errors or nothing runs: still
    # a complete run. Anything else (2 bad input, 70 a bug) would time the wrong thing.
    if done.returncode not in ok:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()[-500:]}")
    return wall, done.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--config", help="host profile for every command (default: none for doctor and facts, "
                    "the bundled demo-cpu profile for plan and status)")
    ap.add_argument("--json", dest="json_out", metavar="PATH", help="also write the numbers as JSON to PATH")
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    hostctl = [sys.executable, "-m", "hostctl"]
    given = ["--config", args.config] if args.config else []
    profile = ["--config", args.config or str(DEMO_PROFILE)]
    commands = {
        "--help": (hostctl + ["--help"], (0,)),
        "doctor quick": (hostctl + ["doctor", "--json"] + given, (0, 1)),
        "facts": (hostctl + ["facts"] + given, (0,)),
        "plan": (hostctl + ["plan"] + profile, (0, 1)),
        "status": (hostctl + ["status"] + profile, (0, 1)),
    }
    # The floor the chosen dependencies set: typer and rich parse and print every command. pydantic,
    # which validates the profile on every read, counts as hostctl's own cost. No hostctl module.
    deps = "import typer, rich.console"
    baseline = {"python start-up": ([sys.executable, "-c", "pass"], (0,)),
                "import typer+rich": ([sys.executable, "-c", deps], (0,)),
                "import hostctl.cli": ([sys.executable, "-c", "import hostctl.cli"], (0,))}
    for argv, ok in list(baseline.values()) + list(commands.values()):
        timed(argv, env, ok)  # untimed: writes the bytecode caches, warms the page cache
    parts = ("  in-process (config+facts+plan+checks)", "    facts", "    checks")
    rows: dict[str, list[float]] = {k: [] for k in list(baseline) + ["--help", "doctor quick", *parts, "facts",
                                                                      "plan", "status", "shell script"]}
    summary = None
    for _ in range(args.runs):
        for name, (argv, ok) in baseline.items():
            rows[name].append(timed(argv, env, ok)[0])
        for name, (argv, ok) in commands.items():
            wall, out = timed(argv, env, ok)
            rows[name].append(wall)
            if name == "doctor quick":
                doc = json.loads(out)
                t = doc["timings_s"]
                rows[parts[0]].append(t["total"])
                rows[parts[1]].append(t["facts"])
                rows[parts[2]].append(t["checks"])
                summary = doc["summary"]
        rows["shell script"].append(timed(["sh", str(SCRIPT)], env, (0,))[0])

    medians = {k: statistics.median(v) for k, v in rows.items()}
    shell = medians["shell script"]
    host = os.uname().nodename
    print(f"hostctl read-only commands vs shell script on {host} ({os.cpu_count()} CPUs, Python "
          f"{sys.version.split()[0]}), {args.runs} fresh processes each; doctor said {summary}")
    print(f"profile: doctor, facts: {args.config or 'none'}; plan, status: {profile[1]}")
    print(f"{'':40} {'median':>9} {'fastest':>9} {'/shell':>7}")
    for name, values in rows.items():
        print(f"{name:40} {medians[name] * 1000:7.1f}ms {min(values) * 1000:7.1f}ms {medians[name] / shell:6.1f}x")
    slow = [n for n in commands if medians[n] >= GOAL_S or medians[n] > GOAL_RATIO * shell]
    print(f"budget: each command < {GOAL_S * 1000:.0f} ms (median) and <= {GOAL_RATIO:.0f}x the shell script -> "
          + ("met" if not slow else "NOT met by " + ", ".join(
              f"{n} ({medians[n] * 1000:.0f} ms, {medians[n] / shell:.1f}x)" for n in slow)))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({
            "host": host, "cpus": os.cpu_count(), "python": sys.version.split()[0], "runs": args.runs,
            "doctor_summary": summary, "profile": {"doctor_facts": args.config, "plan_status": profile[1]},
            "median_s": {k: round(v, 4) for k, v in medians.items()},
            "fastest_s": {k: round(min(v), 4) for k, v in rows.items()},
            "ratio_to_shell": {k: round(v / shell, 2) for k, v in medians.items()},
            # every run in the order it ran, rounds interleaved: a median's spread, and any drift, show
            "samples_s": {k: [round(x, 4) for x in v] for k, v in rows.items()},
        }, indent=2) + "\n")


if __name__ == "__main__":
    main()
