"""The cluster profile, the cross-host plan and render --cluster, on facts snapshots (no engine):
validation exits 2 naming the field, the plan's decisions and flags, one project per member."""

import json
import os
import stat

import pytest
import yaml

from hostctl import cli, paths
from hostctl.cluster.profile import address_problem, parse_cluster, read_key
from hostctl.errors import InputError

HOSTS = paths.hosts_dir()
CLUSTERS = paths.resource_root() / "runtime" / "clusters"
DEMO = str(HOSTS / "demo-cpu.toml")
DEMO_FACTS = str(HOSTS / "demo-cpu.facts.json")


def _toml_value(v):
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def write_cluster(tmp_path, doc: dict, name="cluster.toml"):
    lines = [f"{k} = {_toml_value(v)}" for k, v in doc.items() if not isinstance(v, (dict, list))]
    for k, v in doc.items():
        if isinstance(v, dict):
            lines.append(f"[{k}]")
            lines += [f"{kk} = {_toml_value(vv)}" for kk, vv in v.items()]
    for h in doc.get("hosts", []):
        lines.append("[[hosts]]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in h.items()]
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def replicas(**over):
    doc = {"name": "pair", "api_key_env": "HC_TEST_KEY",
           "router": {"health_check_interval_s": 2},
           "hosts": [{"name": "gw", "role": "router", "address": "127.0.0.1", "api_port": 30100},
                     {"name": "r1", "role": "replica", "address": "127.0.0.1", "profile": DEMO, "facts": DEMO_FACTS,
                      "api_port": 8201},
                     {"name": "r2", "role": "replica", "address": "127.0.0.1", "profile": DEMO, "facts": DEMO_FACTS,
                      "api_port": 8202}]}
    doc.update(over)
    return doc


def multinode(**over):
    doc = {"name": "pp", "master_port": 29600, "socket_ifname": "lo",
           "hosts": [{"name": "lead", "role": "leader", "rank": 0, "address": "127.0.0.1", "profile": DEMO,
                      "facts": DEMO_FACTS, "api_port": 8211},
                     {"name": "follow", "role": "follower", "rank": 1, "address": "127.0.0.1", "profile": DEMO,
                      "facts": DEMO_FACTS, "api_port": 8212}]}
    doc.update(over)
    return doc


def bad(doc) -> str:
    with pytest.raises(InputError) as exc:
        parse_cluster(doc, "cluster.toml")
    assert exc.value.exit_code == 2
    return " ".join([exc.value.message] + exc.value.details)


# ---------------------------------------------------------------- validation


def test_the_bundled_cluster_profiles_are_valid():
    from hostctl.cluster.profile import load_cluster

    names = {p.stem: load_cluster(p) for p in CLUSTERS.glob("*.toml") if p.stem != "pro6000x2-pp2-desk"}
    assert names["demo-replicas"].mode == "replicas" and names["demo-pp2"].mode == "multi-node"
    assert names["pro6000x2-pair"].leader.address == "192.168.10.11"


@pytest.mark.parametrize("address,ok", [("127.0.0.1", True), ("10.0.0.5", True), ("192.168.1.20", True),
                                        ("172.16.3.4", True), ("fd00::1", True), ("::1", True),
                                        ("8.8.8.8", False), ("203.0.113.9", False), ("100.64.1.1", False), ("::ffff:10.0.0.1", False), ("2001:4860::8888", False), ("0.0.0.0", False),
                                        ("host.example", False)])
def test_only_private_or_loopback_addresses(address, ok):
    assert (address_problem(address) is None) is ok


def test_a_public_address_is_refused_with_the_reason():
    doc = replicas()
    doc["hosts"][1]["address"] = "203.0.113.9"  # documentation range: Python calls it private, a LAN never is
    text = bad(doc)
    assert "hosts[1].address" in text and "unencrypted" in text and "run code" in text


def test_ranks_must_be_unique_and_complete():
    doc = multinode()
    doc["hosts"][1]["rank"] = 2
    assert "hosts[].rank" in bad(doc) and "missing 1" in bad(doc)
    doc = multinode()
    doc["hosts"].append(dict(doc["hosts"][1], name="f2"))
    assert "hosts[2].rank: node rank 1 is already hosts[1]'s" in bad(doc)
    doc = multinode()
    doc["hosts"][1]["rank"] = 0
    assert "hosts[1]" in bad(doc) and "rank" in bad(doc)
    doc = multinode()
    del doc["hosts"][0]["rank"]
    assert "hosts[0]" in bad(doc) and "rank: required" in bad(doc)


def test_roles_do_not_mix_and_need_their_partner():
    doc = multinode()
    doc["hosts"].append({"name": "gw", "role": "router", "address": "127.0.0.1"})
    assert "hosts[].role" in bad(doc) and "not both" in bad(doc)
    doc = replicas()
    doc["hosts"] = doc["hosts"][1:]
    assert "exactly one router" in bad(doc)
    doc = multinode()
    doc["hosts"] = doc["hosts"][:1]
    assert "at least one follower" in bad(doc)


def test_router_and_replica_fields_are_checked():
    doc = replicas()
    doc["hosts"][0]["profile"] = DEMO
    assert "hosts[0]" in bad(doc) and "a router serves no model" in bad(doc)
    doc = replicas()
    del doc["hosts"][1]["profile"]
    assert "hosts[1]" in bad(doc) and "profile: required" in bad(doc)
    doc = replicas()
    doc["hosts"][1]["rank"] = 1
    assert "only leader and follower" in bad(doc)


def test_the_api_key_source_is_required_and_single():
    doc = replicas()
    del doc["api_key_env"]
    assert "api_key_env: required" in bad(doc) and "router" in bad(doc)
    doc = replicas(api_key_file="/etc/hostctl/cluster.key")
    assert "not both" in bad(doc)
    doc = replicas(api_key_env="HOME")
    assert "api_key_env" in bad(doc)
    doc = multinode()
    doc["hosts"][0]["address"] = doc["hosts"][1]["address"] = "10.1.0.2"
    doc["hosts"][1]["address"] = "10.1.0.3"
    assert "api_key_env: required" in bad(doc) and "beyond this machine" in bad(doc)


def test_ports_on_one_address_are_not_shared():
    doc = replicas()
    doc["hosts"][2]["api_port"] = 8201
    assert "hosts[2].api_port: 127.0.0.1:8201 is already hosts[1] (r1)'s" in bad(doc)
    doc = multinode(master_port=8211)
    assert "master_port" in bad(doc)


def test_names_and_unknown_keys():
    doc = replicas()
    doc["hosts"][2]["name"] = "r1"
    assert "hosts[2].name" in bad(doc)
    doc = replicas(colour="blue")
    assert "colour: unknown key" in bad(doc)


def test_read_key_from_env_or_a_private_file(tmp_path):
    c = parse_cluster(replicas())
    assert read_key(c, {"HC_TEST_KEY": "sekrit-123"}) == "sekrit-123"
    with pytest.raises(InputError, match="HC_TEST_KEY is not set"):
        read_key(c, {})
    key = tmp_path / "key"
    key.write_text("file-key-456\n")
    os.chmod(key, 0o644)
    doc = replicas(api_key_file=str(key))
    del doc["api_key_env"]
    c = parse_cluster(doc)
    with pytest.raises(InputError, match="readable by others"):
        read_key(c)
    os.chmod(key, stat.S_IRUSR | stat.S_IWUSR)
    assert read_key(c) == "file-key-456" and c.key_var == "HOSTCTL_CLUSTER_API_KEY"


# ---------------------------------------------------------------- the cross-host plan


def plan_json(capsys, path, *extra, env=None):
    code = cli.main(["plan", "--cluster", str(path), "--json", *extra])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip().startswith("{") else None), err


