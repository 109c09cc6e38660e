"""Planners on the four bundled snapshots and on awkward hosts derived from them."""

import pytest
import yaml

import snapshots
from hostctl import examples
from hostctl.config import Config, parse_recipe
from hostctl.errors import InputError
from hostctl.facts.records import P2PVerdict
from hostctl.plan import build_plan
from hostctl.plan.memory import plan_memory
from hostctl.plan.nccl import plan_nccl
from hostctl.plan.placement import plan_placement
from hostctl.plan.power import plan_power
from hostctl.plan.storage import plan_storage
from hostctl.bytesizes import GIB

NAMES = ["demo-cpu", "pro6000x1-mapped", "pro6000x1-resident", "pro6000x2-desktop"]


def with_profile(config: Config, **changes) -> Config:
    profile = config.profile.model_copy(update=changes)
    return config.model_copy(update={"profile": profile})


def with_recipe(config: Config, mutate) -> Config:
    data = {k: v for k, v in config.recipe.model_dump().items() if v is not None}
    mutate(data)
    return config.model_copy(update={"recipe": parse_recipe(data)})


@pytest.mark.parametrize("name", NAMES)
def test_every_reference_plan_is_clean_and_explained(name):
    config, facts = examples.load(name)
    plan = build_plan(config, facts)
    assert plan.errors == []
    for section in plan.sections():
        assert section.decisions, f"{section.area()} made no decision"
        assert all(d.reason for d in section.decisions)
    assert plan.runtime.api_host == "127.0.0.1"


# ---------------------------------------------------------------- memory


def test_desktop_memory_caps_match_the_field_report():
    config, facts = snapshots.desktop()
    m = plan_memory(config, facts)
    assert (m.limit_bytes, m.reservation_bytes, m.ram_swap_bytes) == (34 * GIB, 30 * GIB, 200 * GIB)
    assert m.conversion_verdict == "ok"
    # The container's RAM+swap cap is a different number from the host's RAM+swap.
    assert facts.memory.ram_plus_swap > 300 * GIB


def test_too_little_ram_swap_says_how_much_is_missing():
    config, _ = snapshots.desktop()
    facts = snapshots.too_little_ram_swap()
    serving = plan_memory(config, facts)
    have = facts.memory.mem_total_bytes + 8 * GIB
    assert serving.conversion_verdict == "short"
    assert serving.conversion_missing_bytes == 220 * GIB - have
    assert [p.severity for p in serving.problems if "first conversion" in p.message] == ["warn"]
    converting = plan_memory(with_profile(config, phase="converting"), facts)
    problem = next(p for p in converting.problems if "first conversion" in p.message)
    assert problem.severity == "error" and "166.8 GiB missing" in problem.message
    # The profile's 200 GiB container cap no longer fits under the host's RAM+swap either.
    assert any("exceeds the host's RAM+swap" in p.message for p in converting.problems)


