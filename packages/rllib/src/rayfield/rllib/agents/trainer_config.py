"""The config classmethods of `rayfield.rllib.agents.trainer.Trainer` (its base class
`TrainerConfigMethods`): merging a config over the algorithm's defaults with every key
checked (`merge_trainer_configs`), the value checks (`validate_config`, which algorithms
extend), Tune's resource request, the Ray 2 `AlgorithmConfig`, and the policy class.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

from rayfield.rllib.agents.common_config import (
    ALLOW_UNKNOWN_SUBKEYS,
    COMMON_RANGES,
    CONFIG_ALIASES,
    LOOSE_TYPED_KEYS,
    REMOVED_KEYS,
    RESOURCE_RANGES,
)
from rayfield.rllib.evaluation.rollout_worker import resolve_policy_class
from rayfield.rllib.evaluation.worker_set import worker_resources
from rayfield.rllib.models.catalog import MODEL_DEFAULTS
from rayfield.rllib.utils.config import (
    check_ranges,
    check_types,
    deep_update,
    unknown_key_error,
)

__all__ = ["TrainerConfigMethods"]

logger = logging.getLogger("rayfield.rllib")


class TrainerConfigMethods:
    """The config classmethods of `Trainer`, which sets ``_default_config`` (the
    algorithm's defaults) and ``_policy`` (its policy class or dotted path)."""

    _default_config: dict[str, Any]
    _policy: type | str | None

    @classmethod
    def merge_trainer_configs(
        cls, defaults: dict[str, Any], config: dict[str, Any]
    ) -> dict[str, Any]:
        """Defaults updated from `config`, with aliases mapped and every key checked."""
        config = dict(config)
        for old, hint in REMOVED_KEYS.items():
            if old in config:
                raise ValueError(f"config key {old!r} was removed: {hint}")
        for alias, key in CONFIG_ALIASES.items():
            if alias in config and alias not in defaults:
                config[key] = config.pop(alias)
        if "lambda_" in config and "lambda" in defaults:
            config["lambda"] = config.pop("lambda_")
        merged = deep_update(copy.deepcopy(defaults), config, False, ALLOW_UNKNOWN_SUBKEYS)
        check_types(merged, defaults, LOOSE_TYPED_KEYS)
        if not merged["model"].get("custom_model"):  # a custom model may read any key
            for key in merged["model"]:
                if key not in MODEL_DEFAULTS:
                    raise unknown_key_error(key, MODEL_DEFAULTS, "model config")
        if merged.get("framework") not in ("torch", "pytorch"):
            logger.warning("framework=%r: rayfield-rllib runs torch policies", merged["framework"])
        cls.validate_config(merged)
        return merged

    @classmethod
    def validate_config(cls, config: dict[str, Any]) -> None:
        """Check the values: the numbers of `COMMON_RANGES` (``num_workers`` an int
        >= 0, ``lr`` >= 0, ``gamma`` in [0, 1]...), then the algorithm's own checks.

        Raises:
            ConfigTypeError: a number of the wrong type (names the key and its range).
            ValueError: a number out of its range, NaN or infinite (names the key and
                its range), or a bad combination.
        """
        check_ranges(config, COMMON_RANGES)
        if config["batch_mode"] not in ("truncate_episodes", "complete_episodes"):
            raise ValueError(
                "batch_mode must be 'truncate_episodes' or 'complete_episodes', "
                f"got {config['batch_mode']!r}"
            )
        if not isinstance(config["input_evaluation"], (list, tuple, dict)):
            raise ValueError(
                "input_evaluation must be a list (off_policy_estimation_methods: a dict)"
            )
        from rayfield.rllib.offline.worker_io import estimator_specs

        estimator_specs(config)  # unknown estimator names fail here

    @classmethod
    def default_resource_request(cls, config: dict[str, Any]) -> Any:
        """Resources for Tune, as RLlib: a ``tune.PlacementGroupFactory`` of one bundle
        for the trainer (``{"CPU": num_cpus_for_driver, "GPU": num_gpus}``) and one a
        rollout worker (``{"CPU": num_cpus_per_worker, "GPU": num_gpus_per_worker,
        **custom_resources_per_worker}``), placed with ``placement_strategy`` (default
        ``"PACK"``). Without rayfield-tune installed, or when a bundle would reserve
        nothing (core cannot reserve an empty bundle), the equivalent dict
        (``cpu``/``gpu`` and the workers' as ``extra_cpu``/``extra_gpu``).

        Raises:
            ConfigTypeError: a count that is not a number (``num_workers`` not an int).
            ValueError: a negative count, NaN or infinite.
            TuneError: an unknown ``placement_strategy``.
        """
        cf = {**cls._default_config, **config}
        check_ranges(cf, RESOURCE_RANGES)
        head = {"CPU": cf["num_cpus_for_driver"], "GPU": cf["num_gpus"]}
        worker = worker_resources(cf)
        bundles = [head] + [dict(worker) for _ in range(int(cf["num_workers"]))]
        try:
            from rayfield.tune import PlacementGroupFactory
        except ImportError:
            PlacementGroupFactory = None
        if PlacementGroupFactory is not None and all(any(b.values()) for b in bundles):
            return PlacementGroupFactory(bundles, strategy=cf.get("placement_strategy", "PACK"))
        return {
            "cpu": cf["num_cpus_for_driver"],
            "gpu": cf["num_gpus"],
            "extra_cpu": cf["num_cpus_per_worker"] * cf["num_workers"],
            "extra_gpu": cf["num_gpus_per_worker"] * cf["num_workers"],
        }

    @classmethod
    def get_default_config(cls) -> Any:
        """Ray 2: an `AlgorithmConfig` for this algorithm."""
        from rayfield.rllib.algorithms.algorithm_config import AlgorithmConfig

        return AlgorithmConfig(cls)

    @classmethod
    def get_default_policy_class(cls, config: dict[str, Any] | None = None) -> type:
        """The policy class of the algorithm (``_policy``; a dotted path is imported).

        Raises:
            TypeError: the trainer class names no policy.
        """
        if cls._policy is None:
            raise TypeError(f"{cls.__name__} names no policy class: set _policy")
        return resolve_policy_class(cls._policy)
