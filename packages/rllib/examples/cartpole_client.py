"""The reference's CartPole client: an application playing through a policy server.

    python cartpole_client.py --address localhost:9900 [--off-policy] [--stop-at 150]
        [--inference-mode local --update-interval 10]

Each step asks the policy for an action (``get_action``), or with ``--off-policy`` takes a
random action and logs it (``log_action``); rewards go back with ``log_returns``. With
``--inference-mode remote`` (default) the server computes the actions; with ``local``
this program keeps a copy of the server's policy, refreshes its weights every
``--update-interval`` seconds and sends the server the steps it samples.
"""

from __future__ import annotations

import argparse

import gymnasium as gym

from rayfield.rllib.env.policy_client import PolicyClient


def main(
    address: str,
    episodes: int,
    off_policy: bool = False,
    stop_at: float = 0.0,
    inference_mode: str = "remote",
    update_interval: float = 10.0,
) -> float:
    """Play ``episodes`` episodes (0: until the mean of the last 20 reaches ``stop_at``);
    returns the mean return of the last 20."""
    env = gym.make("CartPole-v1")
    client = PolicyClient(address, inference_mode=inference_mode, update_interval=update_interval)
    returns: list[float] = []
    try:
        while episodes == 0 or len(returns) < episodes:
            eid = client.start_episode(training_enabled=True)
            obs, _ = env.reset()
            total, done = 0.0, False
            while not done:
                if off_policy:
                    action = env.action_space.sample()
                    client.log_action(eid, obs, action)
                else:
                    action = client.get_action(eid, obs)
                obs, reward, term, trunc, _ = env.step(action)
                client.log_returns(eid, reward)
                total += float(reward)
                done = term or trunc
            client.end_episode(eid, obs)
            returns.append(total)
            recent = returns[-20:]
            mean = sum(recent) / len(recent)
            print(f"episode {len(returns)}: return {total:.0f}, last 20 mean {mean:.1f}")
            if stop_at and len(recent) == 20 and mean >= stop_at:
                break
    finally:
        client.close()
    recent = returns[-20:]
    return sum(recent) / max(1, len(recent))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", default="localhost:9900")
    parser.add_argument("--inference-mode", choices=["remote", "local"], default="remote")
    parser.add_argument("--update-interval", type=float, default=10.0)
    parser.add_argument("--episodes", type=int, default=0)
    parser.add_argument("--off-policy", action="store_true")
    parser.add_argument("--stop-at", type=float, default=150.0)
    args = parser.parse_args()
    main(
        args.address,
        args.episodes,
        args.off_policy,
        args.stop_at,
        args.inference_mode,
        args.update_interval,
    )
