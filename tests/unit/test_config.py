"""Profile and recipe validation: every bad input names its field and the expected form."""

import textwrap
from pathlib import Path

import pytest
import yaml

from hostctl import examples, paths
from hostctl.config import DriveIdentity, load_config, parse_profile, parse_recipe
from hostctl.errors import InputError


def recipe_data(name="dsv4-flash-0731-tp2-400k"):
    return yaml.safe_load((paths.recipes_dir() / f"{name}.yaml").read_text())


def profile_data():
    import tomllib

    return tomllib.loads((paths.hosts_dir() / "pro6000x2-desktop.toml").read_text())


def full(err: InputError) -> str:
    return "\n".join([str(err), *err.details])


def error_of(fn, *args) -> InputError:
    with pytest.raises(InputError) as info:
        fn(*args)
    return info.value


def test_every_bundled_example_loads():
    assert examples.names() == ["demo-cpu", "pro6000x1-mapped", "pro6000x1-resident", "pro6000x2-desktop"]
    for name in examples.names():
        config, facts = examples.load(name)
        assert config.profile.name == name == facts.hostname or name == "demo-cpu"


def test_unknown_key_names_its_path():
    data = recipe_data()
    data["requires"]["gpu_count"] = 2
    err = error_of(parse_recipe, data)
    assert any(d.startswith("requires.gpu_count: unknown key") for d in err.details), err.details


def test_open_maps_accept_any_key():
    data = recipe_data()
    data["env"]["SOME_NEW_KNOB"] = "1"
    data["warmup"]["anything"] = {"nested": True}
    data["tuning"] = {"objective": "throughput", "axes": {"x": [1, 2]}}
    data["suite_params"] = {"k": 1}
    assert parse_recipe(data).env["SOME_NEW_KNOB"] == "1"


def test_wrong_type_names_field_and_value():
    data = profile_data()
    data["runtime"]["api_port"] = "eight thousand"
    err = error_of(parse_profile, data)
    assert any(d.startswith("runtime.api_port:") and "eight thousand" in d for d in err.details), err.details


def test_sparse_mla_needs_two_request_slots():
    data = recipe_data()
    data["serve_args"] = [a if not a.startswith("--max-num-seqs") else "--max-num-seqs 1" for a in data["serve_args"]]
    err = error_of(parse_recipe, data)
    text = "\n".join(err.details)
    assert "--max-num-seqs" in text and "No free indices" in text and "2 or more" in text


def test_one_slot_is_fine_without_sparse_mla():
    data = recipe_data()
    data["architecture"]["sparse_mla"] = False
    data["serve_args"] = [a if not a.startswith("--max-num-seqs") else "--max-num-seqs 1" for a in data["serve_args"]]
    assert parse_recipe(data).args().get("--max-num-seqs") == "1"


def test_eager_loading_refused_for_f8_e8m0():
    data = recipe_data()
    data["serve_args"].append("--safetensors-load-strategy eager")
    err = error_of(parse_recipe, data)
    assert any("--safetensors-load-strategy" in d and "F8_E8M0" in d for d in err.details)
    data["architecture"]["checkpoint_scale_dtype"] = "F8_E4M3"
    assert parse_recipe(data)


@pytest.mark.parametrize("bad", [0, -300, "300W", True])
def test_power_limit_must_be_a_positive_number(bad):
    data = profile_data()
    data["gpu"]["power_limit_w"] = bad
    err = error_of(parse_profile, data)
    assert any(d.startswith("gpu.power_limit_w:") for d in err.details), err.details


def test_per_gpu_power_limit_must_be_positive():
    data = profile_data()
    data["gpu"]["power_limits_w"] = {"1": -5}
    err = error_of(parse_profile, data)
    assert any(d.startswith("gpu.power_limits_w:") and "'1'" in d for d in err.details), err.details


def test_two_drives_with_the_same_identity():
    data = profile_data()
    data["drives"][1]["identity"] = data["drives"][0]["identity"]
    err = error_of(parse_profile, data)
    assert any("drives[1].identity" in d and "drives[0]" in d for d in err.details), err.details


def test_kernel_device_names_are_not_identities():
    with pytest.raises(ValueError, match="path:/dev/nvme0n1"):
        DriveIdentity.parse("/dev/nvme0n1")
    data = profile_data()
    data["drives"][0]["identity"] = "/dev/nvme1n1"
    err = error_of(parse_profile, data)
    assert any(d.startswith("drives[0].identity:") for d in err.details)


