"""`AlgorithmConfig`: Ray 2's builder over the same config dict.

    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=2)
        .training(lr=3e-4, lambda_=0.95)
    )
    algo = config.build()

Every builder method takes keyword arguments, maps Ray 2 names to the config keys
used here (``num_env_runners`` -> ``num_workers``, ``lambda_`` -> ``lambda``...),
checks them against the algorithm's keys at once (an unknown one raises an error
naming the closest key) and returns the config object. `to_dict` gives the
classic dict.
"""

from __future__ import annotations

import copy
from typing import Any

from rayfield.rllib.agents.common_config import CONFIG_ALIASES
from rayfield.rllib.utils.config import unknown_key_error

# Ray 2 names that differ from the classic key, beyond CONFIG_ALIASES.
_RENAMES = {
    "lambda_": "lambda",
    "minibatch_size": "sgd_minibatch_size",
    "num_epochs": "num_sgd_iter",
    "train_batch_size_per_learner": "train_batch_size",
    "callbacks_class": "callbacks",
    "evaluation_num_workers": "evaluation_num_env_runners",
    "num_gpus_per_learner": "num_gpus",
}

# Ray 2 settings that have no effect here (new API stack switches, learner counts).
_NO_EFFECT = {
    "enable_rl_module_and_learner",
    "enable_env_runner_and_connector_v2",
    "_enable_new_api_stack",
    "num_learners",
    "evaluation_num_env_runners",
    "disable_env_checking",
    "render_env",
    "torch_compile_learner",
    "torch_compile_worker",
    "eager_max_retraces",
    "evaluation_parallel_to_training",
    "always_attach_evaluation_results",
    "log_sys_usage",
    "checkpoint_trainable_policies_only",
    "export_native_model_files",
}


