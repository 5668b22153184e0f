"""The reference's CartPole server: a trainer learns from applications that play through HTTP.

    python cartpole_server.py --run PPO --port 9900        # trains, serving on localhost:9900
    python cartpole_client.py --address localhost:9900   # one or more, in other shells
    python cartpole_client.py --address localhost:9900 --inference-mode local

As RLlib's example (Ray 1.x-2.x): the trainer's ``input`` is a `PolicyServerInput`, so it
samples no env of its own (``env`` only gives the spaces); the clients drive the
episodes, asking the server for actions (``--inference-mode remote``) or computing them
with a copy of the policy whose weights they refresh (``local``). ``--classic`` runs the
older form instead: an `ExternalEnv` whose ``run()`` starts a `PolicyServer` (remote
inference only). The token the server makes is written owner-only for this machine's
clients (see ``rayfield.rllib.env.policy_server``).
"""

from __future__ import annotations

import argparse
from typing import Any

import gymnasium as gym

from rayfield.rllib.agents.dqn import DQNTrainer
from rayfield.rllib.agents.ppo import PPOTrainer
from rayfield.rllib.env import ExternalEnv, register_env
from rayfield.rllib.env.policy_server import PolicyServer
from rayfield.rllib.env.policy_server_input import PolicyServerInput

SERVER_ADDRESS = "localhost"


class CartpoleServing(ExternalEnv):
    """The classic form (``--classic``): the env's run() serves the clients."""

    def __init__(self, config: Any) -> None:
        super().__init__(gym.spaces.Discrete(2), gym.make("CartPole-v1").observation_space)
        self.port = int(config.get("port", 9900))
        self.server: PolicyServer | None = None

    def run(self) -> None:
        self.server = PolicyServer(self, SERVER_ADDRESS, self.port)
        try:
            self.server.serve_forever(poll_interval=0.1)
        finally:
            self.server.server_close()

    def stop(self, timeout_s: float = 5.0) -> None:
        if self.server is not None:
            self.server.shutdown()
        super().stop(timeout_s)


register_env("srv", lambda config: CartpoleServing(config))


def make_trainer(run: str, port: int, classic: bool = False, train_batch_size: int = 1000) -> Any:
    """The trainer of the example: PPO (on-policy) or DQN (learns from logged actions too)."""
    if classic:
        connector_config: dict[str, Any] = {"num_workers": 0, "env_config": {"port": port}}
        env = "srv"
    else:
        connector_config = {
            # Use the policy server to generate experiences.
            "input": lambda ioctx: PolicyServerInput(ioctx, SERVER_ADDRESS, port),
            # Use a single worker process to run the server.
            "num_workers": 0,
            # Disable off-policy estimation, since the rollouts come from online clients.
            "input_evaluation": [],
        }
        env = "CartPole-v1"  # the spaces; no env is stepped here
    if run == "DQN":
        config = {
            **connector_config,
            # epsilon from 1.0 down to 0.02 over the first 1000 steps (RLlib 1.x's
            # example says this with exploration_config's EpsilonGreedy)
            "schedule_max_timesteps": 10000,
            "exploration_fraction": 0.1,
            "exploration_final_eps": 0.02,
            "learning_starts": 100,
            "timesteps_per_iteration": 200,
        }
        return DQNTrainer(env=env, config=config)
    if run == "PPO":
        config = {
            **connector_config,
            "rollout_fragment_length": min(200, train_batch_size),
            "train_batch_size": train_batch_size,
            "sgd_minibatch_size": min(128, train_batch_size),
        }
        return PPOTrainer(env=env, config=config)
    raise ValueError(f"--run must be DQN or PPO, not {run!r}")


def main(
    iterations: int,
    port: int = 9900,
    train_batch_size: int = 1000,
    run: str = "PPO",
    classic: bool = False,
) -> dict[str, Any]:
    trainer = make_trainer(run, port, classic, train_batch_size)
    print(f"serving on http://{SERVER_ADDRESS}:{port}", flush=True)
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
    parser.add_argument("--run", choices=["PPO", "DQN"], default="PPO")
    parser.add_argument("--port", type=int, default=9900)
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--train-batch-size", type=int, default=1000)
    parser.add_argument("--classic", action="store_true", help="ExternalEnv + PolicyServer")
    args = parser.parse_args()
    main(args.iterations, args.port, args.train_batch_size, args.run, args.classic)
