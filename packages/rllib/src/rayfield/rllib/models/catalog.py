"""`ModelCatalog`: the model, preprocessor and action distribution for a space.

Custom models and preprocessors are registered by name in the driver; rollout
workers receive the registry with their config (`snapshot` / `restore`), so the
classes travel with the workers instead of through a global registry.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, cast

from rayfield.rllib.models.preprocessors import Preprocessor, get_preprocessor

if TYPE_CHECKING:  # torch is imported when a model is built
    from rayfield.rllib.models.torch_models import TorchModelV2

# The ``model`` config: every key of RLlib 0.7's MODEL_DEFAULTS plus ``vf_share_layers``
# and Ray 2's ``lstm_use_prev_action`` / ``lstm_use_prev_reward``.
MODEL_DEFAULTS: dict[str, Any] = {
    "conv_filters": None,
    "conv_activation": "relu",
    "fcnet_activation": "tanh",
    "fcnet_hiddens": [256, 256],
    "free_log_std": False,
    "squash_to_range": False,  # True: a SquashedGaussian for bounded Box actions
    "use_lstm": False,
    "max_seq_len": 20,
    "lstm_cell_size": 256,
    "lstm_use_prev_action_reward": False,
    "lstm_use_prev_action": False,
    "lstm_use_prev_reward": False,
    "framestack": True,
    "dim": 84,
    "grayscale": False,
    "zero_mean": True,
    "vf_share_layers": False,
    "custom_preprocessor": None,
    "custom_model": None,
    "custom_action_dist": None,
    "custom_options": {},
    "custom_model_config": {},
}

_custom_models: dict[str, type] = {}
_custom_preprocessors: dict[str, type] = {}
_custom_action_dists: dict[str, type] = {}


class ModelCatalog:
    """Static methods that pick and build models, preprocessors and distributions."""

    @staticmethod
    def register_custom_model(name: str, model_class: type) -> None:
        """Make `model_class` (a `TorchModelV2` subclass) usable as ``{"custom_model": name}``."""
        _custom_models[name] = model_class

    @staticmethod
    def register_custom_preprocessor(name: str, preprocessor_class: type) -> None:
        """Make a `Preprocessor` subclass usable as ``{"custom_preprocessor": name}``."""
        _custom_preprocessors[name] = preprocessor_class

    @staticmethod
    def register_custom_action_dist(name: str, dist_class: type) -> None:
        _custom_action_dists[name] = dist_class

    @staticmethod
    def snapshot() -> dict[str, dict[str, type]]:
        """The registered classes, to send to rollout workers."""
        return {
            "models": dict(_custom_models),
            "preprocessors": dict(_custom_preprocessors),
            "action_dists": dict(_custom_action_dists),
        }

    @staticmethod
    def restore(snapshot: dict[str, dict[str, type]] | None) -> None:
        if snapshot:
            _custom_models.update(snapshot.get("models", {}))
            _custom_preprocessors.update(snapshot.get("preprocessors", {}))
            _custom_action_dists.update(snapshot.get("action_dists", {}))

    @staticmethod
    def get_action_dist(
        action_space: Any,
        config: dict[str, Any] | None,
        dist_type: Any = None,
        framework: str = "torch",
    ) -> tuple[type, int]:
        """The distribution class and the model output width it needs.

        Discrete -> `Categorical`; MultiDiscrete or a Tuple of Discrete ->
        `MultiCategorical`; Box -> `DiagGaussian` (or `Deterministic` with
        ``dist_type="deterministic"``, or a `SquashedGaussian` over the Box's bounds
        with ``dist_type="squashed_gaussian"`` or the model config's
        ``squash_to_range: True``); `Simplex` (or a Box with ``dist_type="dirichlet"``)
        -> `Dirichlet`.

        Raises:
            NotImplementedError: the action space is not Discrete or Box.
            KeyError: ``custom_action_dist`` names no registered distribution.
            ValueError: a squashed Gaussian for a Box with an infinite bound,
                ``dist_type="squashed_gaussian"`` for a space that is not a Box, or
                ``dist_type="dirichlet"`` for one that is neither a Simplex nor a Box.
        """
        import gymnasium as gym

        from rayfield.rllib.models import distributions as d
        from rayfield.rllib.utils.spaces.simplex import Simplex

        config = config or {}
        if config.get("custom_action_dist"):
            name = config["custom_action_dist"]
            if name not in _custom_action_dists:
                raise KeyError(f"custom_action_dist {name!r} is not registered")
            cls = _custom_action_dists[name]
        elif dist_type == "deterministic":
            cls = d.Deterministic
        elif dist_type == "squashed_gaussian" and not isinstance(action_space, gym.spaces.Box):
            raise ValueError(f"dist_type='squashed_gaussian' needs a Box, got {action_space!r}")
        elif dist_type == "dirichlet" or isinstance(action_space, Simplex):
            if not isinstance(action_space, (Simplex, gym.spaces.Box)):
                raise ValueError(f"dist_type='dirichlet' needs a Simplex, got {action_space!r}")
            cls = d.Dirichlet
        elif isinstance(action_space, gym.spaces.Discrete):
            cls = d.Categorical
        elif isinstance(action_space, gym.spaces.MultiDiscrete):
            sizes = tuple(int(n) for n in action_space.nvec.ravel())
            cls = type("MultiCategorical", (d.MultiCategorical,), {"input_lens": sizes})
        elif isinstance(action_space, gym.spaces.Tuple) and all(
            isinstance(s, gym.spaces.Discrete) for s in action_space.spaces
        ):  # e.g. an agent group's joint action
            sizes = tuple(int(cast(gym.spaces.Discrete, s).n) for s in action_space.spaces)
            cls = type("MultiCategorical", (d.MultiCategorical,), {"input_lens": sizes})
            return cls, sum(sizes)
        elif isinstance(action_space, gym.spaces.Box):
            if len(action_space.shape) != 1:
                raise NotImplementedError(
                    f"Box action spaces must be 1-D, got shape {action_space.shape}"
                )
            if dist_type == "squashed_gaussian" or config.get("squash_to_range"):
                low, high = d.SquashedGaussian.check_bounds(action_space.low, action_space.high)
                cls = type(
                    "SquashedGaussian",
                    (d.SquashedGaussian,),
                    {"low": tuple(low.tolist()), "high": tuple(high.tolist())},
                )
            else:
                cls = d.DiagGaussian
        else:
            raise NotImplementedError(
                f"no action distribution for {action_space!r} yet: use Discrete, "
                "MultiDiscrete or 1-D Box actions"
            )
        return cls, int(cls.required_model_output_shape(action_space, config))  # type: ignore[attr-defined]

    @staticmethod
    def get_preprocessor_for_space(
        observation_space: Any, options: dict[str, Any] | None = None
    ) -> Preprocessor:
        """A preprocessor instance for the space (a custom one when the options name it).

        Raises:
            KeyError: ``custom_preprocessor`` names no registered preprocessor.
        """
        options = options or {}
        name = options.get("custom_preprocessor")
        if name:
            if name not in _custom_preprocessors:
                raise KeyError(
                    f"custom_preprocessor {name!r} is not registered: call "
                    "ModelCatalog.register_custom_preprocessor first"
                )
            return _custom_preprocessors[name](observation_space, options)
        return get_preprocessor(observation_space)(observation_space, options)

    @staticmethod
    def get_preprocessor(env: Any, options: dict[str, Any] | None = None) -> Preprocessor:
        return ModelCatalog.get_preprocessor_for_space(env.observation_space, options)

    @staticmethod
    def get_model_v2(
        obs_space: Any,
        action_space: Any,
        num_outputs: int,
        model_config: dict[str, Any] | None,
        framework: str = "torch",
        name: str = "default_model",
        default_model: type | None = None,
        **model_kwargs: Any,
    ) -> Any:
        """Build the torch model for the spaces.

        Args:
            obs_space: the preprocessed observation space (a Box).
            action_space: the action space.
            num_outputs: width of the model output.
            model_config: ``model`` config; missing keys take ``MODEL_DEFAULTS``.
            framework: only ``"torch"``.
            name: the model's name.
            default_model: the class to use when no custom model is named.

        Image observations (``(H, W, C)``) get the `VisionNetwork`, others the
        `FullyConnectedNetwork`; with ``use_lstm`` the chosen model (or the custom
        one, which must then accept ``num_outputs=None`` and return features) is
        wrapped in the `LSTMWrapper`.

        Raises:
            KeyError: ``custom_model`` names no registered model.
            ValueError: `framework` is not torch; an image size without default
                ``conv_filters``; ``max_seq_len`` < 1 with ``use_lstm``.
        """
        from rayfield.rllib.models.torch_lstm import LSTMWrapper
        from rayfield.rllib.models.torch_models import FullyConnectedNetwork
        from rayfield.rllib.models.torch_vision import VisionNetwork

        if framework not in ("torch", "pytorch"):
            raise ValueError(
                f"rayfield-rllib builds torch models only, got framework={framework!r}"
            )
        config = copy.deepcopy(MODEL_DEFAULTS)
        config.update(model_config or {})
        custom = config.get("custom_model")
        kwargs = dict(model_kwargs)
        if custom:
            if not isinstance(custom, str):
                cls = custom
            elif custom in _custom_models:
                cls = _custom_models[custom]
            else:
                raise KeyError(
                    f"custom_model {custom!r} is not registered: call "
                    "ModelCatalog.register_custom_model first"
                )
            kwargs = {**config.get("custom_model_config", {}), **model_kwargs}
        elif default_model is not None:
            cls = default_model
        elif len(obs_space.shape) == 3:
            cls = VisionNetwork
        else:
            cls = FullyConnectedNetwork
        if not config.get("use_lstm"):
            return cls(obs_space, action_space, num_outputs, config, name, **kwargs)
        if int(config.get("max_seq_len", 20)) < 1:
            raise ValueError(f"max_seq_len must be >= 1, got {config['max_seq_len']}")

        def base(o: Any, a: Any, n: int | None, c: dict[str, Any], nm: str) -> TorchModelV2:
            model: TorchModelV2 = cls(o, a, n, c, nm, **kwargs)
            return model

        return LSTMWrapper(obs_space, action_space, num_outputs, config, name, base)

    @staticmethod
    def get_torch_model(
        obs_space: Any,
        num_outputs: int,
        options: dict[str, Any] | None = None,
        default_model_cls: Any = None,
    ) -> Any:
        return ModelCatalog.get_model_v2(
            obs_space, None, num_outputs, options, default_model=default_model_cls
        )
