"""Convert experience from outside RLlib into offline data (the reference's
``saving_experiences.py``): play CartPole with random actions, build a `SampleBatch` per
episode with `SampleBatchBuilder` and write it with `JsonWriter`. Any algorithm can then
train on the directory (``config={"input": "/tmp/demo-out"}``).

    python examples/saving_experiences.py [OUT_DIR] [EPISODES]
"""

from __future__ import annotations

import sys

import gymnasium as gym
import numpy as np

from rayfield.rllib.evaluation.sample_batch_builder import SampleBatchBuilder
from rayfield.rllib.models.preprocessors import get_preprocessor
from rayfield.rllib.offline.json_writer import JsonWriter


def main(out_dir: str = "/tmp/demo-out", episodes: int = 100) -> str:
    batch_builder = SampleBatchBuilder()  # or MultiAgentSampleBatchBuilder
    writer = JsonWriter(out_dir)
    # You normally would not build sample batches by hand when a simulator is available,
    # but here we do, for the example's sake:
    env = gym.make("CartPole-v1")
    # Preprocessors one-hot encode and flatten Tuple and Dict observations; CartPole's is
    # a no-op, but this matters for other envs.
    prep = get_preprocessor(env.observation_space)(env.observation_space)
    print("The preprocessor is", prep)
    for eps_id in range(episodes):
        obs, _ = env.reset(seed=eps_id)
        prev_action = np.zeros_like(env.action_space.sample())
        prev_reward = 0.0
        done = False
        t = 0
        while not done:
            action = env.action_space.sample()
            new_obs, rew, terminated, truncated, info = env.step(action)
            done = terminated or truncated
            batch_builder.add_values(
                t=t,
                eps_id=eps_id,
                agent_index=0,
                obs=prep.transform(obs),
                actions=action,
                action_prob=0.5,  # put the true action probability here
                action_logp=np.log(0.5),
                rewards=rew,
                prev_actions=prev_action,
                prev_rewards=prev_reward,
                terminateds=terminated,
                truncateds=truncated,
                dones=done,
                infos=info,
                new_obs=prep.transform(new_obs),
            )
            obs = new_obs
            prev_action = action
            prev_reward = rew
            t += 1
        writer.write(batch_builder.build_and_reset())
    writer.close()
    return str(writer.path)


if __name__ == "__main__":
    print(main(*(sys.argv[1:2] or []), *[int(a) for a in sys.argv[2:3]]))
