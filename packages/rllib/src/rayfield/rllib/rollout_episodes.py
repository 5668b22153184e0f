"""The single-agent episodes of ``rllib evaluate`` (``rollout``): act with a restored
trainer's policy, optionally render each step, and write the episodes as offline data.

Each episode written is one `SampleBatch` line (`rayfield.rllib.offline.columns`) with
``obs`` / ``new_obs`` as the policy saw them (preprocessed and filtered), ``actions``,
``rewards``, ``terminateds``, ``truncateds``, ``dones``, ``eps_id``, ``t``,
``agent_index``, ``prev_actions``, ``prev_rewards`` and ``action_prob`` /
``action_logp`` (the behaviour probabilities: those of the sampled action with
``--explore``, 1 for the greedy one without), so MARWIL, BC or DQN can train on it and
the off-policy estimators can use it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from rayfield.rllib.evaluation.sample_batch_builder import SampleBatchBuilder
from rayfield.rllib.offline.output_writer import NoopOutput, OutputWriter
from rayfield.rllib.policy.sample_batch import DEFAULT_POLICY_ID

__all__ = ["OneFileWriter", "make_rollout_writer", "run_episodes"]


class OneFileWriter(OutputWriter):
    """JSON lines of batches appended to one file (``--out FILE.json``; 0600)."""

    def __init__(self, path: str, compress_columns: Any = ("obs", "new_obs")) -> None:
        from rayfield.util import private_files

        self.path = path
        self.compress_columns = list(compress_columns)
        self._file = private_files.open_private(path, "w", what="the rollout output")

    def write(self, sample_batch: Any) -> None:
        import json

        from rayfield.rllib.offline.columns import encode_batch

        self._file.write(json.dumps(encode_batch(sample_batch, self.compress_columns)) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def make_rollout_writer(out: str | None) -> OutputWriter:
    """The writer of ``--out``: ``*.json`` one file, anything else a directory of
    ``output-*.json`` files (`JsonWriter`); None writes nothing.

    Raises:
        ValueError: a ``*.pkl`` path (episodes are never pickled).
        UnsafeFileError: the path is not this user's alone.
    """
    if not out:
        return NoopOutput()
    if out.endswith(".pkl"):
        raise ValueError(
            "--out writes offline JSON data, never a pickle: give a directory or a .json file"
        )
    if out.endswith(".json"):
        return OneFileWriter(os.path.expanduser(out))
    from rayfield.rllib.offline.json_writer import JsonWriter

    return JsonWriter(out)


def run_episodes(
    trainer: Any,
    env: Any,
    steps: int,
    episodes: int,
    explore: bool,
    seed: int | None,
    writer: OutputWriter,
    render: bool = False,
    echo: Callable[[str], Any] = print,
) -> tuple[list[float], int]:
    """Play until `steps` env steps or `episodes` episodes (0: no limit); returns the
    finished episodes' returns and the steps taken. Unfinished episodes are written too.
    """
    worker = trainer.workers.local_worker()
    prep, filt = worker.preprocessors[DEFAULT_POLICY_ID], worker.filters[DEFAULT_POLICY_ID]
    builder = SampleBatchBuilder()
    total_steps, rewards = 0, list[float]()
    eps_id = 0
    while total_steps < steps and (not episodes or len(rewards) < episodes):
        obs, _ = env.reset(seed=None if seed is None else seed + len(rewards))
        if render:
            env.render()
        done, ep_reward, t = False, 0.0, 0
        # a recurrent policy carries its state and previous action / reward
        state = trainer.get_policy().get_initial_state() or None
        prev_a: Any = None
        r = prev_r = 0.0
        while not done and total_steps < steps:
            if state is None:
                action, _, extra = trainer.compute_action(obs, explore=explore, full_fetch=True)
            else:
                action, state, extra = trainer.compute_action(
                    obs, state, prev_action=prev_a, prev_reward=r, explore=explore
                )
            next_obs, r, term, trunc, _ = env.step(action)
            if render:
                env.render()
            done = bool(term or trunc)
            prob = float(extra.get("action_prob", 1.0)) if explore else 1.0
            if not isinstance(writer, NoopOutput):
                builder.add_values(
                    t=t,
                    eps_id=eps_id,
                    agent_index=0,
                    obs=filt(prep.transform(obs), update=False),
                    actions=action,
                    action_prob=prob,
                    action_logp=float(np.log(max(prob, 1e-38))),
                    rewards=float(r),
                    prev_actions=np.zeros_like(action) if prev_a is None else prev_a,
                    prev_rewards=prev_r,
                    terminateds=bool(term),
                    truncateds=bool(trunc),
                    dones=done,
                    new_obs=filt(prep.transform(next_obs), update=False),
                )
            prev_a, prev_r = action, float(r)
            ep_reward += float(r)
            total_steps += 1
            t += 1
            obs = next_obs
        if builder.count:
            writer.write(builder.build_and_reset())
        if done:
            rewards.append(ep_reward)
            echo(f"Episode reward {ep_reward:.1f}")
        eps_id += 1
    return rewards, total_steps
