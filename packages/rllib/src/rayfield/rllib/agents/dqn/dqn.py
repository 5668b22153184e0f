"""Deep Q-Networks with the Rainbow options: double Q, dueling heads, n-step
returns, prioritized replay, distributional C51 and noisy nets; parametric
action spaces through an action mask.

Each training step (the trainer's ``optimizer`` is a `SyncReplayOptimizer`;
the trainer anneals epsilon and updates the target network around its steps)
samples ``rollout_fragment_length`` steps per env with an
epsilon-greedy policy (epsilon annealed linearly from 1.0 to
``exploration_final_eps`` over ``exploration_fraction * schedule_max_timesteps``
steps), stores them in the replay buffer and, after ``learning_starts`` steps,
minimises the Huber loss of the TD error on ``train_batch_size`` replayed rows::

    target = R^(n) + gamma^m (1 - terminated) Q_target(s', argmax_a Q(s', a))   (double Q)
    target = R^(n) + gamma^m (1 - terminated) max_a Q_target(s', a)             (otherwise)

with ``R^(n)`` the discounted reward over ``m <= n_step`` steps (fewer at the end of
an episode fragment). The target network is copied from the online one every
``target_network_update_freq`` steps. With prioritized replay, rows are drawn in
proportion to ``(|td| + eps)^alpha`` and weighted by ``(N P)^-beta``.

With ``num_atoms`` > 1 (C51) the network predicts a distribution over
``num_atoms`` returns between ``v_min`` and ``v_max`` per action; the loss is the
cross-entropy between it and the projected target distribution of
``R^(n) + gamma^m Z_target(s', a*)`` (``a*`` as above, by expected value), which
also serves as the replay priority. With ``noisy`` the streams' layers are noisy
linear layers (`dqn_model.NoisyLinear`) whose learned noise drives exploration:
epsilon is 0 and ``explore=False`` acts with the mean weights.

Parametric actions: when the observation space is a Dict with an
``action_mask`` entry (``float[n_actions]``, 1 for allowed actions), greedy and
random actions and the target's ``argmax`` are restricted to allowed actions; a
custom model (``model.custom_model``, e.g. the dot product of an intent vector
with per-action embeddings, as in ``examples/parametric_actions_cartpole.py``)
outputs the Q-values itself and reads the Dict parts with
`rayfield.rllib.models.restore_original_dimensions`.

Not implemented (rejected with an error): parameter noise and soft Q.

Sources:
    Mnih et al., "Human-level control through deep reinforcement learning",
    Nature 518, 2015.
    van Hasselt, Guez, Silver, "Deep Reinforcement Learning with Double Q-learning",
    AAAI 2016.
    Wang, Schaul, Hessel, van Hasselt, Lanctot, de Freitas, "Dueling Network
    Architectures for Deep Reinforcement Learning", ICML 2016.
    Schaul, Quan, Antonoglou, Silver, "Prioritized Experience Replay", ICLR 2016.
    Bellemare, Dabney, Munos, "A Distributional Perspective on Reinforcement
    Learning", ICML 2017 (C51).
    Fortunato et al., "Noisy Networks for Exploration", ICLR 2018.
    Hessel et al., "Rainbow: Combining Improvements in Deep Reinforcement
    Learning", AAAI 2018 (n-step returns with the other parts).
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch
from torch import nn

from rayfield.rllib.agents.common_config import with_common_config
from rayfield.rllib.agents.dqn.dqn_model import DQNTorchModel, project_distribution
from rayfield.rllib.agents.trainer import Trainer
from rayfield.rllib.execution.replay_buffer import ReplayBuffer
from rayfield.rllib.models.preprocessors import restore_original_dimensions
from rayfield.rllib.optimizers import SyncReplayOptimizer
from rayfield.rllib.policy.adam import Adam
from rayfield.rllib.policy.sample_batch import DEFAULT_POLICY_ID, SampleBatch
from rayfield.rllib.policy.torch_policy import TorchPolicy
from rayfield.rllib.utils.schedules import PiecewiseSchedule

DEFAULT_CONFIG = with_common_config(
    {
        "num_atoms": 1,
        "v_min": -10.0,
        "v_max": 10.0,
        "noisy": False,
        "sigma0": 0.5,
        "dueling": True,
        "double_q": True,
        "hiddens": [256],
        "n_step": 1,
        "schedule_max_timesteps": 100000,
        "timesteps_per_iteration": 1000,
        "exploration_fraction": 0.1,
        "exploration_final_eps": 0.02,
        "target_network_update_freq": 500,
        "soft_q": False,
        "softmax_temp": 1.0,
        "parameter_noise": False,
        "evaluation_config": {"exploration_fraction": 0, "exploration_final_eps": 0},
        "buffer_size": 50000,
        "prioritized_replay": True,
        "prioritized_replay_alpha": 0.6,
        "prioritized_replay_beta": 0.4,
        "beta_annealing_fraction": 0.2,
        "final_prioritized_replay_beta": 0.4,
        "prioritized_replay_eps": 1e-6,
        "compress_observations": True,
        "lr": 5e-4,
        "lr_schedule": None,
        "adam_epsilon": 1e-8,
        "grad_norm_clipping": 40,
        "learning_starts": 1000,
        "rollout_fragment_length": 4,
        "train_batch_size": 32,
        "num_workers": 0,
        "per_worker_exploration": False,
        "worker_side_prioritization": False,
        "min_iter_time_s": 1,
    }
)


def adjust_nstep(batch: SampleBatch, n_step: int, gamma: float) -> SampleBatch:
    """Rewrite a one-episode fragment for n-step targets: ``rewards`` become the
    discounted sum over up to `n_step` steps, ``new_obs`` / ``terminateds`` those of
    the window's last step, and ``discounts`` the ``gamma**m`` to bootstrap with.
    """
    rewards = batch[SampleBatch.REWARDS].astype(np.float64)
    count = batch.count
    ends = np.minimum(np.arange(count) + n_step, count) - 1
    m = ends - np.arange(count) + 1
    new_rewards = np.zeros(count, dtype=np.float64)
    for k in range(n_step):
        pos = np.arange(count) + k
        valid = pos < count
        new_rewards[valid] += (gamma**k) * rewards[pos[valid]]
    batch[SampleBatch.REWARDS] = new_rewards.astype(np.float32)
    batch[SampleBatch.NEXT_OBS] = batch[SampleBatch.NEXT_OBS][ends]
    batch[SampleBatch.TERMINATEDS] = batch[SampleBatch.TERMINATEDS][ends]
    batch["discounts"] = (gamma**m).astype(np.float32)
    return batch


def per_worker_epsilon(
    worker_index: int, num_workers: int, base: float = 0.4, alpha: float = 7.0
) -> float:
    """Ape-X's fixed exploration of rollout worker `worker_index` (1..`num_workers`):
    ``base ** (1 + i / (N - 1) * alpha)`` with ``i = worker_index - 1`` and ``N =
    num_workers`` (Horgan et al. 2018, section 4.1: ``eps = 0.4``, ``alpha = 7``), so the
    first worker explores most (0.4) and the last least (``0.4 ** 8``, about 0.00066).
    One worker gets ``base``.

    Raises:
        ValueError: `worker_index` not in 1..`num_workers`.
    """
    if not 1 <= worker_index <= num_workers:
        raise ValueError(
            f"per-worker exploration is for remote workers 1..{num_workers}, got {worker_index}"
        )
    frac = (worker_index - 1) / (num_workers - 1) if num_workers > 1 else 0.0
    return float(base ** (1.0 + frac * alpha))


def fixed_worker_exploration(config: dict[str, Any]) -> float | None:
    """With ``per_worker_exploration`` and on a remote rollout worker (``worker_index``
    >= 1), that worker's constant `per_worker_epsilon`; otherwise None (the annealed
    schedule applies, as on the learner's local worker)."""
    index = int(config.get("worker_index", 0) or 0)
    if not config.get("per_worker_exploration") or index < 1:
        return None
    return per_worker_epsilon(index, max(index, int(config.get("num_workers", 1) or 1)))


