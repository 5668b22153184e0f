"""`SyncReplayOptimizer`: synchronous sampling into local replay buffers, learning on
replayed batches."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rayfield.rllib.execution.replay_buffer import PrioritizedReplayBuffer, ReplayBuffer
from rayfield.rllib.optimizers.policy_optimizer import PolicyOptimizer
from rayfield.rllib.policy.sample_batch import DEFAULT_POLICY_ID, MultiAgentBatch
from rayfield.rllib.utils.schedules import PiecewiseSchedule

if TYPE_CHECKING:
    from rayfield.rllib.evaluation.worker_set import WorkerSet


class SyncReplayOptimizer(PolicyOptimizer):
    """Sync replay, the execution of DQN (Mnih et al., "Human-level control through
    deep reinforcement learning", Nature 518, 2015): each step takes one batch from
    every rollout worker (the local one when there are no remote ones) and adds its
    rows to the replay buffer of their policy (one buffer per policy of the local
    worker). Once `learning_starts` env steps have been sampled, each policy of the
    local worker's ``policies_to_train`` learns on `train_batch_size` rows replayed
    from its buffer. Then the weights go to the remote workers (with ``{"timestep":
    num_steps_sampled}``).

    With `prioritized_replay` (Schaul, Quan, Antonoglou, Silver, "Prioritized
    Experience Replay", ICLR 2016) rows are drawn in proportion to ``p^alpha`` and
    weighted by ``(N P)^-beta`` (column ``weights``), beta annealed linearly from
    `prioritized_replay_beta` to `final_prioritized_replay_beta` over
    ``beta_annealing_fraction * schedule_max_timesteps`` sampled steps; after learning,
    the replayed rows' priorities become ``|td_error| + prioritized_replay_eps``, read
    from the policy's ``td_error`` (``tensor[train_batch_size]``, set by its
    ``learn_on_batch``).

    Used by DQN (and its Rainbow options).

    Args:
        workers: the `WorkerSet`.
        learning_starts: env steps to sample before the first learning step.
        buffer_size: rows per replay buffer (>= 1).
        prioritized_replay: prioritized (True) or uniform replay.
        prioritized_replay_alpha: the priority exponent (>= 0).
        prioritized_replay_beta: the initial importance-weight exponent (> 0).
        schedule_max_timesteps, beta_annealing_fraction: beta reaches its final
            value after ``beta_annealing_fraction * schedule_max_timesteps`` steps.
        final_prioritized_replay_beta: beta's final value (> 0).
        prioritized_replay_eps: added to ``|td_error|`` (> 0 keeps every row drawable).
        train_batch_size: rows replayed per learning step.
        sample_batch_size: accepted for the reference's signature and unused (each
            worker's ``rollout_fragment_length`` sets how much it samples).
        seed: seed of the buffers' sampling generators.

    Raises:
        ValueError: `buffer_size` < 1 or `prioritized_replay_alpha` < 0.
    """

    def __init__(
        self,
        workers: WorkerSet,
        learning_starts: int = 1000,
        buffer_size: int = 10000,
        prioritized_replay: bool = True,
        prioritized_replay_alpha: float = 0.6,
        prioritized_replay_beta: float = 0.4,
        schedule_max_timesteps: int = 100000,
        beta_annealing_fraction: float = 0.2,
        final_prioritized_replay_beta: float = 0.4,
        prioritized_replay_eps: float = 1e-6,
        train_batch_size: int = 32,
        sample_batch_size: int = 4,
        seed: int | None = None,
    ) -> None:
        super().__init__(workers)
        self.config = {
            "learning_starts": int(learning_starts),
            "buffer_size": int(buffer_size),
            "prioritized_replay": bool(prioritized_replay),
            "prioritized_replay_alpha": float(prioritized_replay_alpha),
            "prioritized_replay_beta": float(prioritized_replay_beta),
            "schedule_max_timesteps": int(schedule_max_timesteps),
            "beta_annealing_fraction": float(beta_annealing_fraction),
            "final_prioritized_replay_beta": float(final_prioritized_replay_beta),
            "prioritized_replay_eps": float(prioritized_replay_eps),
            "train_batch_size": int(train_batch_size),
            "sample_batch_size": int(sample_batch_size),
            "seed": seed,
        }
        self.learning_starts = int(learning_starts)
        self.train_batch_size = int(train_batch_size)
        self.prioritized_replay_eps = float(prioritized_replay_eps)

        def make_buffer() -> ReplayBuffer:
            if prioritized_replay:
                return PrioritizedReplayBuffer(buffer_size, prioritized_replay_alpha, seed)
            return ReplayBuffer(buffer_size, seed)

        # one replay buffer per policy (only the default one for single-agent envs)
        self.replay_buffers: dict[str, ReplayBuffer] = {
            pid: make_buffer() for pid in workers.local_worker().policy_map
        }
        self.beta_schedule = PiecewiseSchedule(
            [
                [0, prioritized_replay_beta],
                [
                    max(1, beta_annealing_fraction * schedule_max_timesteps),
                    final_prioritized_replay_beta,
                ],
            ]
        )

    def step(self) -> dict[str, Any]:
        """Sample into the replay buffers, then one learning step per trained policy.

        Returns:
            ``{policy_id: stats}`` for every policy of ``policies_to_train``: its
            ``learn_on_batch`` stats, or ``{}`` before `learning_starts` (or while its
            buffer is empty).
        """
        worker = self.workers.local_worker()
        batches, metrics = self.workers.sample()
        self.episodes.extend(metrics)
        for b in batches:
            per_policy = (
                b.policy_batches if isinstance(b, MultiAgentBatch) else {DEFAULT_POLICY_ID: b}
            )
            for pid, pb in per_policy.items():
                if pb.count:
                    self.replay_buffers[pid].add_batch(pb)
            self.num_steps_sampled += b.count
        stats: dict[str, Any] = {}
        for pid in worker.policies_to_train:
            policy = worker.policy_map[pid]
            buffer = self.replay_buffers[pid]
            stats[pid] = {}
            if self.num_steps_sampled < self.learning_starts or len(buffer) == 0:
                continue
            replay = buffer.sample(
                self.train_batch_size, beta=self.beta_schedule.value(self.num_steps_sampled)
            )
            stats[pid] = policy.learn_on_batch(replay)
            self.num_steps_trained += replay.count
            if isinstance(buffer, PrioritizedReplayBuffer):
                prios = policy.td_error.abs().cpu().numpy() + self.prioritized_replay_eps
                buffer.update_priorities(replay["batch_indexes"], prios)
        self.workers.sync_weights({"timestep": self.num_steps_sampled})
        return stats