def test_plan_for_replicas(tmp_path, capsys):
    code, doc, _ = plan_json(capsys, write_cluster(tmp_path, replicas()))
    assert code == 0 and doc["schema"] == "hostctl.cluster-plan/v1" and doc["mode"] == "replicas"
    m = {x["name"]: x for x in doc["members"]}
    assert m["gw"]["endpoint"] == "http://127.0.0.1:30100"
    router = m["gw"]["router"]["command"]
    assert router[router.index("--health-check-interval-secs") + 1] == "2" and "--worker-urls" not in router
    assert "--api-key" not in router  # the key comes from the environment, never the argv in files
    for r in ("r1", "r2"):
        cmd = m[r]["runtime"]["command"]
        assert cmd[cmd.index("--port") + 1] == str(m[r]["endpoint"].rsplit(":", 1)[1])
        assert "--nnodes" not in cmd and m[r]["runtime"]["network_mode"] == "host"
        assert m[r]["project"] == f"hc-pair-{r}" and m[r]["state_dir"] == f"/var/lib/hostctl/cluster/pair/{r}"
    assert all(d["why"] for d in doc["decisions"])


def test_plan_for_one_model_across_two_hosts(tmp_path, capsys):
    code, doc, _ = plan_json(capsys, write_cluster(tmp_path, multinode()))
    assert code == 0 and (doc["tensor_parallel"], doc["pipeline_parallel"]) == (1, 2)
    m = {x["name"]: x for x in doc["members"]}

    def flag(cmd, f):
        return cmd[cmd.index(f) + 1]

    lead, follow = m["lead"]["runtime"]["command"], m["follow"]["runtime"]["command"]
    for cmd, rank in ((lead, "0"), (follow, "1")):
        assert flag(cmd, "--node-rank") == rank and flag(cmd, "--nnodes") == "2"
        assert flag(cmd, "--master-addr") == "127.0.0.1" and flag(cmd, "--master-port") == "29600"
        assert flag(cmd, "--pipeline-parallel-size") == "2" and flag(cmd, "--tensor-parallel-size") == "1"
    assert "--headless" in follow and "--headless" not in lead
    # only vLLM's CLI (`vllm serve`) honours --headless; the leader keeps the one-host server module
    assert follow[:2] == ["python3", "-c"] and follow[3] == "serve" and "ServeSubcommand" in follow[2]
    assert lead[:3] == ["python3", "-m", "vllm.entrypoints.openai.api_server"]
    assert m["follow"]["endpoint"] is None and m["lead"]["endpoint"] == "http://127.0.0.1:8211"
    assert {"NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"} <= set(m["lead"]["runtime"]["env_names"])


