"""hostctl.serveflags against vLLM 0.32's own parser, in the demo image (`docker run --rm
--network none`, nothing served):

- the attack is real: after hostctl's `--host 127.0.0.1`, each refused spelling makes vLLM's
  parser listen elsewhere or take a credential;
- the rendered demo project's argv parses to the plan's host and port;
- serveflags.vllm_argv is vLLM's own rewrite: for dotted keys (`--api-ke.x K` becomes
  `--api-ke {"x": "K"}` at the end), `+` lists, `-O`, underscores and the token a dotted key
  swallows, it gives the argv vLLM hands to argparse; and vLLM reads no `@file`;
- the list holds: every owned flag is one of vLLM's options, no other vLLM option is a prefix of
  an owned one (so refusing every prefix refuses nothing vLLM would read as another flag), and
  no short alias vLLM defines belongs to an owned flag (serveflags.SHORT_ALIASES); the same for
  the rendezvous flags a cluster plan owns (CLUSTER_FLAGS, serveflags.CLUSTER_ALIASES);
- what `hostctl client` tells a client the server does is what vLLM's parser reads from the
  recipe: tool calling and the output cap, in every spelling (serveflags.READ and last).
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
from hostctl.service import clientconfig
from hostctl.service.render import render_files

pytestmark = [pytest.mark.system]

# Run inside the image: read argv lists from stdin, answer what vLLM's serve parser makes of each.
PROBE = r"""
import argparse, json, sys, warnings
warnings.filterwarnings("ignore")
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.entrypoints.launchers.cli_args import make_arg_parser

# What FlexibleArgumentParser hands to argparse after its own rewrite, recorded as it is passed on.
handed = []
_parse_args = argparse.ArgumentParser.parse_args
def recording(self, args=None, namespace=None):
    handed.append(list(args))
    return _parse_args(self, args, namespace)
argparse.ArgumentParser.parse_args = recording

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
    handed.clear()
    try:
        ns = parser().parse_args(argv)
        parsed.append({k: getattr(ns, k, None) for k in ("host", "port", "api_key", "hf_token", "uds",
                                                         "enable_auto_tool_choice", "override_generation_config")})
    except BaseException as exc:
        parsed.append({"error": type(exc).__name__})
    parsed[-1]["handed"] = handed[0] if handed else None
print("HOSTCTL-PROBE " + json.dumps({"options": options, "aliases": aliases, "parsed": parsed,
                                     "fromfile": p.fromfile_prefix_chars}, default=str))
"""

BASE = ["--model", "/model", "--host", "127.0.0.1", "--port", "8000"]
ATTACKS = [["--hos", "0.0.0.0"], ["--ho=0.0.0.0"], ["--host=0.0.0.0"], ["--por", "80"],
           ["--api-ke", "k-123456"], ["--api_key", "k-123456"], ["--hf-tok", "hf_abcdefghijklmnopqrstu"],
           ["--uds", "/tmp/x.sock"],
           # vLLM's dotted keys: removed, and appended at the end as KEY <json>, so they win
           ["--api-ke.x", "k-123456"], ["--api_key.x=k-123456"], ["--uds.x", "/tmp/x.sock"], ["--host.x", "0.0.0.0"],
           ["--ho.x=0.0.0.0"], ["--hf-token.x", "hf_abcdefghijklmnopqrstu"]]
# argvs whose rewrite vllm_argv must give exactly as vLLM does (each parses or fails: only the rewrite is compared)
REWRITES = [["--api-key.a+", "k1,k2", "--api-key.b", "2"], ["--compilation-config.mode", "3",
             "--compilation-config.pass_config.x=true", "--compilation_config.pass_config.y", "1k",
             "--compilation-config.z", "2K", "--compilation-config.w", "2.5K", "--compilation-config.v", "007"],
            ["--enforce-eager.x", "--host", "0.0.0.0"], ["-O3"], ["-O=2"], ["-O", "1"], ["-O.x"],
            ["--max_num_seqs=2", "--hf_overrides.a_b.c_d", "{\"e\": 1}"], ["--host=1.2.3.4", "--host.x=1.2"],
            ["-tp.x", "2"], ["--served_model_name", "a", "--enable_prefix-caching"]]

# Spellings of the options hostctl reads (serveflags.READ): hostctl.service.clientconfig must read
# from each what vLLM's parser does.
READS = [[], ["--enable-auto-tool-choice"], ["--enable_auto_tool_choice"], ["--enable-a"],
         ["--enable-auto-tool-choice", "--no-enable-auto-tool-choice"], ["--no-enable-a", "--enable-auto-tool"],
         ["--enable-auto-tool-choice.x", "1"], ["--override-generation-config", '{"max_new_tokens": 300}'],
         ['--override-g={"max_new_tokens": 300, "temperature": 0.5}'],
         ["--override_generation_config.max_new_tokens", "300"],
         ["--override-generation-config", '{"max_new_tokens": 300}', "--override-generation-config.temperature", "0.5"],
         ["--override-generation-config.max_new_tokens=300", "--override-generation-config", "{}"]]


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
    got = probe(demo_image, [rendered] + [BASE + a for a in ATTACKS] + [BASE + a for a in REWRITES])
    assert got["fromfile"] is None  # no `@file` reaches argv
    for argv, seen in zip([rendered] + [BASE + a for a in ATTACKS] + [BASE + a for a in REWRITES], got["parsed"]):
        assert seen["handed"] == serveflags.vllm_argv(argv), argv

    # The rendered project listens where the plan says.
    assert got["parsed"][0]["host"] == plan.runtime.api_host
    assert str(got["parsed"][0]["port"]) == str(plan.runtime.api_port)

    # Each attack does change what vLLM takes, and hostctl refuses it in a recipe.
    for attack, seen in zip(ATTACKS, got["parsed"][1:1 + len(ATTACKS)]):
        assert "error" not in seen, (attack, seen)
        assert (seen["host"], str(seen["port"]), seen["api_key"], seen["hf_token"], seen["uds"]) != \
            ("127.0.0.1", "8000", None, None, None), attack
        data = {k: v for k, v in config.recipe.model_dump().items() if v is not None}
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


def test_vllms_parser_reads_what_client_configs_say(demo_image):
    got = probe(demo_image, [BASE + a for a in READS])
    options = set(got["options"])
    for flag, read in serveflags.READ.items():
        assert flag in options, flag
        assert [o for o in options if o.startswith(read.shortest) and o != flag] == [], flag
    for argv, seen in zip(READS, got["parsed"]):
        assert "error" not in seen, (argv, seen)
        assert seen["enable_auto_tool_choice"] is clientconfig.tool_calling(argv)[0], (argv, seen)
        assert (seen["override_generation_config"] or {}).get("max_new_tokens") == clientconfig.output_cap(argv), \
            (argv, seen)