def test_default_ram_swap_cap_leaves_swap_to_the_host():
    config, facts = snapshots.desktop()
    memory = config.profile.memory.model_copy(update={"container_ram_swap": None})
    m = plan_memory(with_profile(config, memory=memory), facts)
    swap = facts.memory.swap_total_bytes
    assert m.ram_swap_bytes == 34 * GIB + (int(swap * 0.75) // GIB) * GIB
    assert m.ram_swap_bytes < facts.memory.ram_plus_swap - 11 * GIB


def test_reserve_larger_than_ram_is_an_error():
    config, facts = snapshots.desktop()
    memory = config.profile.memory.model_copy(update={"host_reserve": 44 * GIB})
    m = plan_memory(with_profile(config, memory=memory), facts)
    assert m.limit_bytes is None and m.problems[0].severity == "error"


# ---------------------------------------------------------------- placement


def test_mapped_host_binds_to_the_gpus_node_and_sets_guards():
    config, facts = examples.load("pro6000x1-mapped")
    p = plan_placement(config, facts)
    assert p.numa_node == 0 and p.bind_memory
    assert p.cpuset == "0-23,48-71"
    assert p.env == {"HOSTCTL_NUMA_NODE": "0", "VLLM_MOE_W2_MAPPED_NUMA_NODE": "0", "VLLM_MOE_W2_MAPPED_PCI": "0000:31:00.0"}
    assert "SYS_NICE" in p.cap_add


def test_gpu_on_node_one_moves_everything_to_node_one():
    config, _ = examples.load("pro6000x1-mapped")
    p = plan_placement(config, snapshots.gpu_on_node1())
    assert p.numa_node == 1 and p.cpuset == "24-47,72-95"
    assert p.env["VLLM_MOE_W2_MAPPED_PCI"] == "0000:b1:00.0" and p.env["VLLM_MOE_W2_MAPPED_NUMA_NODE"] == "1"


def test_unknown_numa_node_is_reported_not_guessed():
    config, _ = examples.load("pro6000x1-mapped")
    p = plan_placement(config, snapshots.numa_unknown_two_nodes())
    assert p.numa_node is None and p.cpuset is None and not p.bind_memory
    assert "VLLM_MOE_W2_MAPPED_NUMA_NODE" not in p.env
    assert any(d.value == "unknown" for d in p.decisions)
    assert [x.severity for x in p.problems] == ["error"]  # mapped layers cannot be pinned


def test_unknown_numa_node_without_mapped_layers_is_a_warning():
    config, _ = examples.load("pro6000x1-resident")
    p = plan_placement(config, snapshots.numa_unknown_two_nodes())
    assert p.cpuset is None and [x.severity for x in p.problems] == ["warn"]


def test_two_sockets_gpus_on_different_nodes():
    config, _ = snapshots.desktop()
    facts = snapshots.two_sockets_split()
    p = plan_placement(config, facts)
    assert [g.numa_node for g in p.gpus] == [0, 1]
    assert p.numa_node is None and not p.bind_memory
    assert p.cpuset == "0-95"
    n = plan_nccl(config, facts, p)
    assert n.env["NCCL_P2P_DISABLE"] == "1"  # no functional verdict stored for this host


def test_too_few_gpus_is_an_error():
    config, _ = snapshots.desktop()
    _, one_gpu = examples.load("pro6000x1-resident")
    p = plan_placement(config, one_gpu)
    assert len(p.gpus) == 1 and any("needs 2 GPU(s); 1 available" in x.message for x in p.problems)


def test_named_gpu_that_does_not_exist():
    config, facts = snapshots.desktop()
    gpu = config.profile.gpu.model_copy(update={"devices": ["GPU-nope"]})
    p = plan_placement(with_profile(config, gpu=gpu), facts)
    assert any("GPU-nope" in x.message for x in p.problems)


def test_gpu_recipe_on_a_machine_without_gpus():
    config, _ = snapshots.desktop()
    _, demo = examples.load("demo-cpu")
    p = plan_placement(config, demo)
    assert p.gpus == [] and "libnvidia-ml" in p.problems[0].message


# ---------------------------------------------------------------- NCCL


def test_desktop_nccl_matches_the_report():
    config, facts = snapshots.desktop()
    p = plan_placement(config, facts)
    n = plan_nccl(config, facts, p)
    assert n.env == {"VLLM_ENABLE_PCIE_ALLREDUCE": "0", "NCCL_P2P_DISABLE": "0", "NCCL_P2P_LEVEL": "PHB"}
    assert n.serve_flags == ["--disable-custom-all-reduce"] and n.p2p is True


def test_p2p_refused_by_the_driver_turns_p2p_off_and_names_the_iommu_cost():
    config, _ = snapshots.desktop()
    facts = snapshots.p2p_unsupported()
    n = plan_nccl(config, facts, plan_placement(config, facts))
    assert n.env["NCCL_P2P_DISABLE"] == "1" and "NCCL_P2P_LEVEL" not in n.env
    assert "--disable-custom-all-reduce" in n.serve_flags
    warning = next(p for p in n.problems if "IOMMU" in p.message)
    assert "DMA isolation" in warning.fix


def test_driver_ok_but_no_functional_verdict_keeps_p2p_off():
    config, facts = snapshots.desktop()
    facts = facts.model_copy(deep=True)
    facts.state.p2p = None
    n = plan_nccl(config, facts, plan_placement(config, facts))
    assert n.p2p is False and n.env["NCCL_P2P_DISABLE"] == "1"
    assert "provision --only gpu" in n.problems[0].fix


def test_a_verdict_from_another_driver_is_stale():
    config, facts = snapshots.desktop()
    facts = facts.model_copy(deep=True)
    facts.gpus.driver_version = "600.10.01"
    n = plan_nccl(config, facts, plan_placement(config, facts))
    assert n.p2p is False and any(d.value == "stale" for d in n.decisions)


def test_hang_verdict_with_iommu_on_explains_the_cost():
    config, facts = snapshots.desktop()
    facts = facts.model_copy(deep=True)
    facts.iommu.class_entries = ["ivhd0"]
    facts.state.p2p = P2PVerdict(verdict="hang", measured_at="2026-08-01T00:00:00Z",
                                 driver_version=facts.gpus.driver_version, kernel_cmdline=facts.kernel.cmdline)
    n = plan_nccl(config, facts, plan_placement(config, facts))
    assert n.p2p is False and "DMA isolation" in n.problems[0].fix


def test_single_gpu_needs_no_nccl():
    config, facts = examples.load("pro6000x1-resident")
    n = plan_nccl(config, facts, plan_placement(config, facts))
    assert not n.applies and n.env == {} and n.serve_flags == []


# ---------------------------------------------------------------- storage


def test_desktop_storage_roles_and_rank_stores():
    config, facts = snapshots.desktop()
    s = plan_storage(config, facts, world=2)
    assert s.role("planes_cache").host_path == "/mnt/hostctl/ssd1/moet-planes"
    assert s.role("expert_store").host_path == "/mnt/hostctl/ssd2/moet-store"
    r0, r1 = s.rank_stores
    assert (r0.drive, r0.shared, len(r0.files)) == ("ssd1", False, 3)
    assert all(".rank0of2." in f for f in r0.files)
    assert (r1.drive, r1.shared, r1.files) == ("ssd2", True, [])
    assert s.required_mounts == ["/mnt/hostctl/ssd1", "/mnt/hostctl/ssd2"]


def test_rank_store_not_split_yet_reads_the_shared_store():
    config, facts = snapshots.desktop()
    facts = facts.model_copy(deep=True)
    facts.paths = [p for p in facts.paths if not p.path.endswith("rank0")]
    s = plan_storage(config, facts, world=2)
    assert s.rank_stores[0].files == [] and s.rank_stores[0].status == "not split yet"
    assert any("hostctl store split" in (p.fix or "") for p in s.problems)


def test_stale_rank_copy_is_an_error():
    config, facts = snapshots.desktop()
    facts = facts.model_copy(deep=True)
    copy = facts.path("/mnt/hostctl/ssd1/moet-store-rank0")
    copy.files = [(n, s - 1 if n.endswith(".pack") else s) for n, s in copy.files]
    s = plan_storage(config, facts, world=2)
    assert s.rank_stores[0].files == [] and s.rank_stores[0].status == "stale copy"
    assert any(p.severity == "error" and "differs in size" in p.message for p in s.problems)


def test_cache_on_overlay_or_unmounted_drive_is_an_error():
    config, facts = snapshots.desktop()
    facts = facts.model_copy(deep=True)
    planes = facts.path("/mnt/hostctl/ssd1/moet-planes")
    planes.fs_type, planes.mount_target = "overlay", "/"
    s = plan_storage(config, facts, world=2)
    messages = [p.message for p in s.problems if p.severity == "error"]
    assert any("overlay" in m for m in messages) and any("not mounted" in m for m in messages)


def test_converting_needs_free_space():
    config, facts = snapshots.desktop()
    facts = facts.model_copy(deep=True)
    facts.path("/mnt/hostctl/ssd2/moet-store").free_bytes = 100 * GIB
    assert not plan_storage(config, facts, world=2).problems
    s = plan_storage(with_profile(config, phase="converting"), facts, world=2)
    assert any("ENOSPC" in p.message for p in s.problems)


def test_recipe_role_without_a_target():
    config, facts = examples.load("demo-cpu")
    config = with_recipe(config, lambda d: d.update(storage=["planes_cache"]))
    s = plan_storage(config, facts, world=1)
    assert any("storage.planes_cache" in (p.fix or "") for p in s.problems)


# ---------------------------------------------------------------- power


def test_power_limits_checked_against_each_gpus_range():
    config, facts = snapshots.desktop()
    assert [g.action for g in plan_power(config, facts).gpus] == ["keep", "keep"]
    gpu = config.profile.gpu.model_copy(update={"power_limit_w": 700.0})
    p = plan_power(with_profile(config, gpu=gpu), facts)
    assert [g.action for g in p.gpus] == ["invalid", "invalid"]
    assert "150-600 W" in p.problems[0].message
    gpu = config.profile.gpu.model_copy(update={"power_limit_w": 300.0, "power_limits_w": {"1": 450.0}})
    p = plan_power(with_profile(config, gpu=gpu), facts)
    assert [(g.action, g.desired_w) for g in p.gpus] == [("keep", 300.0), ("set", 450.0)]


def test_power_on_a_host_without_a_driver():
    config, _ = snapshots.desktop()
    _, demo = examples.load("demo-cpu")
    p = plan_power(config, demo)
    assert p.gpus == [] and p.problems[0].severity == "warn"


# ---------------------------------------------------------------- runtime


def test_recipe_host_flag_is_refused_the_profile_decides_the_address():
    config, facts = examples.load("pro6000x1-resident")
    with pytest.raises(InputError) as exc:
        with_recipe(config, lambda d: d["serve_args"].append("--host 0.0.0.0"))
    assert exc.value.exit_code == 2 and any("serve_args[" in d and "--host" in d for d in exc.value.details)
    rt = build_plan(config, facts).runtime
    i = rt.command.index("--host")
    assert rt.command[i + 1] == "127.0.0.1" and rt.command.count("--host") == 1


@pytest.mark.parametrize("where, mutate, code, needs", [
    ("env.VLLM_MOE_W2_PLANES_CACHE", lambda d: d["env"].update(VLLM_MOE_W2_PLANES_CACHE="{planes_cache}/planes"),
     "storage.planes_cache.unnamed", "storage.planes_cache"),
    ("serve_args[0]", lambda d: (d["serve_args"].insert(0, "--speculative-config {\"model\":\"{model:draft}\"}"),
                                 d["requires"].update(extra_models=["draft"])), "runtime.models_dir_unset",
     "runtime.models_dir"),
])
def test_a_placeholder_without_a_value_is_an_error_naming_the_field(where, mutate, code, needs):
    """vLLM-MoET drops such a knob (bench/runner/common.py: build_env); hostctl refuses (docs/vllm-moet-differences.md)."""
    config, facts = examples.load("demo-cpu")
    config = with_recipe(config, mutate)
    plan = build_plan(config, facts)
    assert [p.code for p in plan.errors] == [code], plan.problems
    found = plan.errors[0]
    assert found.message.startswith(f"{where}: {{") and "has no value" in found.message and needs in found.message
    assert "VLLM_MOE_W2_PLANES_CACHE" not in plan.runtime.env and "--speculative-config" not in plan.runtime.command


def test_plan_json_round_trips():
    from hostctl.plan.records import Plan

    config, facts = snapshots.desktop()
    plan = build_plan(config, facts)
    assert Plan.model_validate_json(plan.model_dump_json(), strict=True) == plan
    assert yaml.safe_load(plan.model_dump_json())["schema"] == "hostctl.plan/v1"


def test_nvlink_pair_from_a_real_two_gpu_machine():
    """tests/gpu/h200x2-facts.json was probed on two H200s joined by NVLink (NV18), where the
    functional check measured 253.4 GB/s with P2P and 26.2 GB/s without."""
    from pathlib import Path

    from hostctl.facts import load_snapshot

    facts = load_snapshot(Path(__file__).parent.parent / "gpu" / "h200x2-facts.json")
    assert facts.gpus.pairs[0].nvlink and facts.gpus.pairs[0].topology == "NVLINK"
    config, _ = snapshots.desktop()
    placement = plan_placement(config, facts)
    no_verdict = plan_nccl(config, facts, placement)
    assert no_verdict.p2p is False and no_verdict.custom_all_reduce is True  # NVLink: custom all-reduce stays on
    assert "--disable-custom-all-reduce" not in no_verdict.serve_flags
    facts.state.p2p = P2PVerdict(verdict="ok", measured_at="2026-11-29T09:05:58+00:00",
                                 driver_version=facts.gpus.driver_version, kernel_cmdline=facts.kernel.cmdline,
                                 busbw_gbps=253.42, control_busbw_gbps=26.22,
                                 gpu_uuids=[g.uuid for g in placement.gpus])
    n = plan_nccl(config, facts, placement)
    assert n.p2p is True and n.env == {"NCCL_P2P_DISABLE": "0"}  # NVLink is within NCCL's own reach: no level


@pytest.mark.parametrize("name", NAMES)
def test_the_plan_reads_only_the_facts_plan_collects(name):
    """`hostctl plan` collects PLAN_READS only (hostctl.facts.collect): every other part, replaced
    by what collect leaves there, changes nothing in any plan. A planner that starts reading
    another part fails here until PLAN_READS names it."""
    from hostctl.facts import ALL_READS, PLAN_READS
    from hostctl.facts.records import EngineFacts

    config, facts = examples.load(name)
    assert ALL_READS - PLAN_READS == {"engine", "acs", "kernel_log", "shm", "ports"}
    assert facts.engine.available  # the part dropped below is there to be read
    unread = facts.model_copy(update={"engine": EngineFacts(available=False, reason="not read"),
                                      "acs": None, "kernel_log": None, "shm": None, "ports": []})
    assert build_plan(config, unread).model_dump() == build_plan(config, facts).model_dump()
