"""hostctl.serveflags against vLLM 0.32's own parser, in the demo image (`docker run --rm
--network none`, nothing served):

- the attack is real: after hostctl's `--host 127.0.0.1`, each refused spelling makes vLLM's
  parser listen elsewhere or take a credential;
- the rendered demo project's argv parses to the plan's host and port;
- the list holds: every owned flag is one of vLLM's options, no other vLLM option is a prefix of
  an owned one (so refusing every prefix refuses nothing vLLM would read as another flag), and
  no short alias vLLM defines belongs to an owned flag (serveflags.SHORT_ALIASES); the same for
  the rendezvous flags a cluster plan owns (CLUSTER_FLAGS, serveflags.CLUSTER_ALIASES).
"""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from hostctl import examples, serveflags
from hostctl.cluster.plan import CLUSTER_FLAGS
from hostctl.config import parse_recipe
from hostctl.errors import InputError
from hostctl.plan import build_plan
from hostctl.service.render import render_files

pytestmark = [pytest.mark.system]

# Run inside the image: read argv lists from stdin, answer what vLLM's serve parser makes of each.
PROBE = r"""
import json, sys, warnings
warnings.filterwarnings("ignore")
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.entrypoints.launchers.cli_args import make_arg_parser

def parser():
    p = make_arg_parser(FlexibleArgumentParser())
    p.exit_on_error = False
    return p

req = json.load(sys.stdin)
p = parser()
options = sorted({s for a in p._actions for s in a.option_strings})
aliases = {s: [o for o in a.option_strings if o.startswith("--")][0] for a in p._actions
           for s in a.option_strings if not s.startswith("--") and s != "-h"}
parsed = []
for argv in req["argvs"]:
    try:
        ns = parser().parse_args(argv)
        parsed.append({k: getattr(ns, k, None) for k in ("host", "port", "api_key", "hf_token", "uds")})
    except BaseException as exc:
        parsed.append({"error": type(exc).__name__})
print("HOSTCTL-PROBE " + json.dumps({"options": options, "aliases": aliases, "parsed": parsed}, default=str))
"""

BASE = ["--model", "/model", "--host", "127.0.0.1", "--port", "8000"]
ATTACKS = [["--hos", "0.0.0.0"], ["--ho=0.0.0.0"], ["--host=0.0.0.0"], ["--por", "80"],
           ["--api-ke", "k-123456"], ["--api_key", "k-123456"], ["--hf-tok", "hf_abcdefghijklmnopqrstu"],
           ["--uds", "/tmp/x.sock"]]


def probe(image: str, argvs: list[list[str]]) -> dict:
    res = subprocess.run(["docker", "run", "--rm", "-i", "--network", "none", "--entrypoint", "python3", image,
                          "-c", PROBE], input=json.dumps({"argvs": argvs}), capture_output=True, text=True,
                         timeout=300)
    line = next((ln for ln in res.stdout.splitlines() if ln.startswith("HOSTCTL-PROBE ")), None)
    assert line is not None, res.stderr[-2000:]
    return json.loads(line.removeprefix("HOSTCTL-PROBE "))


def test_vllms_parser_agrees_with_serveflags(demo_image):
    config, facts = examples.load("demo-cpu")
    plan = build_plan(config, facts)
    svc = yaml.safe_load(render_files(plan)["compose.yaml"])["services"]["runtime"]
    rendered = svc["command"][3:]  # after python3 -m vllm.entrypoints.openai.api_server
    got = probe(demo_image, [rendered] + [BASE + a for a in ATTACKS])

    # The rendered project listens where the plan says.
    assert got["parsed"][0]["host"] == plan.runtime.api_host
    assert str(got["parsed"][0]["port"]) == str(plan.runtime.api_port)

    # Each attack does change what vLLM takes, and hostctl refuses it in a recipe.
    for attack, seen in zip(ATTACKS, got["parsed"][1:]):
        assert "error" not in seen, (attack, seen)
        assert (seen["host"], str(seen["port"]), seen["api_key"], seen["hf_token"], seen["uds"]) != \
            ("127.0.0.1", "8000", None, None, None), attack
        data = {k: v for k, v in config.recipe.to_dict().items() if v is not None}
        data["serve_args"] = [*data["serve_args"], " ".join(attack)]
        with pytest.raises(InputError):
            parse_recipe(data)

    options = set(got["options"])
    assert set(serveflags.OWNED) <= options
    assert [o for o in options for f in serveflags.OWNED if f.startswith(o) and o != f] == []
    owned_aliases = {s: f for s, f in got["aliases"].items() if f in serveflags.OWNED}
    assert owned_aliases == serveflags.SHORT_ALIASES
    # The same for the flags a cluster plan owns on a member (hostctl.cluster.plan.CLUSTER_FLAGS).
    assert set(CLUSTER_FLAGS) <= options
    assert [o for o in options for f in CLUSTER_FLAGS if f.startswith(o) and o != f] == []
    assert {s: f for s, f in got["aliases"].items() if f in CLUSTER_FLAGS} == serveflags.CLUSTER_ALIASES
