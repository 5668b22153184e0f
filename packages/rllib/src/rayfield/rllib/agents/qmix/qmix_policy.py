"""`QMixTorchPolicy`: the policy of one group of agents for QMIX, VDN and independent
Q-learning (see `rayfield.rllib.agents.qmix.qmix` for the algorithm).

The group's observation space is a `Tuple` with one part per agent, all alike; a part
is either the agent's observation or a `Dict` with an ``"obs"`` entry and optionally
``"action_mask"`` (``float[n_actions]``, 1 for allowed actions) and ``"state"`` (the
global state given to the mixer; without it the mixer sees the agents' observations
concatenated). The action space is a `Tuple` of `Discrete` spaces of one size.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch

from rayfield.rllib.agents.qmix.mixers import QMixer, QMixModel, RNNAgent, VDNMixer
from rayfield.rllib.models.preprocessors import get_preprocessor, restore_original_dimensions
from rayfield.rllib.policy.rnn_sequencing import SEQ_LENS, pad_batch_to_sequences
from rayfield.rllib.policy.sample_batch import SampleBatch
from rayfield.rllib.policy.torch_policy import TorchPolicy
from rayfield.rllib.utils.schedules import PiecewiseSchedule

ENV_STATE = "state"
ACTION_MASK = "action_mask"
MIXERS = ("qmix", "vdn", None)
# the columns the loss reads
LOSS_COLUMNS = [
    SampleBatch.CUR_OBS,
    SampleBatch.NEXT_OBS,
    SampleBatch.ACTIONS,
    SampleBatch.REWARDS,
    SampleBatch.TERMINATEDS,
]


def _group_spaces(observation_space: Any, action_space: Any) -> tuple[int, int, Any]:
    """``(n_agents, n_actions, one agent's observation space)`` of a group.

    Raises:
        ValueError: the spaces are not Tuples of alike agents.
    """
    import gymnasium as gym

    acts = getattr(action_space, "spaces", None)
    if (
        not isinstance(action_space, gym.spaces.Tuple)
        or not acts
        or not all(isinstance(a, gym.spaces.Discrete) and a.n == acts[0].n for a in acts)
    ):
        raise ValueError(
            "QMIX needs a grouped env (MultiAgentEnv.with_agent_groups) whose group action "
            f"space is a Tuple of Discrete spaces of one size, got {action_space!r}"
        )
    original = getattr(observation_space, "original_space", None)
    if not isinstance(original, gym.spaces.Tuple) or len(original.spaces) != len(acts):
        raise ValueError(
            f"QMIX needs a group observation space that is a Tuple of {len(acts)} agent "
            f"observation spaces (one per agent of the action Tuple), got "
            f"{original if original is not None else observation_space!r}"
        )
    first = original.spaces[0]
    if any(s != first for s in original.spaces[1:]):
        raise ValueError(
            f"QMIX's agents share one network: their observation spaces must be alike, got "
            f"{original!r}"
        )
    return len(acts), int(acts[0].n), first


class QMixTorchPolicy(TorchPolicy):
    """Epsilon-greedy acting with the shared recurrent agent network, and the TD loss of
    the mixed Q-values over whole episodes (see the module docstring).

    Raises:
        ValueError: spaces that are not a group's (see the module docstring), or an
            unknown ``mixer``.
    """

    def __init__(self, observation_space: Any, action_space: Any, config: dict[str, Any]) -> None:
        import gymnasium as gym

        if config.get("mixer") not in MIXERS:
            raise ValueError(f"mixer must be 'qmix', 'vdn' or None, got {config.get('mixer')!r}")
        self.n_agents, self.n_actions, agent_space = _group_spaces(observation_space, action_space)
        self.has_dict_obs = isinstance(agent_space, gym.spaces.Dict)
        obs_part = agent_space["obs"] if self.has_dict_obs else agent_space
        self.obs_dim = get_preprocessor(obs_part)(obs_part).size
        self.has_mask = self.has_dict_obs and ACTION_MASK in agent_space.spaces
        if self.has_dict_obs and ENV_STATE in agent_space.spaces:
            state_part = agent_space[ENV_STATE]
            self.state_dim = get_preprocessor(state_part)(state_part).size
            self.has_state = True
        else:
            self.state_dim = self.obs_dim * self.n_agents
            self.has_state = False
        model_config = config.get("model") or {}
        hidden = int(model_config.get("lstm_cell_size", 64))
        if config.get("seed") is not None:  # the networks' initial weights too
            torch.manual_seed(int(config["seed"]) + int(config.get("worker_index", 0)))
        agent = RNNAgent(self.obs_dim, self.n_actions, hidden)
        mixer: torch.nn.Module | None = None
        if config["mixer"] == "qmix":
            mixer = QMixer(self.n_agents, self.state_dim, int(config["mixing_embed_dim"]))
        elif config["mixer"] == "vdn":
            mixer = VDNMixer()
        model = QMixModel(agent, mixer, self.n_agents)
        config = {**config, "grad_clip": config["grad_norm_clipping"]}
        super().__init__(observation_space, action_space, config, model=model)
        self.target_model = copy.deepcopy(self.model)
        for p in self.target_model.parameters():
            p.requires_grad_(False)
        self._eps_schedule = PiecewiseSchedule(
            [
                [0, 1.0],
                [
                    max(1, config["exploration_fraction"] * config["schedule_max_timesteps"]),
                    config["exploration_final_eps"],
                ],
            ]
        )
        self.cur_epsilon = 1.0 if config["exploration_fraction"] > 0 else 0.0
        if config["exploration_fraction"] <= 0:
            self.cur_epsilon = float(config["exploration_final_eps"])
        self.rng = np.random.default_rng(
            None if config.get("seed") is None else config["seed"] + config.get("worker_index", 0)
        )

    def make_optimizer(self) -> torch.optim.Optimizer:
        """RMSProp, as the QMIX paper (``lr``, ``optim_alpha``, ``optim_eps``)."""
        return torch.optim.RMSprop(
            self.model.parameters(),
            lr=self.cur_lr,
            alpha=float(self.config["optim_alpha"]),
            eps=float(self.config["optim_eps"]),
        )

    # -- observations -------------------------------------------------------------------
    def split_obs(
        self, obs: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """A group's flattened observations float32[N, flat] -> (the agents' observations
        float32[N, n_agents, obs_dim], their action masks bool[N, n_agents, n_actions] or
        None, the global state float32[N, state_dim])."""
        parts = restore_original_dimensions(obs, self.observation_space)
        n = obs.shape[0]
        if self.has_dict_obs:
            agent_obs = torch.stack([p["obs"].reshape(n, -1) for p in parts], dim=1)
        else:
            agent_obs = torch.stack([p.reshape(n, -1) for p in parts], dim=1)
        mask = torch.stack([p[ACTION_MASK] > 0 for p in parts], 1) if self.has_mask else None
        # the global state: given, else every agent's observation
        state = parts[0][ENV_STATE] if self.has_state else agent_obs
        return agent_obs, mask, state.reshape(n, -1)

    def _agent_q(
        self, model: Any, agent_obs: torch.Tensor, h: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``agent_obs`` [N, n_agents, obs_dim], ``h`` [N, n_agents, H] -> (Q-values
        [N, n_agents, n_actions], next state [N, n_agents, H])."""
        n = agent_obs.shape[0]
        q, h = model.agent(agent_obs.reshape(n * self.n_agents, -1), h.reshape(-1, h.shape[-1]))
        return q.view(n, self.n_agents, -1), h.view(n, self.n_agents, -1)

    # -- acting -------------------------------------------------------------------------
    def compute_actions(
        self,
        obs_batch: Any,
        state_batches: list[Any] | None = None,
        prev_action_batch: Any = None,
        prev_reward_batch: Any = None,
        info_batch: Any = None,
        episodes: Any = None,
        explore: bool | None = None,
        **kwargs: Any,
    ) -> tuple[np.ndarray, list[Any], dict[str, np.ndarray]]:
        """Each agent's epsilon-greedy action among its allowed ones.

        Returns:
            ``(actions int64[B, n_agents], [GRU states float32[B, n_agents, H]], {})``.
        """
        explore = self.config.get("explore", True) if explore is None else explore
        with self.lock, torch.no_grad():
            obs = torch.as_tensor(np.asarray(obs_batch, dtype=np.float32), device=self.device)
            agent_obs, mask, _ = self.split_obs(obs)
            if state_batches:
                h = torch.as_tensor(np.asarray(state_batches[0], np.float32), device=self.device)
            else:
                h = self.model.get_initial_state()[0].to(self.device).expand(len(obs), -1, -1)
            q, h = self._agent_q(self.model, agent_obs, h)
            if mask is not None:
                q = q.masked_fill(~mask, float("-inf"))
            actions = q.argmax(dim=-1).cpu().numpy()
            allowed = np.ones(q.shape, bool) if mask is None else mask.cpu().numpy()
        if explore and self.cur_epsilon > 0:
            rand = self.rng.random(actions.shape) < self.cur_epsilon
            scores = np.where(allowed, self.rng.random(allowed.shape), -1.0)
            actions = np.where(rand, scores.argmax(axis=-1), actions)
        return actions.astype(np.int64), [h.cpu().numpy()], {}

    def compute_log_likelihoods(self, actions: Any, obs_batch: Any, *args: Any, **kw: Any) -> Any:
        raise NotImplementedError("QMIX's policy gives no action log-likelihoods")

    def on_global_var_update(self, global_vars: dict[str, Any]) -> None:
        super().on_global_var_update(global_vars)
        self.cur_epsilon = self._eps_schedule.value(self.global_timestep)

    # -- learning -----------------------------------------------------------------------
    def _unroll(self, model: Any, agent_obs: torch.Tensor, h0: torch.Tensor) -> torch.Tensor:
        """Q-values float32[S, T, n_agents, n_actions] of the agent network run over
        sequences ``agent_obs`` [S, T, n_agents, obs_dim] from states ``h0``."""
        h = h0
        out = []
        for t in range(agent_obs.shape[1]):
            q, h = self._agent_q(model, agent_obs[:, t], h)
            out.append(q)
        return torch.stack(out, dim=1)

    def _mix(self, model: Any, qs: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
        """Chosen Q-values [S, T, n_agents] -> ``Q_tot`` [S, T, 1] (no mixer: unchanged)."""
        return qs if model.mixer is None else model.mixer(qs, states)

    def qmix_loss(self, batch: SampleBatch) -> torch.Tensor:
        """The masked mean squared TD error of ``Q_tot`` over the batch's episodes.

        The rows are cut into one sequence per episode (at most ``model.max_seq_len``
        steps), padded to the longest (T); the agent networks run over each sequence
        and its last ``new_obs`` (T + 1 inputs) from the sequence's recorded start
        state, the online and the target network alike::

            target_t = r_t + gamma (1 - terminated_t) Q_tot'(s_{t+1}, a*_{t+1})
            a*_{t+1} = argmax_a Q_i(o_{t+1}, a)  (double_q; else the target's argmax)

        with the argmax over each agent's allowed actions.
        """
        starts_len = int(self.config["model"].get("max_seq_len", 999999))
        longest = _longest_run(batch)
        seq = pad_batch_to_sequences(batch, max(1, min(starts_len, longest)), LOSS_COLUMNS)
        t = {k: torch.as_tensor(v, device=self.device) for k, v in seq.items()}
        seq_lens = t[SEQ_LENS].long()
        s_count = len(seq_lens)
        big_t = int(seq[SampleBatch.CUR_OBS].shape[0] // max(1, s_count))
        obs = t[SampleBatch.CUR_OBS].float().view(s_count, big_t, -1)
        new_obs = t[SampleBatch.NEXT_OBS].float().view(s_count, big_t, -1)
        ext = torch.cat([obs, torch.zeros_like(obs[:, :1])], dim=1)
        rows = torch.arange(s_count, device=self.device)
        ext[rows, seq_lens] = new_obs[rows, seq_lens - 1]
        agent_obs, mask, states = self.split_obs(ext.view(s_count * (big_t + 1), -1))
        agent_obs = agent_obs.view(s_count, big_t + 1, self.n_agents, -1)
        states = states.view(s_count, big_t + 1, -1)
        if mask is not None:
            mask = mask.view(s_count, big_t + 1, self.n_agents, -1)
        h0 = t["state_in_0"].float()
        actions = t[SampleBatch.ACTIONS].long().view(s_count, big_t, self.n_agents)
        rewards = t[SampleBatch.REWARDS].float().view(s_count, big_t, 1)
        not_done = 1.0 - t[SampleBatch.TERMINATEDS].float().view(s_count, big_t, 1)
        valid = (torch.arange(big_t, device=self.device)[None] < seq_lens[:, None]).float()

        q_all = self._unroll(self.model, agent_obs, h0)
        chosen = q_all[:, :big_t].gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        with torch.no_grad():
            target_all = self._unroll(self.target_model, agent_obs, h0)[:, 1:]
            choose = q_all[:, 1:].detach() if self.config["double_q"] else target_all
            if mask is not None:
                choose = choose.masked_fill(~mask[:, 1:], float("-inf"))
            best = choose.argmax(dim=-1, keepdim=True)
            target_next = target_all.gather(-1, best).squeeze(-1)
            target_tot = self._mix(self.target_model, target_next, states[:, 1:])
            targets = rewards + float(self.config["gamma"]) * not_done * target_tot
        q_tot = self._mix(self.model, chosen, states[:, :big_t])
        td = (q_tot - targets) * valid.unsqueeze(-1)
        loss = (td**2).sum() / (valid.sum() * td.shape[-1]).clamp(min=1.0)
        n_valid = valid.sum().clamp(min=1.0) * td.shape[-1]
        self.stats = {
            "loss": loss.detach(),
            "td_error_abs": td.abs().sum().detach() / n_valid,
            "q_taken_mean": (q_tot * valid.unsqueeze(-1)).sum().detach() / n_valid,
            "target_mean": (targets * valid.unsqueeze(-1)).sum() / n_valid,
        }
        return loss

    def learn_on_batch(self, samples: SampleBatch) -> dict[str, Any]:
        """One RMSProp step on the TD loss of the batch's episodes (`qmix_loss`); returns
        its statistics."""
        with self.lock:
            self.stats = {}
            loss = self.qmix_loss(samples)
            self._zero_grad()
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(
                self.model.parameters(), float(self.config["grad_norm_clipping"])
            )
            self.optimizer.step()
            stats = {k: float(v) for k, v in self.stats.items()}
            stats.update(
                grad_gnorm=float(grad_norm), cur_lr=self.cur_lr, cur_epsilon=self.cur_epsilon
            )
            return stats

    def update_target(self) -> None:
        """Copy the online networks (agent and mixer) to the target ones."""
        with self.lock:
            self.target_model.load_state_dict(self.model.state_dict())

    def extra_state(self) -> dict[str, Any]:
        return {
            "target_model": {k: v.clone() for k, v in self.target_model.state_dict().items()},
            "cur_epsilon": self.cur_epsilon,
        }

    def set_extra_state(self, state: dict[str, Any]) -> None:
        if "target_model" in state:
            self.target_model.load_state_dict(state["target_model"])
        self.cur_epsilon = float(state.get("cur_epsilon", self.cur_epsilon))


def _longest_run(batch: SampleBatch) -> int:
    """The most rows of one episode in `batch` (its rows grouped by ``eps_id``)."""
    if "eps_id" not in batch or batch.count == 0:
        return max(1, batch.count)
    _, counts = np.unique(np.asarray(batch["eps_id"]), return_counts=True)
    return int(counts.max())
