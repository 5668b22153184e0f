from __future__ import annotations

import pytest

from rayfield.rllib.agents.common_config import COMMON_CONFIG
from rayfield.rllib.agents.ppo import DEFAULT_CONFIG, PPOTrainer
from rayfield.rllib.algorithms.ppo import PPO, PPOConfig
from rayfield.rllib.utils.config import ConfigTypeError, UnknownConfigKeyError, deep_update

SPEC_KEYS = [
    "monitor",
    "log_level",
    "callbacks",
    "ignore_worker_failures",
    "log_sys_usage",
    "use_eager",
    "eager",
    "no_eager_on_workers",
    "model",
    "optimizer",
    "gamma",
    "horizon",
    "soft_horizon",
    "no_done_at_end",
    "env_config",
    "env",
    "clip_rewards",
    "clip_actions",
    "preprocessor_pref",
    "lr",
    "evaluation_interval",
    "evaluation_num_episodes",
    "evaluation_config",
    "num_workers",
    "num_gpus",
    "num_cpus_per_worker",
    "num_gpus_per_worker",
    "custom_resources_per_worker",
    "num_cpus_for_driver",
    "memory",
    "object_store_memory",
    "memory_per_worker",
    "object_store_memory_per_worker",
    "num_envs_per_worker",
    "train_batch_size",
    "batch_mode",
    "sample_async",
    "observation_filter",
    "synchronize_filters",
    "tf_session_args",
    "local_tf_session_args",
    "compress_observations",
    "collect_metrics_timeout",
    "metrics_smoothing_episodes",
    "remote_worker_envs",
    "remote_env_batch_wait_ms",
    "min_iter_time_s",
    "timesteps_per_iteration",
    "seed",
    "input",
    "input_evaluation",
    "postprocess_inputs",
    "shuffle_buffer_size",
    "output",
    "output_compress_columns",
    "output_max_file_size",
    "multiagent",
]


def test_common_config_has_every_spec_key() -> None:
    assert not [k for k in SPEC_KEYS if k not in COMMON_CONFIG]


def test_unknown_key_names_the_closest() -> None:
    with pytest.raises(UnknownConfigKeyError, match="did you mean 'num_workers'"):
        PPOTrainer.merge_trainer_configs(DEFAULT_CONFIG, {"num_worker": 1})
    with pytest.raises(UnknownConfigKeyError, match="'sgd_minibatch_size'"):
        PPOTrainer.merge_trainer_configs(DEFAULT_CONFIG, {"sgd_minibatchsize": 1})


def test_ill_typed_value() -> None:
    with pytest.raises(ConfigTypeError, match="'gamma'"):
        PPOTrainer.merge_trainer_configs(DEFAULT_CONFIG, {"gamma": "high"})
    with pytest.raises(ConfigTypeError, match="'clip_actions'"):
        PPOTrainer.merge_trainer_configs(DEFAULT_CONFIG, {"clip_actions": 1})


def test_aliases_removed_keys_and_subkeys() -> None:
    merged = PPOTrainer.merge_trainer_configs(
        DEFAULT_CONFIG,
        {
            "sample_batch_size": 50,
            "num_env_runners": 3,
            "env_config": {"anything": 1},
            "model": {"fcnet_hiddens": [8]},
        },
    )
    assert merged["rollout_fragment_length"] == 50 and merged["num_workers"] == 3
    assert merged["model"]["fcnet_hiddens"] == [8] and "use_lstm" in merged["model"]
    with pytest.raises(ValueError, match="num_gpus"):
        PPOTrainer.merge_trainer_configs(DEFAULT_CONFIG, {"gpu": True})
    with pytest.raises(UnknownConfigKeyError):
        PPOTrainer.merge_trainer_configs(DEFAULT_CONFIG, {"model": {"fcnet_hidden": [8]}})


def test_ppo_checks() -> None:
    with pytest.raises(ValueError, match="sgd_minibatch_size"):
        PPOTrainer.merge_trainer_configs(
            DEFAULT_CONFIG, {"sgd_minibatch_size": 500, "train_batch_size": 100}
        )


def test_deep_update_whitelist() -> None:
    base = {"a": {"x": 1}, "b": {"y": 2}}
    deep_update(base, {"a": {"z": 3}}, False, ["a"])
    assert base["a"] == {"x": 1, "z": 3}
    with pytest.raises(UnknownConfigKeyError):
        deep_update(base, {"b": {"q": 1}}, False, ["a"])


def test_algorithm_config_builder() -> None:
    cfg = (
        PPOConfig()
        .environment("CartPole-v1", env_config={"k": 1})
        .env_runners(num_env_runners=0, num_envs_per_env_runner=4, rollout_fragment_length=16)
        .training(lr=3e-4, lambda_=0.9, train_batch_size=128, model={"fcnet_hiddens": [16]})
        .resources(num_gpus=0)
        .debugging(seed=3)
    )
    d = cfg.to_dict()
    assert d["env"] == "CartPole-v1" and d["num_workers"] == 0 and d["num_envs_per_worker"] == 4
    assert d["lambda"] == 0.9 and d["lr"] == 3e-4 and d["model"]["fcnet_hiddens"] == [16]
    assert d["model"]["fcnet_activation"] == "tanh"
    assert cfg.lr == 3e-4 and cfg.algo_class is PPO
    with pytest.raises(UnknownConfigKeyError, match="did you mean 'clip_param'"):
        PPOConfig().training(clip_parm=0.1)


