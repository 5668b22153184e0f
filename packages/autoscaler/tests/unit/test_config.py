"""The cluster YAML: validation errors, defaults, the normal form, the launch hash."""

from __future__ import annotations

from pathlib import Path

import pytest

from rayfield.autoscaler.config import ConfigError, launch_hash, load_config, prepare_config

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "local-process.yaml"


def minimal(**extra: object) -> dict:
    return {"cluster_name": "c1", "max_workers": 2, "provider": {"type": "local_process"}, **extra}


def test_minimal_config_gets_the_defaults_and_the_normal_form() -> None:
    cfg = prepare_config(minimal())
    assert cfg["target_utilization_fraction"] == 0.8
    assert cfg["idle_timeout_minutes"] == 5
    assert cfg["upscaling_speed"] == 1.0
    assert "min_workers" not in cfg and "worker_nodes" not in cfg
    assert cfg["setup_commands"] == [] and cfg["file_mounts"] == {}
    assert cfg["provider"] == {"type": "local_process", "use_internal_ips": True}
    assert cfg["head_node_type"] == "head"
    types = cfg["available_node_types"]
    assert types["head"]["max_workers"] == 0
    assert types["worker"] == {
        "node_config": {},
        "resources": {"CPU": 1},
        "min_workers": 0,
        "max_workers": 2,
    }


def test_the_input_is_not_modified() -> None:
    raw = minimal(worker_nodes={"resources": {"CPU": 4}})
    prepare_config(raw)
    assert "available_node_types" not in raw and "worker_nodes" in raw