class AlgorithmConfig:
    """A builder for an algorithm's config.

    Args:
        algo_class: the algorithm (`Trainer` subclass) the config is for.
    """

    def __init__(self, algo_class: type | None = None) -> None:
        self.algo_class = algo_class
        self._overrides: dict[str, Any] = {}

    # -- core -----------------------------------------------------------------------
    def _defaults(self) -> dict[str, Any]:
        if self.algo_class is None:
            from rayfield.rllib.agents.common_config import COMMON_CONFIG

            return COMMON_CONFIG
        return self.algo_class._default_config  # type: ignore[attr-defined]

    def _set(self, **kwargs: Any) -> AlgorithmConfig:
        defaults = self._defaults()
        for name, value in kwargs.items():
            key = _RENAMES.get(name, CONFIG_ALIASES.get(name, name))
            if key in _NO_EFFECT:
                continue
            if key not in defaults:
                valid = set(defaults) | set(_RENAMES) | set(CONFIG_ALIASES)
                raise unknown_key_error(name, valid, "AlgorithmConfig")
            if key == "model" and isinstance(value, dict):
                value = {**self._overrides.get("model", {}), **value}
            self._overrides[key] = (
                copy.deepcopy(value) if isinstance(value, (dict, list)) else value
            )
        return self

    def to_dict(self) -> dict[str, Any]:
        """The classic config dict: the algorithm's defaults with these settings."""
        out = copy.deepcopy(self._defaults())
        for k, v in self._overrides.items():
            if isinstance(out.get(k), dict) and isinstance(v, dict):
                out[k] = {**out[k], **v}
            else:
                out[k] = v
        return out

    def overrides_dict(self) -> dict[str, Any]:
        """Only the settings made on this object."""
        return copy.deepcopy(self._overrides)

    def update_from_dict(self, config: dict[str, Any]) -> AlgorithmConfig:
        return self._set(**config)

    def copy(self, copy_frozen: bool = False) -> AlgorithmConfig:
        return copy.deepcopy(self)

    def build(self, env: Any = None, logger_creator: Any = None) -> Any:
        """The algorithm, built with this config.

        Raises:
            ValueError: no algorithm class (use e.g. `PPOConfig`).
        """
        if self.algo_class is None:
            raise ValueError(
                "this AlgorithmConfig has no algorithm: use PPOConfig(), DQNConfig()..."
            )
        if env is not None:
            self._set(env=env)
        return self.algo_class(config=self.overrides_dict(), logger_creator=logger_creator)

    build_algo = build

    def __getitem__(self, key: str) -> Any:
        return self.to_dict()[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.to_dict().get(key, default)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name == "algo_class":
            raise AttributeError(name)
        key = _RENAMES.get(name, CONFIG_ALIASES.get(name, name))
        cfg = self.to_dict()
        if key in cfg:
            return cfg[key]
        raise AttributeError(f"AlgorithmConfig has no setting {name!r}")

    # -- builder methods (Ray 2 names) ------------------------------------------------
    def environment(self, env: Any = None, **kwargs: Any) -> AlgorithmConfig:
        """``env`` (gymnasium id, registered name or class), ``env_config``,
        ``clip_rewards``, ``clip_actions``..."""
        if env is not None:
            kwargs["env"] = env
        return self._set(**kwargs)

    def env_runners(self, **kwargs: Any) -> AlgorithmConfig:
        """``num_env_runners``, ``num_envs_per_env_runner``, ``rollout_fragment_length``,
        ``batch_mode``, ``explore``, ``observation_filter``..."""
        return self._set(**kwargs)

    rollouts = env_runners

    def training(self, **kwargs: Any) -> AlgorithmConfig:
        """``gamma``, ``lr``, ``train_batch_size``, ``model``, ``grad_clip`` and the
        algorithm's own keys (``lambda_``, ``clip_param``, ``num_sgd_iter``...)."""
        return self._set(**kwargs)

    def evaluation(self, **kwargs: Any) -> AlgorithmConfig:
        """``evaluation_interval``, ``evaluation_duration``, ``evaluation_config``."""
        return self._set(**kwargs)

    def offline_data(self, **kwargs: Any) -> AlgorithmConfig:
        """``input_`` (or ``input``), ``actions_in_input_normalized``,
        ``postprocess_inputs``, ``shuffle_buffer_size``, ``output``, ``output_config``,
        ``output_compress_columns``, ``output_max_file_size``,
        ``off_policy_estimation_methods`` (see `rayfield.rllib.offline`)."""
        if "input_" in kwargs:
            kwargs["input"] = kwargs.pop("input_")
        return self._set(**kwargs)

    def resources(self, **kwargs: Any) -> AlgorithmConfig:
        """``num_gpus``, ``num_cpus_per_worker``, ``num_cpus_for_main_process``..."""
        return self._set(**kwargs)

    def framework(self, framework: str = "torch", **kwargs: Any) -> AlgorithmConfig:
        return self._set(framework=framework, **kwargs)

    def debugging(self, **kwargs: Any) -> AlgorithmConfig:
        """``seed``, ``log_level``..."""
        kwargs.pop("logger_creator", None)
        kwargs.pop("logger_config", None)
        return self._set(**kwargs)

    def callbacks(self, callbacks_class: Any) -> AlgorithmConfig:
        return self._set(callbacks=callbacks_class)

    def reporting(self, **kwargs: Any) -> AlgorithmConfig:
        return self._set(**kwargs)

    def fault_tolerance(self, **kwargs: Any) -> AlgorithmConfig:
        return self._set(**kwargs)

    def exploration(self, explore: bool | None = None, **kwargs: Any) -> AlgorithmConfig:
        if explore is not None:
            kwargs["explore"] = explore
        return self._set(**kwargs)

    def api_stack(self, **kwargs: Any) -> AlgorithmConfig:
        return self

    def checkpointing(self, **kwargs: Any) -> AlgorithmConfig:
        return self

    def __repr__(self) -> str:
        name = getattr(self.algo_class, "_name", None)
        return f"AlgorithmConfig(algo={name!r}, overrides={self._overrides!r})"