def test_path_identity_is_accepted_with_a_warning(tmp_path: Path):
    profile = tmp_path / "hostctl.toml"
    profile.write_text(textwrap.dedent("""
        name = "loops"
        recipe = "demo-cpu-tiny-moe"
        [[drives]]
        name = "d1"
        identity = "path:/dev/loop7"
    """))
    config = load_config(profile)
    assert config.profile.drives[0].identity.kind == "path"
    assert any("drives[0].identity path:/dev/loop7" in w for w in config.warnings)


def test_exposed_api_requires_a_key():
    data = profile_data()
    data["runtime"]["api_host"] = "0.0.0.0"
    err = error_of(parse_profile, data)
    assert any("api_key_env" in d for d in err.details)
    data["runtime"]["api_key_env"] = "HOSTCTL_API_KEY"
    assert parse_profile(data).runtime.exposed


def test_unknown_placeholder_and_non_flag_serve_args():
    data = recipe_data()
    data["env"]["VLLM_MOE_W2_PLANES_CACHE"] = "{plane_cache}"
    data["serve_args"].append("tensor-parallel-size 2")
    err = error_of(parse_recipe, data)
    text = "\n".join(err.details)
    assert "env.VLLM_MOE_W2_PLANES_CACHE: unknown placeholder {plane_cache}" in text
    assert "expected a flag" in text


def test_json_braces_are_not_placeholders():
    data = recipe_data()
    assert any("{\"method\":\"dspark\"" in a for a in data["serve_args"])
    assert parse_recipe(data).args().get("--speculative-config").startswith("{")


def test_storage_role_must_name_a_drive_or_a_path():
    data = profile_data()
    data["storage"]["planes_cache"] = "ssd9"
    err = error_of(parse_profile, data)
    assert any(d.startswith("storage.planes_cache") or "storage.planes_cache" in d for d in err.details), err.details


def test_missing_profile_and_bad_toml(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(paths, "PROFILE_SEARCH", (Path("hostctl.toml"), tmp_path / "etc.toml"))
    err = error_of(load_config, None)
    assert "no host profile found" in err.message
    bad = tmp_path / "bad.toml"
    bad.write_text("name = \n")
    assert "not valid TOML" in error_of(load_config, bad).message


@pytest.mark.parametrize("spelling, normal", [("/mnt/x/", "/mnt/x"), ("/mnt/./x", "/mnt/x"), ("/mnt//x/.", "/mnt/x")])
def test_mountpoints_are_normalised_when_the_profile_loads(spelling, normal):
    data = profile_data()
    data["drives"][0]["mountpoint"] = spelling
    assert parse_profile(data).drives[0].mount == normal


@pytest.mark.parametrize("bad, why", [("/mnt/../etc", "contains '..'"), ("mnt/x", "expected an absolute path"),
                                      ("/./", "other than /")])
def test_bad_mountpoints_name_the_field(bad, why):
    data = profile_data()
    data["drives"][0]["mountpoint"] = bad
    err = error_of(parse_profile, data)
    assert "drives[0].mountpoint" in full(err) and why in full(err)


def test_two_spellings_of_one_mountpoint_are_a_duplicate():
    data = profile_data()
    data["drives"][0]["mountpoint"] = "/srv/cache/"
    data["drives"][1]["mountpoint"] = "/srv/./cache"
    assert "drives[1].mountpoint: '/srv/cache' is already used by drives[0]" in full(error_of(parse_profile, data))


@pytest.mark.parametrize("bad", [-1, -5, 32768, True])
def test_swap_priority_outside_what_converges_is_refused(bad):
    data = profile_data()
    data["drives"][0]["swap_priority"] = bad
    assert "drives[0].swap_priority" in full(error_of(parse_profile, data))


def test_swap_size_must_be_whole_mib():
    data = profile_data()
    data["drives"][0]["swap"] = "16.5MiB"
    err = full(error_of(parse_profile, data))
    assert "drives[0].swap" in err and "whole number of MiB" in err
    data["drives"][0]["swap"] = "16MiB"
    assert parse_profile(data).drives[0].swap == 16 << 20
