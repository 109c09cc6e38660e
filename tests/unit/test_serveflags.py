"""A serve flag hostctl owns (address, port, keys, tokens, served name, model, context) cannot be
set from a recipe or a tuning axis in any spelling argparse accepts, and a rendered argv that
would make vLLM listen elsewhere than the plan says is never written.

The spellings are judged by a real argparse parser built like vLLM's (abbreviations allowed,
underscores read as dashes), holding the owned flags and their nearest neighbours among vLLM's
options; tests/system/test_serveflags_vllm.py runs vLLM 0.32's own parser on the rendered argv."""

import argparse

import pytest
import yaml

import snapshots
from hostctl import examples, serveflags
from hostctl.config import parse_recipe
from hostctl.errors import EXIT_BAD_INPUT, InputError
from hostctl.plan import build_plan
from hostctl.service.render import render_files, write_project
from hostctl.tune import plan as tplan

SPELLINGS = [
    ["--host", "0.0.0.0"], ["--hos", "0.0.0.0"], ["--ho", "0.0.0.0"], ["--hos=0.0.0.0"], ["--host=0.0.0.0"],
    ["--ho=0.0.0.0"], ["--port", "80"], ["--por=80"], ["--po", "80"],
    ["--enforce-eager", "--hos=0.0.0.0"], ["--enforce-eager", "--host=::"],
]
SECRETS = [["--api-key", "k-hostile-123456"], ["--api-ke", "k-hostile-123456"], ["--api-k=k-hostile-123456"],
           ["--api_key", "k-hostile-123456"], ["--hf-tok", "hf_hostileTOKENabcdefghijkl"],
           ["--hf_token=hf_hostileTOKENabcdefghijkl"], ["--uds", "/tmp/hostile.sock"],
           ["--config", "/models/hostile.yaml"], ["--conf=/models/hostile.yaml"]]
# vLLM's dotted keys (KEY.sub VALUE becomes KEY <json>, appended last) and its -O split (G1)
DOTTED = [["--api-ke.x", "k-hostile-123456"], ["--api_ke.x=k-hostile-123456"],
          ["--uds.x", "/tmp/hostile.sock"], ["--host.x", "0.0.0.0"], ["--ho.x=0.0.0.0"], ["--port.x", "80"],
          ["--hf-token.x", "hf_hostileTOKENabcdefghijkl"], ["--served-model-name.x", "other"], ["--model.x", "/etc"],
          ["--config.x", "/models/hostile.yaml"], ["--max-model-len.x", "4096"],
          ["-O=--hf-token=hf_hostileTOKENabcdefghijkl"]]


def vllm_like_parser() -> argparse.ArgumentParser:
    """argparse as vLLM sets it up for the flags that matter here: every owned flag plus the
    options that share a prefix with one (so an ambiguous prefix is an error, as in vLLM)."""
    p = argparse.ArgumentParser(exit_on_error=False, add_help=False)
    for flag in [*serveflags.OWNED, "--headless", "--hf-config-path", "--hf-overrides", "--api-server-count",
                 "--pipeline-parallel-size", "--port-range-hostile", "--model-impl", "--max-model-len-extra",
                 "--served-model-name-extra", "--config-format", "--enforce-eager"]:
        if flag in ("--headless", "--enforce-eager"):
            p.add_argument(flag, action="store_true")
        else:
            p.add_argument(flag)
    return p


def parse_like_vllm(argv: list[str]) -> argparse.Namespace:
    # vLLM's FlexibleArgumentParser reads --flag_name as --flag-name before argparse sees it.
    fixed = ["--" + a[2:].split("=", 1)[0].replace("_", "-") + (("=" + a.split("=", 1)[1]) if "=" in a else "")
             if a.startswith("--") else a for a in argv]
    ns, _ = vllm_like_parser().parse_known_args(fixed)
    return ns


def demo_recipe_with(args: list[str]) -> dict:
    config, _ = examples.load("demo-cpu")
    data = {k: v for k, v in config.recipe.model_dump().items() if v is not None}
    # each entry as a recipe writes it: "flag value" or a bare flag
    entries, i = [], 0
    while i < len(args):
        if i + 1 < len(args) and not args[i + 1].startswith("--") and "=" not in args[i]:
            entries.append(f"{args[i]} {args[i + 1]}")
            i += 2
        else:
            entries.append(args[i])
            i += 1
    data["serve_args"] = [*data["serve_args"], *entries]
    return data


@pytest.mark.parametrize("args", SPELLINGS + SECRETS + DOTTED, ids=[" ".join(a) for a in SPELLINGS + SECRETS + DOTTED])
def test_an_owned_flag_in_any_spelling_is_refused_naming_the_entry(args):
    data = demo_recipe_with(args)
    with pytest.raises(InputError) as exc:
        parse_recipe(data, "hostile.yaml")
    assert exc.value.exit_code == EXIT_BAD_INPUT
    index = len(data["serve_args"]) - 1
    assert any(d.startswith(f"serve_args[{index}]") for d in exc.value.details), exc.value.details
    # a secret's value is not echoed in the refusal
    assert not any("hostile-123456" in d or "hostileTOKEN" in d for d in exc.value.details)


