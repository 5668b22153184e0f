"""`COMMON_CONFIG`: the keys every algorithm accepts, with RLlib 0.7's defaults.

Also accepted: the Ray 2 names of the same settings (`CONFIG_ALIASES`), mapped to
the 0.7 key before checking. TensorFlow-only keys (``tf_session_args``, ``eager``...)
are accepted and have no effect: every policy here is torch.
"""

from __future__ import annotations

import copy
from typing import Any

from rayfield.rllib.models.catalog import MODEL_DEFAULTS
from rayfield.rllib.utils.config import NumberRange, merge_dicts

COMMON_CONFIG: dict[str, Any] = {
    # Debugging
    "monitor": False,
    "log_level": "WARN",
    "callbacks": None,
    "ignore_worker_failures": False,
    "recreate_failed_workers": False,
    "log_sys_usage": True,
    "use_eager": False,
    "eager": False,
    "no_eager_on_workers": False,
    "eager_tracing": False,
    "framework": "torch",
    "use_pytorch": True,
    # Policy
    "model": MODEL_DEFAULTS,
    "optimizer": {},
    # Environment
    "gamma": 0.99,
    "horizon": None,
    "soft_horizon": False,
    "no_done_at_end": False,
    "env_config": {},
    "env": None,
    "clip_rewards": None,
    "clip_actions": True,
    "preprocessor_pref": "deepmind",
    "lr": 0.0001,
    "lr_schedule": None,
    "explore": True,
    # Evaluation
    "evaluation_interval": None,
    "evaluation_num_episodes": 10,
    "evaluation_config": {},
    # Resources
    "num_workers": 2,
    "num_gpus": 0,
    "num_cpus_per_worker": 1,
    "num_gpus_per_worker": 0,
    "custom_resources_per_worker": {},
    "num_cpus_for_driver": 1,
    # How a Tune trial's bundles (trainer + one a worker) are placed: PACK, SPREAD,
    # STRICT_PACK or STRICT_SPREAD (see default_resource_request).
    "placement_strategy": "PACK",
    "memory": 0,
    "object_store_memory": 0,
    "memory_per_worker": 0,
    "object_store_memory_per_worker": 0,
    # Execution
    "num_envs_per_worker": 1,
    "rollout_fragment_length": 200,
    "train_batch_size": 200,
    "batch_mode": "truncate_episodes",
    "sample_async": False,
    "observation_filter": "NoFilter",
    "synchronize_filters": True,
    "tf_session_args": {
        "intra_op_parallelism_threads": 2,
        "inter_op_parallelism_threads": 2,
        "gpu_options": {"allow_growth": True},
        "log_device_placement": False,
        "device_count": {"CPU": 1},
        "allow_soft_placement": True,
    },
    "local_tf_session_args": {"intra_op_parallelism_threads": 8, "inter_op_parallelism_threads": 8},
    "compress_observations": False,
    "collect_metrics_timeout": 180,
    "metrics_smoothing_episodes": 100,
    "remote_worker_envs": False,
    "remote_env_batch_wait_ms": 0,
    "min_iter_time_s": 0,
    "timesteps_per_iteration": 0,
    "seed": None,
    # Offline datasets
    "input": "sampler",
    "input_evaluation": ["is", "wis"],
    "postprocess_inputs": False,
    "shuffle_buffer_size": 0,
    "actions_in_input_normalized": False,
    "output": None,
    "output_config": {},
    "output_compress_columns": ["obs", "new_obs"],
    "output_max_file_size": 64 * 1024 * 1024,
    # Multi-agent
    "multiagent": {"policies": {}, "policy_mapping_fn": None, "policies_to_train": None},
}

# Sub-dicts that may gain keys the defaults do not have.
ALLOW_UNKNOWN_SUBKEYS = [
    "tf_session_args",
    "local_tf_session_args",
    "env_config",
    "model",
    "optimizer",
    "multiagent",
    "custom_resources_per_worker",
    "evaluation_config",
    "output_config",
    "exploration_config",
]

# The numeric keys every trainer checks (`Trainer.validate_config`): finite and in range.
RESOURCE_RANGES: dict[str, NumberRange] = {
    "num_workers": NumberRange(low=0, integer=True),
    "num_gpus": NumberRange(low=0),
    "num_cpus_per_worker": NumberRange(low=0),
    "num_gpus_per_worker": NumberRange(low=0),
    "num_cpus_for_driver": NumberRange(low=0),
}
COMMON_RANGES: dict[str, NumberRange] = {
    **RESOURCE_RANGES,
    "gamma": NumberRange(low=0, high=1),
    "lr": NumberRange(low=0),
    "num_envs_per_worker": NumberRange(low=1, integer=True),
    "train_batch_size": NumberRange(low=1),
    "evaluation_num_episodes": NumberRange(low=1, integer=True),
    "metrics_smoothing_episodes": NumberRange(low=1),
    "timesteps_per_iteration": NumberRange(low=0),
    "min_iter_time_s": NumberRange(low=0),
    "collect_metrics_timeout": NumberRange(low=0),
    "shuffle_buffer_size": NumberRange(low=0, integer=True),
    "output_max_file_size": NumberRange(low=1),
}

# Keys whose values may take several types (checked where they are used).
LOOSE_TYPED_KEYS = {
    "callbacks",
    "clip_rewards",
    "horizon",
    "seed",
    "input",
    "output",
    "lr_schedule",
    "evaluation_interval",
    "input_evaluation",
    "env",
    "num_gpus",
    "num_cpus_per_worker",
    "num_gpus_per_worker",
    "num_cpus_for_driver",
    "explore",
    "rollout_fragment_length",
    "mixer",  # QMIX: "qmix", "vdn" or None
}

# Ray 2 (and 0.7 pre-rename) names -> the key used here.
CONFIG_ALIASES = {
    "sample_batch_size": "rollout_fragment_length",
    "num_env_runners": "num_workers",
    "num_rollout_workers": "num_workers",
    "num_envs_per_env_runner": "num_envs_per_worker",
    "num_cpus_per_env_runner": "num_cpus_per_worker",
    "num_gpus_per_env_runner": "num_gpus_per_worker",
    "custom_resources_per_env_runner": "custom_resources_per_worker",
    "min_time_s_per_iteration": "min_iter_time_s",
    "min_sample_timesteps_per_iteration": "timesteps_per_iteration",
    "metrics_num_episodes_for_smoothing": "metrics_smoothing_episodes",
    "metrics_episode_collection_timeout_s": "collect_metrics_timeout",
    "num_cpus_for_main_process": "num_cpus_for_driver",
    "num_cpus_for_local_worker": "num_cpus_for_driver",
    "ignore_env_runner_failures": "ignore_worker_failures",
    "recreate_failed_env_runners": "recreate_failed_workers",
    "evaluation_duration": "evaluation_num_episodes",
    "off_policy_estimation_methods": "input_evaluation",
    "num_steps_sampled_before_learning_starts": "learning_starts",
    "q_model_config": "Q_model",
    "policy_model_config": "policy_model",
}

# Removed keys and what to use instead.
REMOVED_KEYS = {
    "gpu": "use num_gpus=0|1",
    "gpu_fraction": "use num_gpus=<fraction>",
    "use_gpu_for_workers": "use num_gpus_per_worker=1",
}


def with_common_config(extra_config: dict[str, Any]) -> dict[str, Any]:
    """`COMMON_CONFIG` deep-copied and updated with an algorithm's own keys."""
    return merge_dicts(copy.deepcopy(COMMON_CONFIG), extra_config)


with_base_config = merge_dicts
