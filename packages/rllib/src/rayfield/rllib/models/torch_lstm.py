"""The LSTM wrapper (``use_lstm``): a recurrent layer between a model's features
and its heads.

The wrapped model (the fully connected or vision network, or a custom model that
accepts ``num_outputs=None``) maps each observation to features; the LSTM runs
over them in time, optionally with the previous action (one-hot for discrete
spaces) and the previous reward appended; linear heads give the action
distribution's inputs and the value.

Shapes. At inference every row is its own sequence of length 1 (``seq_lens`` is
None) and ``state`` is ``[h float32[B, cell], c float32[B, cell]]``. In training
the rows are sequences padded to the same length ``T`` laid end to end
(``[n_seq * T, ...]``), ``seq_lens`` is ``int[n_seq]`` and ``state`` holds the
state at the start of each sequence (``[n_seq, cell]``). Padded steps come after
the real ones, so they do not change the outputs of the real steps; losses mask
them out.

Sources:
    Hochreiter, Schmidhuber, "Long Short-Term Memory", Neural Computation 9(8), 1997.
    Mnih et al., "Asynchronous Methods for Deep Reinforcement Learning", ICML 2016
    (an LSTM between the features and the policy and value heads).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from rayfield.rllib.models.torch_models import TorchModelV2


def action_input_width(action_space: Any) -> int:
    """Width of the previous-action input: one-hot for Discrete / MultiDiscrete,
    the flattened vector for Box.

    Raises:
        NotImplementedError: other action spaces.
    """
    import gymnasium as gym

    if isinstance(action_space, gym.spaces.Discrete):
        return int(action_space.n)
    if isinstance(action_space, gym.spaces.MultiDiscrete):
        return int(np.sum(action_space.nvec))
    if isinstance(action_space, gym.spaces.Box):
        return int(np.prod(action_space.shape))
    raise NotImplementedError(
        "lstm_use_prev_action supports Discrete, MultiDiscrete and Box actions, "
        f"got {action_space!r}"
    )


def encode_actions(actions: torch.Tensor, action_space: Any) -> torch.Tensor:
    """Actions ``[B, ...]`` as float32 ``[B, action_input_width(action_space)]``."""
    import gymnasium as gym

    if isinstance(action_space, gym.spaces.Discrete):
        return nn.functional.one_hot(actions.long().reshape(-1), int(action_space.n)).float()
    if isinstance(action_space, gym.spaces.MultiDiscrete):
        acts = actions.long().reshape(actions.shape[0], -1)
        parts = [
            nn.functional.one_hot(acts[:, i], int(n)).float()
            for i, n in enumerate(action_space.nvec.ravel())
        ]
        return torch.cat(parts, dim=-1)
    return actions.float().reshape(actions.shape[0], -1)


class LSTMWrapper(TorchModelV2):
    """A wrapped feature model, an LSTM of ``lstm_cell_size`` units, and linear
    policy and value heads on the LSTM output.

    Args:
        obs_space: the preprocessed observation space.
        action_space: the action space (sizes the previous-action input).
        num_outputs: width of the action distribution's inputs.
        model_config: ``model`` config; reads ``lstm_cell_size``,
            ``lstm_use_prev_action``, ``lstm_use_prev_reward`` and
            ``lstm_use_prev_action_reward`` (both of the former).
        name: the model's name.
        base_model_cls: the feature model's class (or a function with the
            constructor's arguments), built with ``num_outputs=None``.

    Raises:
        ValueError: ``lstm_cell_size`` < 1.
    """

    def __init__(
        self,
        obs_space: Any,
        action_space: Any,
        num_outputs: int,
        model_config: dict[str, Any],
        name: str,
        base_model_cls: Callable[[Any, Any, int | None, dict[str, Any], str], TorchModelV2],
    ) -> None:
        super().__init__(obs_space, action_space, num_outputs, model_config, name)
        self.cell_size = int(model_config.get("lstm_cell_size", 256))
        if self.cell_size < 1:
            raise ValueError(f"lstm_cell_size must be >= 1, got {self.cell_size}")
        both = bool(model_config.get("lstm_use_prev_action_reward", False))
        self.use_prev_action = both or bool(model_config.get("lstm_use_prev_action", False))
        self.use_prev_reward = both or bool(model_config.get("lstm_use_prev_reward", False))
        self.base = base_model_cls(obs_space, action_space, None, model_config, f"{name}_base")
        in_size = int(self.base.num_outputs)
        if self.use_prev_action:
            in_size += action_input_width(action_space)
        if self.use_prev_reward:
            in_size += 1
        self.lstm = nn.LSTM(in_size, self.cell_size, batch_first=True)
        self._logits = nn.Linear(self.cell_size, num_outputs)
        nn.init.orthogonal_(self._logits.weight, 0.01)
        nn.init.zeros_(self._logits.bias)
        self._value_branch = nn.Linear(self.cell_size, 1)
        nn.init.orthogonal_(self._value_branch.weight, 1.0)
        nn.init.zeros_(self._value_branch.bias)
        self._features: torch.Tensor | None = None

    def get_initial_state(self) -> list[torch.Tensor]:
        """``[h, c]``, each float32 zeros[lstm_cell_size]."""
        return [torch.zeros(self.cell_size), torch.zeros(self.cell_size)]

    def forward(
        self, input_dict: dict[str, torch.Tensor], state: list[Any], seq_lens: Any
    ) -> tuple[torch.Tensor, list[Any]]:
        feats, _ = self.base(input_dict, [], None)
        rows = feats.shape[0]
        parts = [feats]
        if self.use_prev_action:
            prev = input_dict.get("prev_actions")
            if prev is None:  # the first step of an episode: no previous action
                parts.append(feats.new_zeros(rows, action_input_width(self.action_space)))
            else:
                parts.append(encode_actions(torch.as_tensor(prev), self.action_space))
        if self.use_prev_reward:
            prev_r = input_dict.get("prev_rewards")
            parts.append(
                feats.new_zeros(rows, 1)
                if prev_r is None
                else torch.as_tensor(prev_r).float().reshape(rows, 1)
            )
        x = torch.cat(parts, dim=-1) if len(parts) > 1 else feats
        n_seq = rows if seq_lens is None else len(seq_lens)
        x = x.reshape(n_seq, rows // n_seq, x.shape[-1])
        if state:
            h0 = torch.as_tensor(state[0]).float().reshape(1, n_seq, self.cell_size)
            c0 = torch.as_tensor(state[1]).float().reshape(1, n_seq, self.cell_size)
        else:
            h0 = c0 = x.new_zeros(1, n_seq, self.cell_size)
        out, (h, c) = self.lstm(x, (h0, c0))
        out = out.reshape(rows, self.cell_size)
        self._features = out
        return self._logits(out), [h[0], c[0]]

    def value_function(self) -> torch.Tensor:
        assert self._features is not None, "call forward() first"
        return self._value_branch(self._features).squeeze(-1)