def test_legacy_worker_nodes_give_the_worker_type_its_resources() -> None:
    cfg = prepare_config(minimal(min_workers=1, worker_nodes={"resources": {"CPU": 4, "GPU": 1}}))
    assert cfg["available_node_types"]["worker"]["resources"] == {"CPU": 4, "GPU": 1}
    assert cfg["available_node_types"]["worker"]["min_workers"] == 1


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (minimal(max_worker=3), "unknown config key 'max_worker': did you mean 'max_workers'?"),
        (
            minimal(provider={"type": "local_process", "cluster_dri": "/x"}),
            "unknown config key 'provider.cluster_dri': did you mean 'cluster_dir'?",
        ),
        (minimal(zzz=1), "unknown config key 'zzz': valid keys: auth, autoscaling_mode"),
        (minimal(max_workers="two"), "config key 'max_workers' has the wrong type: expected "),
        (minimal(idle_timeout_minutes=-1), "config key 'idle_timeout_minutes': -1 is less than"),
        (minimal(target_utilization_fraction=1.5), "'target_utilization_fraction': 1.5 is "),
        (minimal(provider={"type": "azure"}), "config key 'provider.type' is 'azure': it must be"),
        ({"cluster_name": "c", "max_workers": 1}, "is missing a required key: 'provider'"),
        (minimal(setup_commands=["ok", 3]), "'setup_commands[1]' has the wrong type"),
        (minimal(min_workers=3), "min_workers 3 exceeds max_workers 2"),
        (["not", "a", "mapping"], "must be a mapping of keys, not list"),
    ],
)
def test_bad_configs_are_refused_with_one_clear_line(config: object, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        prepare_config(config)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_legacy_form_needs_max_workers() -> None:
    with pytest.raises(ConfigError, match="required key: 'max_workers'"):
        prepare_config({"cluster_name": "c", "provider": {"type": "local_process"}})


def typed(**extra: object) -> dict:
    return {
        "cluster_name": "c2",
        "provider": {"type": "local_process"},
        "head_node_type": "head",
        "available_node_types": {
            "head": {"resources": {"CPU": 0}},
            "small": {"resources": {"CPU": 1}, "max_workers": 4},
            "big": {"resources": {"CPU": 8}, "min_workers": 1, "max_workers": 2},
        },
        **extra,
    }


def test_available_node_types_are_filled_and_max_workers_summed() -> None:
    cfg = prepare_config(typed())
    types = cfg["available_node_types"]
    assert types["head"] == {
        "resources": {"CPU": 0},
        "node_config": {},
        "min_workers": 0,
        "max_workers": 0,
    }
    assert types["big"]["node_config"] == {}
    assert cfg["max_workers"] == 6


def test_node_type_errors() -> None:
    with pytest.raises(
        ConfigError,
        match="head_node_type 'haed' is not in available_node_types: did you mean 'head'",
    ):
        prepare_config(typed(head_node_type="haed"))
    raw = typed()
    del raw["head_node_type"]
    with pytest.raises(ConfigError, match="'head_node_type' is required"):
        prepare_config(raw)
    raw = typed()
    raw["available_node_types"]["big"]["min_worker"] = 1
    with pytest.raises(
        ConfigError, match=r"'available_node_types\.big\.min_worker': did you mean 'min_workers'"
    ):
        prepare_config(raw)
    raw = typed()
    raw["available_node_types"]["big"]["min_workers"] = 3
    with pytest.raises(ConfigError, match="big: min_workers 3 exceeds max_workers 2"):
        prepare_config(raw)
    with pytest.raises(ConfigError, match="set min_workers on each node type"):
        prepare_config(typed(min_workers=1))
    with pytest.raises(ConfigError, match="'worker_nodes' and 'available_node_types' exclude"):
        prepare_config(typed(worker_nodes={}))
    raw = typed()
    raw["available_node_types"]["small"]["resources"] = {"CPU": -1}
    with pytest.raises(ConfigError, match=r"available_node_types\.small\.resources\.CPU"):
        prepare_config(raw)


def test_launch_hash_follows_the_node_config_only() -> None:
    a = prepare_config(typed())
    b = prepare_config(typed(idle_timeout_minutes=1))
    c = typed()
    c["available_node_types"]["big"]["resources"] = {"CPU": 16}
    c = prepare_config(c)
    assert launch_hash(a, "big") == launch_hash(b, "big")
    assert launch_hash(a, "big") != launch_hash(c, "big")
    assert launch_hash(a, "small") == launch_hash(c, "small")


def test_load_config_reads_yaml_and_applies_overrides(tmp_path: Path) -> None:
    cfg = load_config(EXAMPLE, {"cluster_name": "other", "max_workers": None})
    assert cfg["cluster_name"] == "other"
    assert cfg["provider"]["type"] == "local_process"
    bad = tmp_path / "bad.yaml"
    bad.write_text("cluster_name: [unclosed\n")
    with pytest.raises(ConfigError, match="is not valid YAML"):
        load_config(bad)
    with pytest.raises(ConfigError, match="cannot read the cluster config"):
        load_config(tmp_path / "missing.yaml")


@pytest.mark.parametrize(
    "raw",
    [minimal(min_workers=1, worker_nodes={"resources": {"CPU": 2}}), typed(), minimal()],
)
def test_the_normal_form_prepares_to_itself(raw: dict) -> None:
    once = prepare_config(raw)
    assert prepare_config(once) == once


def test_ssh_example_and_what_the_local_provider_requires(tmp_path: Path) -> None:
    cfg = load_config(EXAMPLE.parent / "local-ssh.yaml")
    assert cfg["provider"]["worker_ips"] == ["192.168.1.11", "192.168.1.12"]
    assert cfg["stop_ray_commands"] and cfg["head_start_ray_commands"]
    base = {
        "cluster_name": "c",
        "max_workers": 1,
        "provider": {"type": "local", "head_ip": "10.0.0.1", "worker_ips": ["10.0.0.2"]},
        "auth": {"ssh_user": "u", "ssh_private_key": "k"},
    }
    assert prepare_config(base)["worker_start_ray_commands"]
    with pytest.raises(ConfigError, match=r"exceeds the 1 machines of provider\.worker_ips"):
        prepare_config({**base, "max_workers": 2})
    with pytest.raises(ConfigError, match=r"set auth\.ssh_private_key"):
        prepare_config({**base, "auth": {"ssh_user": "u"}})
    with pytest.raises(ConfigError, match=r"needs provider\.head_ip"):
        prepare_config({**base, "provider": {"type": "local"}})
    mine = prepare_config({**base, "head_start_ray_commands": ["my start"]})
    assert mine["head_start_ray_commands"] == ["my start"]  # given commands are kept


@pytest.mark.parametrize("name", ["local-process.yaml", "local-ssh.yaml", "full.yaml"])
def test_the_example_configs_are_valid(name: str) -> None:
    cfg = load_config(EXAMPLE.parent / name)
    assert prepare_config(cfg) == cfg


def test_the_full_example_has_every_key_acted_on() -> None:
    import yaml

    raw = yaml.safe_load((EXAMPLE.parent / "full.yaml").read_text())
    ignored = {"initial_workers", "autoscaling_mode", "docker"}  # accepted, not acted on
    alternative = {"min_workers", "head_node", "worker_nodes"}  # the reference's form
    from rayfield.autoscaler.config import CLUSTER_SCHEMA

    assert set(CLUSTER_SCHEMA["properties"]) - ignored - alternative <= set(raw)


def test_node_configs_shared_by_a_yaml_anchor_become_copies(tmp_path: Path) -> None:
    path = tmp_path / "anchor.yaml"
    path.write_text(
        "cluster_name: a\nprovider: {type: local_process}\nmax_workers: 1\n"
        "head_node: &node {spec: {image: x}}\nworker_nodes: *node\n"
    )
    types = load_config(path)["available_node_types"]
    head, worker = types["head"]["node_config"], types["worker"]["node_config"]
    assert head == worker
    head["spec"]["serviceAccountName"] = "head-only"  # what a bootstrap does to the head
    assert "serviceAccountName" not in worker["spec"]
