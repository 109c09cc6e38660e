"""NVML facts against nvidia-smi on a real GPU (the GPU test machine). Read-only: nothing here
changes power limits, clocks or persistence."""

from __future__ import annotations

import shutil

import pytest

from hostctl import runner
from hostctl.facts.gpu import probe_gpus, sysfs_bus_id

pytestmark = pytest.mark.gpu

QUERY = (
    "index,uuid,pci.bus_id,power.limit,power.default_limit,power.min_limit,power.max_limit,"
    "memory.total,pcie.link.gen.max,pcie.link.width.max,persistence_mode"
)


def _smi_rows() -> list[dict[str, str]]:
    if shutil.which("nvidia-smi") is None:
        pytest.skip("no nvidia-smi: no NVIDIA driver on this machine")
    result = runner.run(["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"], timeout=30)
    if not result.ok:
        pytest.skip(f"nvidia-smi cannot query a GPU here: {result.why()}")
    keys = QUERY.split(",")
    return [dict(zip(keys, (v.strip() for v in line.split(",")))) for line in result.stdout.strip().splitlines()]


def _watts(text: str) -> float | None:
    return None if text in ("[N/A]", "[Not Supported]", "") else float(text)


@pytest.fixture(scope="module")
def smi() -> list[dict[str, str]]:
    return _smi_rows()


@pytest.fixture(scope="module")
def gpus(smi):
    facts = probe_gpus()
    assert facts.available, facts.reason
    return facts


def test_driver_facts(gpus):
    assert gpus.driver_version and gpus.nvml_version and gpus.cuda_driver_version
    assert gpus.kernel_module in ("open", "proprietary")


def test_devices_match_nvidia_smi(gpus, smi):
    assert [g.index for g in gpus.devices] == [int(r["index"]) for r in smi]
    for gpu, row in zip(gpus.devices, smi):
        assert gpu.uuid == row["uuid"]
        assert gpu.pci_bus_id == sysfs_bus_id(row["pci.bus_id"])
        assert gpu.memory_total_bytes // 2**20 == int(row["memory.total"])  # nvidia-smi prints MiB
        for ours, key in (
            (gpu.power.limit_w, "power.limit"),
            (gpu.power.default_w, "power.default_limit"),
            (gpu.power.min_w, "power.min_limit"),
            (gpu.power.max_w, "power.max_limit"),
        ):
            theirs = _watts(row[key])
            if theirs is None:
                assert ours is None, key
            else:
                assert ours == pytest.approx(theirs, abs=0.5), key
        assert gpu.pcie.gen_max == int(row["pcie.link.gen.max"])
        assert gpu.pcie.width_max == int(row["pcie.link.width.max"])
        assert gpu.persistence_mode == (row["persistence_mode"] == "Enabled")


def test_power_limits_are_consistent(gpus):
    for gpu in gpus.devices:
        p = gpu.power
        assert p.min_w is not None and p.max_w is not None and p.min_w <= p.max_w
        assert p.limit_w is not None and p.min_w <= p.limit_w <= p.max_w
        assert p.enforced_w is not None and p.enforced_w <= p.limit_w + 0.5


def test_placement_is_known_or_explained(gpus):
    for gpu in gpus.devices:
        assert gpu.numa_node is not None or gpu.numa_reason
        assert gpu.pcie.gen_current and gpu.pcie.width_current


def test_every_pair_has_a_topology(gpus):
    n = len(gpus.devices)
    assert len(gpus.pairs) == n * (n - 1) // 2
    for pair in gpus.pairs:
        assert pair.topology is not None and pair.p2p_read is not None


def test_live_readings_agree_with_nvidia_smi(smi):
    """What `status --watch` and `hostctl metrics` show (hostctl.facts.gpu_telemetry) against
    nvidia-smi's own reading of the same GPUs, a moment apart."""
    from hostctl.facts.gpu_telemetry import read_telemetry

    t = read_telemetry()
    assert t.available, t.reason
    query = "index,uuid,power.limit,enforced.power.limit,memory.total,temperature.gpu"
    result = runner.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"], timeout=30)
    assert result.ok, result.why()
    rows = [dict(zip(query.split(","), (v.strip() for v in line.split(",")))) for line in result.stdout.strip().splitlines()]
    assert [g.uuid for g in t.gpus] == [r["uuid"] for r in rows]
    for g, r in zip(t.gpus, rows):
        assert g.power_limit_w == pytest.approx(_watts(r["power.limit"]), abs=0.5)
        assert g.power_enforced_w == pytest.approx(_watts(r["enforced.power.limit"]), abs=0.5)
        assert g.memory_total_bytes == int(r["memory.total"]) * 1024**2
        assert g.temperature_c is not None and abs(g.temperature_c - int(r["temperature.gpu"])) <= 5
        assert g.power_draw_w is not None and 0 < g.power_draw_w <= g.power_enforced_w * 1.2
        assert g.utilization_percent is not None and 0 <= g.utilization_percent <= 100
        assert g.memory_used_bytes is not None and 0 <= g.memory_used_bytes <= g.memory_total_bytes
        assert g.clocks_event_reasons is not None and all(isinstance(n, str) and n for n in g.clocks_event_reasons)