def test_ppo_trainer_imports_without_torch_and_names_its_policy_lazily() -> None:
    import subprocess
    import sys

    # the trainer starts its rollout workers before the driver loads torch
    code = (
        "import sys; from rayfield.rllib.agents.ppo import PPOTrainer; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    from rayfield.rllib.agents.ppo import PPOTorchPolicy
    from rayfield.rllib.evaluation.rollout_worker import resolve_policy_class

    assert PPOTrainer.get_default_policy_class() is PPOTorchPolicy
    assert resolve_policy_class(PPOTorchPolicy) is PPOTorchPolicy
    with pytest.raises(AttributeError):
        resolve_policy_class("rayfield.rllib.agents.ppo.ppo_torch_policy.NoSuchPolicy")


@pytest.mark.parametrize(
    ("overrides", "error", "match"),
    [
        ({"num_workers": -1}, ValueError, r"'num_workers' must be an int >= 0, got -1"),
        ({"num_workers": 1.5}, ConfigTypeError, r"'num_workers' must be an int >= 0, got float"),
        ({"lr": float("nan")}, ValueError, r"'lr' must be a finite number >= 0, got nan"),
        ({"lr": float("inf")}, ValueError, r"'lr' must be a finite number >= 0, got inf"),
        ({"lr": -0.1}, ValueError, r"'lr' must be a finite number >= 0"),
        ({"gamma": 5}, ValueError, r"'gamma' must be a finite number in \[0, 1\], got 5"),
        ({"gamma": -0.5}, ValueError, r"'gamma' must be a finite number in \[0, 1\]"),
        ({"num_gpus": -1}, ValueError, r"'num_gpus' must be a finite number >= 0"),
        ({"num_gpus": "1"}, ConfigTypeError, r"'num_gpus' must be a finite number >= 0"),
        ({"num_cpus_per_worker": -1}, ValueError, r"'num_cpus_per_worker' must be"),
        ({"num_envs_per_worker": 0}, ValueError, r"'num_envs_per_worker' must be an int >= 1"),
        ({"train_batch_size": 0}, ValueError, r"'train_batch_size' must be a finite number >= 1"),
        ({"evaluation_num_episodes": 0}, ValueError, r"'evaluation_num_episodes' must be"),
        ({"timesteps_per_iteration": -5}, ValueError, r"'timesteps_per_iteration' must be"),
    ],
)
def test_numbers_out_of_range_name_the_key_and_the_range(
    overrides: dict, error: type, match: str
) -> None:
    with pytest.raises(error, match=match):
        PPOTrainer.merge_trainer_configs(DEFAULT_CONFIG, overrides)


def test_numbers_at_the_ends_of_their_ranges_are_accepted() -> None:
    edges = {"num_workers": 0, "lr": 0.0, "gamma": 1, "num_gpus": 0.5, "train_batch_size": 1}
    merged = PPOTrainer.merge_trainer_configs(DEFAULT_CONFIG, {**edges, "sgd_minibatch_size": 1})
    assert {k: merged[k] for k in edges} == edges
    assert PPOTrainer.merge_trainer_configs(DEFAULT_CONFIG, {"gamma": 0})["gamma"] == 0


def test_the_resource_request_refuses_negative_counts() -> None:
    with pytest.raises(ValueError, match=r"'num_workers' must be an int >= 0, got -1"):
        PPOTrainer.default_resource_request({"num_workers": -1})
    assert PPOTrainer.default_resource_request({"num_workers": 3}).required_resources == {
        "CPU": 4.0
    }


def test_the_resource_request_is_a_placement_group_factory_as_rllib() -> None:
    from rayfield import tune

    pgf = PPOTrainer.default_resource_request(
        {
            "num_workers": 2,
            "num_cpus_for_driver": 2,
            "num_gpus": 0.5,
            "num_cpus_per_worker": 1,
            "custom_resources_per_worker": {"sim": 1},
            "placement_strategy": "SPREAD",
        }
    )
    assert isinstance(pgf, tune.PlacementGroupFactory)
    assert pgf.bundles == [{"CPU": 2.0, "GPU": 0.5}] + [{"CPU": 1.0, "sim": 1.0}] * 2
    assert pgf.strategy == "SPREAD"
    assert PPOTrainer.default_resource_request({"num_workers": 0}).bundles == [{"CPU": 1.0}]
    # A bundle of nothing cannot be reserved: the equivalent dict then.
    assert PPOTrainer.default_resource_request({"num_workers": 2, "num_cpus_per_worker": 0}) == {
        "cpu": 1,
        "gpu": 0,
        "extra_cpu": 0,
        "extra_gpu": 0,
    }
    with pytest.raises(tune.TuneError, match="strategy must be one of"):
        PPOTrainer.default_resource_request({"placement_strategy": "CLOSE"})