def _eps_greedy_prob(
    actions: np.ndarray, greedy: np.ndarray, allowed: Any, eps: float
) -> np.ndarray:
    """``float32[B]``: the epsilon-greedy probability of each action: ``1 - eps + eps / n``
    for the greedy one, ``eps / n`` for the other ``n`` allowed ones."""
    return (eps / allowed + (1.0 - eps) * (actions == greedy)).astype(np.float32)


def add_worker_priorities(policy: Any, batch: SampleBatch) -> SampleBatch:
    """With ``worker_side_prioritization`` (Ape-X), the column ``priorities``
    (``float32[B]``: ``|td_error| + prioritized_replay_eps`` from
    ``policy.compute_td_error``) for the replay shard to store the rows with; otherwise
    `batch` unchanged."""
    if policy.config.get("worker_side_prioritization") and batch.count:
        td = np.abs(policy.compute_td_error(batch))
        batch["priorities"] = (td + float(policy.config["prioritized_replay_eps"])).astype(
            np.float32
        )
    return batch


class DQNTorchPolicy(TorchPolicy):
    """DQN's policy: epsilon-greedy acting, n-step postprocessing, the TD loss and a
    target network."""

    def __init__(self, observation_space: Any, action_space: Any, config: dict[str, Any]) -> None:
        import gymnasium as gym

        if not isinstance(action_space, gym.spaces.Discrete):
            raise ValueError(f"DQN needs a Discrete action space, got {action_space!r}")
        if (config.get("model") or {}).get("use_lstm"):
            raise ValueError(
                "DQN does not support model.use_lstm (recurrent models train with PPO, "
                "A2C, A3C or PG): remove use_lstm from the model config"
            )
        for key in ("soft_q", "parameter_noise"):
            if config[key]:
                raise NotImplementedError(f"DQN option {key}={config[key]!r} is not supported yet")
        if int(config["num_atoms"]) > 1 and not config["v_min"] < config["v_max"]:
            raise ValueError(
                f"C51 needs v_min < v_max, got v_min={config['v_min']}, v_max={config['v_max']}"
            )
        original = getattr(observation_space, "original_space", None)
        self.masked = isinstance(original, gym.spaces.Dict) and "action_mask" in original.spaces
        self.noisy = bool(config["noisy"])
        self._eps_schedule = PiecewiseSchedule(
            [
                [0, 1.0],
                [
                    max(1, config["exploration_fraction"] * config["schedule_max_timesteps"]),
                    config["exploration_final_eps"],
                ],
            ]
        )
        self.cur_epsilon = (
            1.0 if config["exploration_fraction"] > 0 else config["exploration_final_eps"]
        )
        if self.noisy:  # the noisy layers explore
            self.cur_epsilon = 0.0
        self.fixed_epsilon = None if self.noisy else fixed_worker_exploration(config)
        if self.fixed_epsilon is not None:
            self.cur_epsilon = self.fixed_epsilon
        config = {**config, "grad_clip": config["grad_norm_clipping"]}
        super().__init__(observation_space, action_space, config)
        self.target_model = copy.deepcopy(self.model)
        for p in self.target_model.parameters():
            p.requires_grad_(False)
        self.rng = np.random.default_rng(
            None if config.get("seed") is None else config["seed"] + config.get("worker_index", 0)
        )

    def make_model(
        self, obs_space: Any, action_space: Any, num_outputs: int, config: dict[str, Any]
    ) -> Any:
        from rayfield.rllib.models.catalog import ModelCatalog

        model_config = config.get("model") or {}
        if model_config.get("custom_model"):  # it outputs the Q-values itself
            if int(config["num_atoms"]) > 1 or config["noisy"]:
                raise ValueError("num_atoms > 1 and noisy need DQN's own model, not custom_model")
            return ModelCatalog.get_model_v2(
                obs_space, action_space, int(action_space.n), model_config
            )
        return ModelCatalog.get_model_v2(
            obs_space,
            action_space,
            int(action_space.n),
            model_config,
            default_model=DQNTorchModel,
            q_hiddens=config["hiddens"],
            dueling=config["dueling"],
            num_atoms=int(config["num_atoms"]),
            v_min=float(config["v_min"]),
            v_max=float(config["v_max"]),
            noisy=bool(config["noisy"]),
            sigma0=float(config["sigma0"]),
        )

    def action_mask(self, obs: torch.Tensor) -> torch.Tensor | None:
        """``bool[B, n_actions]``: the allowed actions (None: no ``action_mask``)."""
        if not self.masked:
            return None
        parts = restore_original_dimensions(obs, self.observation_space)
        return parts["action_mask"] > 0

    def _set_noise(self, model: Any, on: bool) -> None:
        if self.noisy:
            model.set_noise(on)

    def make_optimizer(self) -> Adam:
        return Adam(self.model.parameters(), lr=self.cur_lr, eps=self.config["adam_epsilon"])

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
        explore = self.config.get("explore", True) if explore is None else explore
        with self.lock, torch.no_grad():
            obs = torch.as_tensor(np.asarray(obs_batch, dtype=np.float32), device=self.device)
            self._set_noise(self.model, bool(explore))
            q, _ = self.model({"obs": obs}, [], None)
            mask = self.action_mask(obs)
            if mask is not None:
                q = q.masked_fill(~mask, float("-inf"))
            actions = q.argmax(dim=-1).cpu().numpy()
        greedy = actions
        if explore and self.cur_epsilon > 0:
            n = len(actions)
            rand = self.rng.random(n) < self.cur_epsilon
            # uniform over the allowed actions: the largest random score among them
            scores = self.rng.random((n, int(self.action_space.n)))
            if mask is not None:
                scores[~mask.cpu().numpy()] = -1.0
            actions = np.where(rand, scores.argmax(axis=1), actions)
        eps = self.cur_epsilon if explore else 0.0
        allowed = float(self.action_space.n) if mask is None else mask.sum(-1).cpu().numpy()
        prob = _eps_greedy_prob(actions, greedy, allowed, eps)
        extra = {SampleBatch.ACTION_PROB: prob, SampleBatch.ACTION_LOGP: np.log(prob)}
        return actions, [], extra

    def compute_log_likelihoods(
        self, actions: Any, obs_batch: Any, *args: Any, **kwargs: Any
    ) -> np.ndarray:
        """``float32[B]``: log-probabilities of `actions` under the epsilon-greedy policy
        at the current epsilon (``1 - eps + eps / n`` for the greedy action, ``eps / n``
        for the other allowed ones), for off-policy estimation."""
        with self.lock, torch.no_grad():
            obs = torch.as_tensor(np.asarray(obs_batch, dtype=np.float32), device=self.device)
            self._set_noise(self.model, False)
            q, _ = self.model({"obs": obs}, [], None)
            mask = self.action_mask(obs)
            if mask is not None:
                q = q.masked_fill(~mask, float("-inf"))
            greedy = q.argmax(dim=-1).cpu().numpy()
            allowed = float(q.shape[-1]) if mask is None else mask.sum(-1).cpu().numpy()
        eps = self.cur_epsilon if self.config.get("explore", True) else 0.0
        prob = _eps_greedy_prob(np.asarray(actions).astype(np.int64), greedy, allowed, eps)
        return np.log(np.maximum(prob, 1e-38)).astype(np.float32)

    def on_global_var_update(self, global_vars: dict[str, Any]) -> None:
        super().on_global_var_update(global_vars)
        if not self.noisy and self.fixed_epsilon is None:
            self.cur_epsilon = self._eps_schedule.value(self.global_timestep)

    def postprocess_trajectory(
        self, sample_batch: SampleBatch, other_agent_batches: Any = None, episode: Any = None
    ) -> SampleBatch:
        batch = adjust_nstep(sample_batch, int(self.config["n_step"]), float(self.config["gamma"]))
        return add_worker_priorities(self, batch)

    def compute_td_error(self, batch: SampleBatch) -> np.ndarray:
        """``float32[B]``: the TD errors of `batch`'s rows under the current networks
        (the C51 cross-entropy with ``num_atoms`` > 1), without learning."""
        with self.lock, torch.no_grad():
            self.loss(self.model, self.dist_class, self.to_tensors(batch))
            return self.td_error.cpu().numpy().astype(np.float32)

    def loss(
        self, model: Any, dist_class: type, train_batch: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        self._set_noise(model, True)
        self._set_noise(self.target_model, True)
        q_t, _ = model(train_batch, [], None)
        logits_t = getattr(model, "last_logits", None)
        actions = train_batch[SampleBatch.ACTIONS].long()
        q_sel = q_t.gather(1, actions.unsqueeze(1)).squeeze(1)
        next_in = {"obs": train_batch[SampleBatch.NEXT_OBS]}
        distributional = int(self.config["num_atoms"]) > 1
        with torch.no_grad():
            q_tp1_target, _ = self.target_model(next_in, [], None)
            target_logits = getattr(self.target_model, "last_logits", None)
            q_choose = model(next_in, [], None)[0] if self.config["double_q"] else q_tp1_target
            mask = self.action_mask(train_batch[SampleBatch.NEXT_OBS])
            if mask is not None:
                q_choose = q_choose.masked_fill(~mask, float("-inf"))
            best = q_choose.argmax(dim=1, keepdim=True)
            not_done = 1.0 - train_batch[SampleBatch.TERMINATEDS].float()
            discounts = train_batch.get("discounts")
            if discounts is None:
                discounts = torch.full_like(not_done, float(self.config["gamma"]))
            rewards = train_batch[SampleBatch.REWARDS]
            if distributional:
                assert target_logits is not None
                next_probs = torch.softmax(target_logits[torch.arange(len(best)), best[:, 0]], -1)
                target_dist = project_distribution(
                    next_probs, rewards, discounts * not_done, model.support
                )
            else:
                target = rewards + discounts * not_done * q_tp1_target.gather(1, best).squeeze(1)
        weights = train_batch.get("weights")
        if distributional:
            assert logits_t is not None
            logp = torch.log_softmax(logits_t[torch.arange(len(actions)), actions], dim=-1)
            per_row = -(target_dist * logp).sum(-1)  # cross-entropy to the projected target
            td_error = per_row.detach()
        else:
            per_row = nn.functional.smooth_l1_loss(q_sel, target, reduction="none")
            td_error = (q_sel - target).detach()
        loss = (per_row * weights).mean() if weights is not None else per_row.mean()
        self.td_error = td_error
        self.stats = {
            "mean_q": q_sel.mean().detach(),
            "min_q": q_sel.min().detach(),
            "max_q": q_sel.max().detach(),
            "mean_td_error": td_error.abs().mean(),
            "loss": loss.detach(),
        }
        return model.custom_loss(loss, train_batch)

    def learn_on_batch(self, samples: SampleBatch) -> dict[str, Any]:
        stats = super().learn_on_batch(samples)
        stats["cur_epsilon"] = self.cur_epsilon
        return stats

    def update_target(self) -> None:
        with self.lock:
            self.target_model.load_state_dict(self.model.state_dict())

    def extra_state(self) -> dict[str, Any]:
        return {"target_model": {k: v.clone() for k, v in self.target_model.state_dict().items()}}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        if "target_model" in state:
            self.target_model.load_state_dict(state["target_model"])


class DQNTrainer(Trainer):
    """DQN (see the module docstring)."""

    _name = "DQN"
    _default_config = DEFAULT_CONFIG
    _policy: type | str | None = DQNTorchPolicy
    optimizer: SyncReplayOptimizer  # built in _init

    def _init(self, config: dict[str, Any], env_creator: Any) -> None:
        self.optimizer = SyncReplayOptimizer(
            self.workers,
            learning_starts=config["learning_starts"],
            buffer_size=config["buffer_size"],
            prioritized_replay=config["prioritized_replay"],
            prioritized_replay_alpha=config["prioritized_replay_alpha"],
            prioritized_replay_beta=config["prioritized_replay_beta"],
            schedule_max_timesteps=config["schedule_max_timesteps"],
            beta_annealing_fraction=config["beta_annealing_fraction"],
            final_prioritized_replay_beta=config["final_prioritized_replay_beta"],
            prioritized_replay_eps=config["prioritized_replay_eps"],
            train_batch_size=config["train_batch_size"],
            sample_batch_size=config["rollout_fragment_length"],
            seed=config["seed"],
        )
        self._last_target_update = 0

    @property
    def replay_buffers(self) -> dict[str, ReplayBuffer]:
        """The optimizer's replay buffers, ``{policy_id: buffer}``."""
        return self.optimizer.replay_buffers

    @property
    def replay_buffer(self) -> ReplayBuffer:
        """The default policy's replay buffer."""
        return self.replay_buffers[DEFAULT_POLICY_ID]

    def training_step(self) -> dict[str, Any]:
        """Anneal epsilon to the current step, run the optimizer's step (sample into
        the replay buffers, one TD step per trained policy), then copy the online
        networks to the targets every ``target_network_update_freq`` sampled steps."""
        worker = self.workers.local_worker()
        worker.set_global_vars({"timestep": self._timesteps_total})
        stats = self.optimizer.step()
        for pid, policy_stats in stats.items():
            policy_stats.setdefault("cur_epsilon", worker.policy_map[pid].cur_epsilon)
        if (
            self._timesteps_total - self._last_target_update
            >= self.config["target_network_update_freq"]
        ):
            for pid in worker.policies_to_train:
                worker.policy_map[pid].update_target()
            self._last_target_update = self._timesteps_total
        return stats

    def _extra_state(self) -> dict[str, Any]:
        return {"last_target_update": self._last_target_update}

    def _set_extra_state(self, state: dict[str, Any]) -> None:
        self._last_target_update = int(state.get("last_target_update", 0))


DQNAgent = DQNTrainer
DQN = DQNTrainer