def test_the_pro6000x2_pair_splits_four_gpus_as_tp2_by_pp2(capsys, monkeypatch):
    monkeypatch.setenv("HOSTCTL_API_KEY", "a-test-key-1234")
    code, doc, err = plan_json(capsys, CLUSTERS / "pro6000x2-pair.toml")
    assert (doc["tensor_parallel"], doc["pipeline_parallel"]) == (2, 2), err
    follow = next(x for x in doc["members"] if x["name"] == "desk-b")["runtime"]["command"]
    assert follow.count("--tensor-parallel-size") == 1  # the recipe's own copy is replaced, not doubled
    assert follow[follow.index("--master-addr") + 1] == "192.168.10.11"


def test_a_recipe_that_does_not_split_is_refused(tmp_path, capsys):
    recipe = yaml.safe_load((CLUSTERS / "dsv4-flash-0731-tp2pp2-400k.yaml").read_text())
    recipe["requires"]["gpus"] = 3
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(recipe))
    prof = (CLUSTERS / "pro6000x2-pp2-desk.toml").read_text().replace(
        'recipe = "dsv4-flash-0731-tp2pp2-400k.yaml"', f'recipe = "{tmp_path / "r.yaml"}"')
    (tmp_path / "p.toml").write_text(prof)
    doc = multinode()
    for h in doc["hosts"]:
        h.update(profile=str(tmp_path / "p.toml"), facts=str(HOSTS / "pro6000x2-desktop.facts.json"))
    code = cli.main(["plan", "--cluster", str(write_cluster(tmp_path, doc))])
    err = capsys.readouterr().err
    assert code == 2 and "3 GPUs" in err and "do not split evenly over 2 hosts" in err


@pytest.mark.parametrize("entry", ["--master-ad 10.9.9.9", "--master_addr=10.9.9.9", "-dpa 10.9.9.9",
                                   "--data-parallel-addr 10.9.9.9", "--enforce-eager --headl", "-r 0"])