@pytest.mark.parametrize("args", SPELLINGS, ids=[" ".join(a) for a in SPELLINGS])
def test_the_rendered_address_is_the_plans_for_every_spelling(args, tmp_path):
    """Whatever a recipe writes, what gets rendered makes argparse listen where the plan says."""
    config, facts = examples.load("demo-cpu")
    try:
        config = config.model_copy(update={"recipe": parse_recipe(demo_recipe_with(args))})
    except InputError as exc:
        assert exc.exit_code == EXIT_BAD_INPUT
        return
    plan = build_plan(config, facts)
    files = render_files(plan)
    svc = yaml.safe_load(files["compose.yaml"])["services"]["runtime"]
    ns = parse_like_vllm(svc["command"][3:])
    assert (ns.host, ns.port) == (plan.runtime.api_host, str(plan.runtime.api_port))


@pytest.mark.parametrize("extra", [["--hos", "0.0.0.0"], ["--host=0.0.0.0"], ["--po", "1"], ["--api-ke", "k-123456"],
                                   ["--hf_token", "hf_x"], ["--uds", "/tmp/s"], ["--api-ke.x", "k-123456"],
                                   ["--uds.x", "/tmp/s"], ["--host.x", "0.0.0.0"], ["--hf-token.x=hf_x"]])
def test_a_rendered_argv_that_disagrees_with_the_plan_is_never_written(extra, tmp_path):
    """The second line: a plan whose argv slipped past validation is refused before a file exists."""
    config, facts = snapshots.desktop()
    plan = build_plan(config, facts)
    plan = plan.model_copy(update={"runtime": plan.runtime.model_copy(update={"command": plan.runtime.command + extra})})
    out = tmp_path / "project"
    with pytest.raises(InputError) as exc:
        write_project(render_files(plan), out)
    assert exc.value.exit_code == EXIT_BAD_INPUT
    assert any("argv" in d for d in exc.value.details)
    assert not out.exists()


def test_the_reference_plans_still_render():
    for name in examples.names():
        examples.rendered(name)


@pytest.mark.parametrize("axis", [{"kind": "serve_arg", "arg": "--hos", "values": ["0.0.0.0"]},
                                  {"kind": "serve_arg", "arg": "--api_key", "values": ["k"]},
                                  {"kind": "serve_json", "arg": "--conf", "key": "host", "values": ["0.0.0.0"]},
                                  {"kind": "serve_arg", "arg": "--enforce-eager", "values": [True, "--port=1"]},
                                  {"kind": "serve_arg", "arg": "--api-ke.x", "values": ["k"]},
                                  {"kind": "serve_json", "arg": "--host.x", "key": "y", "values": ["0.0.0.0"]},
                                  {"kind": "serve_arg", "arg": "--enforce-eager", "values": ["--uds.x=/tmp/s"]}])
def test_a_tuning_axis_cannot_tune_an_owned_flag(axis):
    with pytest.raises(InputError) as exc:
        tplan.parse_tuning({"objective": "decode.median_tok_s", "axes": [axis]}, probe_keys=["decode"])
    assert exc.value.exit_code == EXIT_BAD_INPUT and exc.value.message.startswith("tuning.axes[0]")


@pytest.mark.parametrize("token, flag", [("--hos", "--host"), ("--host=x", "--host"), ("--api_ke", "--api-key"),
                                         ("--h", "--host"), ("--headless", None), ("--hf-config-path", None),
                                         ("-tp", None), ("--", None), ("0.0.0.0", None), ("--max-model-len", "--max-model-len"),
                                         ("--api-ke.x", "--api-key"), ("--uds.x=/s", "--uds"), ("--hf_tok.a.b+", "--hf-token"),
                                         ("-O--host=x", "--host"), ("--host=1.2.3.4", "--host"), ("--hf-config-path.x", None),
                                         ("-0.5", None), ("-O3", None)])
def test_owned_reads_tokens_as_argparse_would(token, flag):
    hit = serveflags.owned(token)
    assert (hit.flag if hit else None) == flag


@pytest.mark.parametrize("argv, flag, value", [
    (["--host", "127.0.0.1", "--host.x", "0.0.0.0"], "--host", '{"x": "0.0.0.0"}'),   # appended last: it wins
    (["--host.x", "0.0.0.0", "--host", "127.0.0.1"], "--host", '{"x": "0.0.0.0"}'),
    (["--api-key.a+", "k1,k2"], "--api-key", '{"a": ["k1", "k2"]}'),
    (["--uds.x=/tmp/s", "--uds.y", "2"], "--uds", '{"x": "/tmp/s", "y": 2}'),
    # a dotted key takes the next token as its value, whatever it is: this --host is no flag
    (["--enforce-eager.x", "--host", "0.0.0.0"], "--host", None),
])
def test_effective_reads_the_argv_vllm_rewrites(argv, flag, value):
    assert serveflags.effective(argv)[flag] == value
