"""The reference's CartPole server: PPO trained by applications that play through HTTP.

    python cartpole_server.py --port 8900            # trains, serving on localhost:8900
    python cartpole_client.py --address localhost:8900   # one or more, in other shells

The server's ExternalEnv starts a PolicyServer in its run(); the token it makes is
written owner-only for this machine's clients (see ``rayfield.rllib.env.policy_server``).
"""

from __future__ import annotations

import argparse
from typing import Any

import gymnasium as gym

from rayfield.rllib.agents.ppo import PPOTrainer
from rayfield.rllib.env import ExternalEnv, register_env
from rayfield.rllib.env.policy_server import PolicyServer


class CartpoleServing(ExternalEnv):
    def __init__(self, config: Any) -> None:
        super().__init__(gym.spaces.Discrete(2), gym.make("CartPole-v1").observation_space)
        self.port = int(config.get("port", 8900))
        self.server: PolicyServer | None = None

    def run(self) -> None:
        self.server = PolicyServer(self, "localhost", self.port)
        print(f"serving on {self.server.address}", flush=True)
        try:
            self.server.serve_forever(poll_interval=0.1)
        finally:
            self.server.server_close()

    def stop(self, timeout_s: float = 5.0) -> None:
        if self.server is not None:
            self.server.shutdown()
        super().stop(timeout_s)


register_env("srv", lambda config: CartpoleServing(config))


def main(iterations: int, port: int = 8900, train_batch_size: int = 1000) -> dict[str, Any]:
    config = {
        "num_workers": 0,
        "env_config": {"port": port},
        "train_batch_size": train_batch_size,
        "sgd_minibatch_size": min(128, train_batch_size),
    }
    trainer = PPOTrainer(env="srv", config=config)
    try:
        result: dict[str, Any] = {}
        for _ in range(iterations):
            result = trainer.train()
            print(
                f"iteration {result['training_iteration']}: "
                f"episode_reward_mean {result['episode_reward_mean']:.1f}",
                flush=True,
            )
        return result
    finally:
        trainer.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8900)
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--train-batch-size", type=int, default=1000)
    args = parser.parse_args()
    main(args.iterations, args.port, args.train_batch_size)