def test_a_cluster_flag_in_another_spelling_is_refused_on_a_member(tmp_path, capsys, entry):
    """One model across hosts: the recipe's exact copy of a rendezvous flag is replaced; another
    spelling argparse reads as the same flag would survive, so plan refuses it naming the entry
    (the rendered members would otherwise carry it into every host's argv)."""
    recipe = yaml.safe_load((paths.recipes_dir() / "demo-cpu-tiny-moe.yaml").read_text())
    recipe["serve_args"].append(entry)
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(recipe))
    prof = (HOSTS / "demo-cpu.toml").read_text().replace('recipe = "demo-cpu-tiny-moe"', f'recipe = "{tmp_path / "r.yaml"}"')
    (tmp_path / "p.toml").write_text(prof)
    doc = multinode()
    for h in doc["hosts"]:
        h["profile"] = str(tmp_path / "p.toml")
    out = tmp_path / "o"
    code = cli.main(["render", "--cluster", str(write_cluster(tmp_path, doc)), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and f"recipe.serve_args[{len(recipe['serve_args']) - 1}]" in err, err
    assert not out.exists()


def test_another_recipe_or_image_on_one_host_is_refused(tmp_path, capsys):
    prof = (HOSTS / "demo-cpu.toml").read_text().replace('[runtime]', '[runtime]\nimage = "hostctl/other:1"')
    (tmp_path / "other.toml").write_text(prof.replace('recipe = "demo-cpu-tiny-moe"',
                                                      f'recipe = "{paths.recipes_dir() / "demo-cpu-tiny-moe.yaml"}"'))
    doc = replicas()
    doc["hosts"][2]["profile"] = str(tmp_path / "other.toml")
    code = cli.main(["plan", "--cluster", str(write_cluster(tmp_path, doc))])
    err = capsys.readouterr().err
    assert code == 2 and "hosts[2].profile (r2)" in err and "runtime image" in err and "hostctl/other:1" in err


def test_member_must_be_a_host(tmp_path, capsys):
    code = cli.main(["plan", "--cluster", str(write_cluster(tmp_path, replicas())), "--member", "nope"])
    assert code == 2 and "--member: 'nope' is not a host" in capsys.readouterr().err


def test_up_needs_a_member(tmp_path, capsys):
    code = cli.main(["up", "--cluster", str(write_cluster(tmp_path, replicas()))])
    assert code == 2 and "--member NAME" in capsys.readouterr().err


# ---------------------------------------------------------------- render --cluster


def test_render_writes_one_project_per_member(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("hostctl.service.compose.compose_available",
                        lambda: type("R", (), {"ok": False, "why": lambda self: "not in unit tests"})())
    code = cli.main(["render", "--cluster", str(write_cluster(tmp_path, multinode())), "--out", str(tmp_path / "out")])
    assert code == 0, capsys.readouterr().err
    lead = yaml.safe_load((tmp_path / "out" / "lead" / "compose.yaml").read_text())
    follow = yaml.safe_load((tmp_path / "out" / "follow" / "compose.yaml").read_text())
    assert lead["name"] == "hc-pp-lead" and follow["name"] == "hc-pp-follow"
    for doc in (lead, follow):
        svc = doc["services"]["runtime"]
        assert svc["network_mode"] == "host" and "networks" not in svc and "networks" not in doc
    fsvc = follow["services"]["runtime"]
    assert "--headless" in fsvc["command"]
    # the follower's container health is the group's: the leader's /health
    assert "127.0.0.1:8211/health" in " ".join(fsvc["healthcheck"]["test"])
    env = (tmp_path / "out" / "follow" / "runtime.env").read_text()
    assert "GLOO_SOCKET_IFNAME=lo" in env and oct(os.stat(tmp_path / "out" / "follow" / "runtime.env").st_mode)[-3:] == "600"


def test_render_cluster_dry_run_writes_nothing_and_a_second_render_is_unchanged(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("hostctl.service.compose.compose_available",
                        lambda: type("R", (), {"ok": False, "why": lambda self: "not in unit tests"})())
    argv = ["render", "--cluster", str(write_cluster(tmp_path, multinode())), "--out", str(tmp_path / "out")]
    code = cli.main(argv + ["--dry-run"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out == "" and not (tmp_path / "out").exists()
    for m in ("lead", "follow"):
        assert f"would render {tmp_path / 'out' / m}: write compose.yaml, runtime.env, hostctl-pp-{m}.service" in err
        assert f"+++ {tmp_path / 'out' / m / 'compose.yaml'} (rendered)" in err
    assert "runtime.env: new (it holds the recipe's secrets: not shown)" in err
    assert "docker compose config" not in err  # nothing written, nothing checked
    assert cli.main(argv) == 0
    first, err = capsys.readouterr()
    assert len(first.split()) == 6 and "not checked with docker compose config: it is not available" in err
    mtimes = {p: p.stat().st_mtime_ns for p in (tmp_path / "out").rglob("*")}
    assert cli.main(argv) == 0
    again, err = capsys.readouterr()
    assert again == first and err.count("(unchanged)") == 2 and "docker compose config" not in err, err
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "out").rglob("*")} == mtimes


ROUTER_STAND_IN = """import json, os, sys


def parse_router_args(args):
    return args[args.index("--api-key") + 1]


def launch_router(key):
    with open("/proc/self/cmdline", "rb") as fh:
        cmdline = fh.read().replace(b"\\0", b" ").decode()
    with open(os.environ["STAND_IN_OUT"], "w") as fh:
        json.dump({"key": key, "cmdline": cmdline}, fh)


def main():
    launch_router(parse_router_args(sys.argv[1:]))
"""


def test_the_router_key_reaches_vllm_router_but_not_its_argv(tmp_path, monkeypatch):
    """The rendered router container's entrypoint and command, run as a process: vllm-router gets
    the key, and the process's argv (/proc/PID/cmdline, what `ps` shows every local user) does
    not hold it. vllm-router itself lives only in the router image, so a stand-in module with its
    launcher's two functions (vllm_router.launch_router: parse_router_args, launch_router, main)
    records what it was given."""
    import subprocess
    import sys

    monkeypatch.setattr("hostctl.service.compose.compose_available",
                        lambda: type("R", (), {"ok": False, "why": lambda self: "not in unit tests"})())
    monkeypatch.setenv("HC_TEST_KEY", "planted-key-0987")
    assert cli.main(["render", "--cluster", str(write_cluster(tmp_path, replicas())), "--out", str(tmp_path / "o")]) == 0
    svc = yaml.safe_load((tmp_path / "o" / "gw" / "compose.yaml").read_text())["services"]["router"]
    pkg, bin_dir = tmp_path / "pkg" / "vllm_router", tmp_path / "bin"
    pkg.mkdir(parents=True)
    bin_dir.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "launch_router.py").write_text(ROUTER_STAND_IN)
    (bin_dir / "python3").symlink_to(sys.executable)
    (bin_dir / "vllm-router").write_text(f"#!{sys.executable}\nfrom vllm_router.launch_router import main\nmain()\n")
    (bin_dir / "vllm-router").chmod(0o755)
    # What Compose runs: entrypoint + command, with $$ read as one $.
    from hostctl.images import router_gate_path

    argv = [a.replace("$$", "$").replace("/opt/venv/bin/", f"{bin_dir}/")
            .replace("/opt/hostctl/routergate.py", str(router_gate_path())) for a in svc["entrypoint"] + svc["command"]]
    out = tmp_path / "seen.json"
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(tmp_path / "pkg"), "STAND_IN_OUT": str(out),
           "HOSTCTL_ROUTER_KEY": "planted-key-0987"}
    subprocess.run(argv, env=env, check=True, timeout=60)
    seen = json.loads(out.read_text())
    assert seen["key"] == "planted-key-0987"
    assert "planted-key-0987" not in seen["cmdline"]
    assert "--host" in seen["cmdline"]  # the stand-in did read the real argv


def test_render_the_router_project_without_the_key(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("hostctl.service.compose.compose_available",
                        lambda: type("R", (), {"ok": False, "why": lambda self: "not in unit tests"})())
    monkeypatch.setenv("HC_TEST_KEY", "planted-key-0987")
    code = cli.main(["render", "--cluster", str(write_cluster(tmp_path, replicas())), "--out", str(tmp_path / "o")])
    assert code == 0
    text = (tmp_path / "o" / "gw" / "compose.yaml").read_text()
    doc = yaml.safe_load(text)
    svc = doc["services"]["router"]
    assert svc["network_mode"] == "host" and svc["image"] == "hostctl/vllm-router:0.1.17"
    assert svc["environment"]["HOSTCTL_ROUTER_KEY"].startswith("${HC_TEST_KEY:?")
    assert "planted-key-0987" not in text
    for r in ("r1", "r2"):
        rt = yaml.safe_load((tmp_path / "o" / r / "compose.yaml").read_text())["services"]["runtime"]
        assert rt["environment"]["VLLM_API_KEY"].startswith("${HC_TEST_KEY:?")
        assert "planted-key-0987" not in (tmp_path / "o" / r / "runtime.env").read_text()


def test_the_routers_internal_port_is_its_own():
    """vllm-router's own port behind the gate (router.internal_port) cannot be a port the router's
    address, its metrics or a member's API already uses: exit 2 naming the field."""
    for router, api in (({"internal_port": 30100}, 30100), ({"internal_port": 29000}, 30100),
                        ({"internal_port": 8201}, 30100)):
        doc = replicas(router=router)
        doc["hosts"][0]["api_port"] = api
        assert "router.internal_port" in bad(doc)
    cluster = parse_cluster(replicas(router={"internal_port": 30111}), "cluster.toml")
    assert cluster.router.internal_port == 30111
