"""Action distributions over the model's outputs (torch).

Each takes the model's output tensor (float32[B, num_outputs]) and offers
``sample``, ``deterministic_sample``, ``logp(actions)``, ``entropy`` and
``kl(other)``, all batched (one value per row). They use torch ops directly rather
than ``torch.distributions`` to keep the per-step sampling path short.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch


class ActionDistribution:
    """Base class.

    Args:
        inputs: float32[B, num_outputs], the model's outputs.
        model: the model that produced them (unused by the built-in ones).
    """

    def __init__(self, inputs: torch.Tensor, model: Any = None) -> None:
        self.inputs = inputs
        self.model = model
        self.last_sample: torch.Tensor | None = None

    def sample(self) -> torch.Tensor:
        raise NotImplementedError

    def deterministic_sample(self) -> torch.Tensor:
        raise NotImplementedError

    def logp(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def entropy(self) -> torch.Tensor:
        raise NotImplementedError

    def kl(self, other: ActionDistribution) -> torch.Tensor:
        raise NotImplementedError

    def sampled_action_logp(self) -> torch.Tensor:
        """Log-probability of the last `sample()`."""
        assert self.last_sample is not None, "call sample() first"
        return self.logp(self.last_sample)

    @staticmethod
    def required_model_output_shape(action_space: Any, model_config: dict[str, Any]) -> int:
        raise NotImplementedError


class Categorical(ActionDistribution):
    """A categorical distribution over Discrete(n) actions from n logits."""

    def __init__(self, inputs: torch.Tensor, model: Any = None) -> None:
        super().__init__(inputs, model)
        self.log_probs = torch.log_softmax(inputs, dim=-1)

    def sample(self) -> torch.Tensor:
        self.last_sample = torch.multinomial(self.log_probs.exp(), 1).squeeze(-1)
        return self.last_sample

    def deterministic_sample(self) -> torch.Tensor:
        self.last_sample = self.inputs.argmax(dim=-1)
        return self.last_sample

    def logp(self, x: torch.Tensor) -> torch.Tensor:
        return self.log_probs.gather(-1, x.long().unsqueeze(-1)).squeeze(-1)

    def entropy(self) -> torch.Tensor:
        return -(self.log_probs.exp() * self.log_probs).sum(-1)

    def kl(self, other: ActionDistribution) -> torch.Tensor:
        assert isinstance(other, Categorical)
        return (self.log_probs.exp() * (self.log_probs - other.log_probs)).sum(-1)

    @staticmethod
    def required_model_output_shape(action_space: Any, model_config: dict[str, Any]) -> int:
        return int(action_space.n)


class MultiCategorical(ActionDistribution):
    """Independent categoricals over MultiDiscrete([n1, n2, ...]) actions; the inputs
    are the concatenated logits (n1 + n2 + ... columns), actions are int[B, k]."""

    input_lens: tuple[int, ...] | None = None  # set by ModelCatalog for a space

    def __init__(self, inputs: torch.Tensor, model: Any = None, input_lens: Any = None) -> None:
        super().__init__(inputs, model)
        input_lens = input_lens or self.input_lens
        if input_lens is None:
            raise ValueError("MultiCategorical needs the sizes of its parts (input_lens)")
        self.cats = [Categorical(x) for x in torch.split(inputs, list(input_lens), dim=-1)]

    def sample(self) -> torch.Tensor:
        self.last_sample = torch.stack([c.sample() for c in self.cats], dim=-1)
        return self.last_sample

    def deterministic_sample(self) -> torch.Tensor:
        self.last_sample = torch.stack([c.deterministic_sample() for c in self.cats], dim=-1)
        return self.last_sample

    def logp(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([c.logp(x[..., i]) for i, c in enumerate(self.cats)], -1).sum(-1)

    def entropy(self) -> torch.Tensor:
        return torch.stack([c.entropy() for c in self.cats], dim=-1).sum(-1)

    def kl(self, other: ActionDistribution) -> torch.Tensor:
        assert isinstance(other, MultiCategorical)
        return torch.stack([a.kl(b) for a, b in zip(self.cats, other.cats)], -1).sum(-1)

    @staticmethod
    def required_model_output_shape(action_space: Any, model_config: dict[str, Any]) -> int:
        return int(np.sum(action_space.nvec))


class DiagGaussian(ActionDistribution):
    """A Gaussian with diagonal covariance: the first half of the inputs are the
    means, the second half the log standard deviations."""

    def __init__(self, inputs: torch.Tensor, model: Any = None) -> None:
        super().__init__(inputs, model)
        self.mean, self.log_std = torch.chunk(inputs, 2, dim=-1)
        self.std = self.log_std.exp()

    def sample(self) -> torch.Tensor:
        self.last_sample = self.mean + self.std * torch.randn_like(self.mean)
        return self.last_sample

    def deterministic_sample(self) -> torch.Tensor:
        self.last_sample = self.mean
        return self.last_sample

    def logp(self, x: torch.Tensor) -> torch.Tensor:
        z = (x - self.mean) / self.std
        return (
            -0.5 * (z**2).sum(-1) - self.log_std.sum(-1) - 0.5 * math.log(2 * math.pi) * x.shape[-1]
        )

    def entropy(self) -> torch.Tensor:
        return (self.log_std + 0.5 * math.log(2 * math.pi * math.e)).sum(-1)

    def kl(self, other: ActionDistribution) -> torch.Tensor:
        assert isinstance(other, DiagGaussian)
        return (
            other.log_std
            - self.log_std
            + (self.std**2 + (self.mean - other.mean) ** 2) / (2.0 * other.std**2)
            - 0.5
        ).sum(-1)

    @staticmethod
    def required_model_output_shape(action_space: Any, model_config: dict[str, Any]) -> int:
        return int(np.prod(action_space.shape)) * 2


class Deterministic(ActionDistribution):
    """The inputs themselves as the action (a Gaussian with zero variance)."""

    def sample(self) -> torch.Tensor:
        self.last_sample = self.inputs
        return self.inputs

    def deterministic_sample(self) -> torch.Tensor:
        return self.sample()

    def logp(self, x: torch.Tensor) -> torch.Tensor:
        return torch.zeros(x.shape[0], dtype=self.inputs.dtype)

    def entropy(self) -> torch.Tensor:
        return torch.zeros(self.inputs.shape[0], dtype=self.inputs.dtype)

    def kl(self, other: ActionDistribution) -> torch.Tensor:
        return torch.zeros(self.inputs.shape[0], dtype=self.inputs.dtype)

    @staticmethod
    def required_model_output_shape(action_space: Any, model_config: dict[str, Any]) -> int:
        return int(np.prod(action_space.shape))


# RLlib's torch names.
TorchCategorical = Categorical
TorchDiagGaussian = DiagGaussian
TorchDeterministic = Deterministic
TorchMultiCategorical = MultiCategorical
