"""PPO on CartPole-v1 until the mean return of the last 100 training episodes reaches 450:
wall time (start-up included), env steps, and sampling throughput, for rayfield-rllib next to
Stable-Baselines3 and RLlib when they are installed (``nox -s bench`` installs them).

    python bench_rllib.py [--seeds 3] [--timeout 300] [--only rayfield] [--peer-python PATH]
                          [--algo ppo|dqn|sac|td3]

``--algo dqn`` runs DQN instead (``tuned_examples/cartpole-dqn.yaml``, same stop rule) for
rayfield-rllib and SB3's DQN with the settings SB3 has (see ``SB3_DQN``); RLlib is not run.
``--algo sac`` / ``--algo td3`` run SAC / TD3 on Pendulum-v1 until the mean return of the
last 10 episodes reaches -200, for rayfield-rllib (``tuned_examples/pendulum-sac.yaml`` /
``pendulum-td3.yaml``) and SB3 with the same settings, rl-zoo's Pendulum-v1 hyperparameters
(see ``SB3_SAC`` and ``SB3_TD3``); RLlib is not run.

The libraries take turns: round k runs seed k of each, so a change in the machine's load
falls on all of them; the table gives medians over the rounds.

Each run is a fresh process, so start-up (imports, workers) counts as it does for a user.
Start-up is the wall time from the process's first line (before the library's import)
until the first ``train()`` / ``learn()`` can start: for rayfield-rllib until
``PPOTrainer(...)`` returns, which includes ``rayfield.init()`` and both rollout workers
started, with their envs and policies built and the learner's weights set (the trainer
waits for them); for SB3 until ``PPO(...)`` returns (envs, policy, optimizer); for RLlib
until ``build()`` returns. The wall time to 450 includes it.
Ratios are printed against rayfield-rllib from the same run. All three use the same
hyperparameters (those of ``tuned_examples/cartpole-ppo.yaml``, SB3's rl-zoo CartPole
setting: 256 env steps per update from 8 or 16 envs, 20 epochs of one 256-row minibatch,
gamma 0.98, GAE lambda 0.8, clip 0.2, no value clipping, no entropy bonus, global gradient
norm clipped at 0.5, learning rate 1e-3). ``--peer-python`` runs SB3 and RLlib with another
interpreter (one where ``ray[rllib]`` and ``stable-baselines3`` are installed).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

RAYFIELD = r"""
import json, sys, time
t0 = time.time()
from rayfield.rllib.agents.registry import get_trainer_class
import yaml, pathlib
spec = yaml.safe_load(pathlib.Path(sys.argv[2]).read_text())
(exp,) = spec.values()
trainer = get_trainer_class(exp["run"])(env=exp["env"],
                                         config={**exp["config"], "seed": int(sys.argv[1])})
startup = time.time() - t0
target, window = float(sys.argv[4]), int(sys.argv[5])
while True:
    r = trainer.train()
    if (r["episode_reward_mean"] >= target and r["episodes_total"] >= window) or (
            time.time() - t0 > float(sys.argv[3])):
        break
wall = time.time() - t0
trainer.stop()
print(json.dumps({"wall_s": wall, "startup_s": startup, "steps": r["timesteps_total"],
                  "reward": r["episode_reward_mean"]}))
"""

SB3 = r"""
import json, sys, time
from collections import deque
t0 = time.time()
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env

class Stop(BaseCallback):
    def __init__(self):
        super().__init__()
        self.target, self.window = float(sys.argv[4]), int(sys.argv[5])
        self.returns = deque(maxlen=self.window)
    def _on_step(self):
        for info in self.locals["infos"]:
            if "episode" in info:
                self.returns.append(info["episode"]["r"])
        solved = (len(self.returns) == self.window
                  and sum(self.returns) / self.window >= self.target)
        return not solved and time.time() - t0 < float(sys.argv[3])

env = make_vec_env("CartPole-v1", n_envs=8, seed=int(sys.argv[1]))
model = PPO("MlpPolicy", env, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98,
            n_epochs=20, ent_coef=0.0, learning_rate=1e-3, clip_range=0.2, max_grad_norm=0.5,
            seed=int(sys.argv[1]), device="cpu")
startup = time.time() - t0
cb = Stop()
model.learn(total_timesteps=10**7, callback=cb)
print(json.dumps({"wall_s": time.time() - t0, "startup_s": startup, "steps": model.num_timesteps,
                  "reward": sum(cb.returns) / max(1, len(cb.returns))}))
"""

# DQN with the settings of tuned_examples/cartpole-dqn.yaml where SB3 has them (SB3's DQN has
# no double Q, dueling head, n-step returns or prioritized replay): one env, 4 env steps per
# gradient step of 64 rows, lr 1e-3, 128x128 net, target copied every 1,000 steps, epsilon
# from 1.0 to 0.02 over the first 8,000 steps (SB3 counts that fraction of total_timesteps).
SB3_DQN = (
    SB3.split("env = make_vec_env")[0]
    + r"""
from stable_baselines3 import DQN
env = make_vec_env("CartPole-v1", n_envs=1, seed=int(sys.argv[1]))
total = 10**7
model = DQN("MlpPolicy", env, learning_rate=1e-3, buffer_size=50000, learning_starts=1000,
            batch_size=64, gamma=0.99, train_freq=4, gradient_steps=1,
            target_update_interval=1000, exploration_fraction=8000 / total,
            exploration_final_eps=0.02, max_grad_norm=40,
            policy_kwargs={"net_arch": [128, 128]}, seed=int(sys.argv[1]), device="cpu")
startup = time.time() - t0
cb = Stop()
model.learn(total_timesteps=total, callback=cb)
print(json.dumps({"wall_s": time.time() - t0, "startup_s": startup, "steps": model.num_timesteps,
                  "reward": sum(cb.returns) / max(1, len(cb.returns))}))
"""
)

# SAC and TD3 with rl-zoo's Pendulum-v1 settings (hyperparams/sac.yml, td3.yml): SAC is SB3's
# defaults with learning rate 1e-3 (256x256 networks, batch 256, tau 0.005, 100 random steps,
# automatic entropy); TD3 gamma 0.98, buffer 200,000, 10,000 random steps, Gaussian action
# noise 0.1, one gradient step per env step, learning rate 1e-3, 400x300 networks.
_SB3_RUN = r"""
startup = time.time() - t0
cb = Stop()
model.learn(total_timesteps=10**7, callback=cb)
print(json.dumps({"wall_s": time.time() - t0, "startup_s": startup, "steps": model.num_timesteps,
                  "reward": sum(cb.returns) / max(1, len(cb.returns))}))
"""
SB3_SAC = (
    SB3.split("env = make_vec_env")[0]
    + r"""
from stable_baselines3 import SAC
env = make_vec_env("Pendulum-v1", n_envs=1, seed=int(sys.argv[1]))
model = SAC("MlpPolicy", env, learning_rate=1e-3, seed=int(sys.argv[1]), device="cpu")
"""
    + _SB3_RUN
)
SB3_TD3 = (
    SB3.split("env = make_vec_env")[0]
    + r"""
import numpy as np
from stable_baselines3 import TD3
from stable_baselines3.common.noise import NormalActionNoise
env = make_vec_env("Pendulum-v1", n_envs=1, seed=int(sys.argv[1]))
model = TD3("MlpPolicy", env, gamma=0.98, buffer_size=200000, learning_starts=10000,
            action_noise=NormalActionNoise(np.zeros(1), 0.1 * np.ones(1)), gradient_steps=1,
            train_freq=1, learning_rate=1e-3, policy_kwargs={"net_arch": [400, 300]},
            seed=int(sys.argv[1]), device="cpu")
"""
    + _SB3_RUN
)

# --algo -> (tuned example, target mean return, episodes in the mean, SB3's program)
ALGOS = {
    "ppo": ("cartpole-ppo", 450.0, 100, SB3),
    "dqn": ("cartpole-dqn", 450.0, 100, SB3_DQN),
    "sac": ("pendulum-sac", -200.0, 10, SB3_SAC),
    "td3": ("pendulum-td3", -200.0, 10, SB3_TD3),
}

RLLIB = r"""
import json, sys, time
t0 = time.time()
import ray
from ray.rllib.algorithms.ppo import PPOConfig
ray.init(num_cpus=2, include_dashboard=False)
algo = (PPOConfig().environment("CartPole-v1")
        .env_runners(num_env_runners=2, num_envs_per_env_runner=4, rollout_fragment_length=32)
        .training(lr=1e-3, gamma=0.98, lambda_=0.8, train_batch_size=256, minibatch_size=256,
                  num_epochs=20, clip_param=0.2, kl_coeff=0.0, vf_clip_param=1e6,
                  entropy_coeff=0.0, grad_clip=0.5, grad_clip_by="global_norm")
        .debugging(seed=int(sys.argv[1])).build())
startup = time.time() - t0
while True:
    r = algo.train()
    runners = r.get("env_runners", {})
    ret = runners.get("episode_return_mean", r.get("episode_reward_mean", 0.0))
    if ret is None or ret != ret:  # no episode finished yet (None or NaN)
        ret = 0.0
    if ret >= 450 or time.time() - t0 > float(sys.argv[3]):
        break
steps = (runners.get("num_env_steps_sampled_lifetime")
         or r.get("num_env_steps_sampled_lifetime") or r.get("timesteps_total", 0))
algo.stop()
print(json.dumps({"wall_s": time.time() - t0, "startup_s": startup, "steps": steps, "reward": ret}))
"""


def run(
    python: str, code: str, seed: int, tuned: str, timeout: float, target: float, window: int
) -> dict[str, float] | None:
    try:
        out = subprocess.run(
            [python, "-c", code, str(seed), tuned, str(timeout), str(target), str(window)],
            capture_output=True,
            text=True,
            timeout=timeout + 120,
            check=True,
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        err = getattr(exc, "stderr", "") or ""
        print(f"  failed: {err.strip().splitlines()[-1:] if err else exc}")
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def available(python: str, module: str) -> bool:
    return subprocess.run([python, "-c", f"import {module}"], capture_output=True).returncode == 0


def main() -> None:
    from pathlib import Path

    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--only", default=None, help="rayfield, sb3 or rllib")
    parser.add_argument(
        "--algo",
        choices=sorted(ALGOS),
        default="ppo",
        help="ppo: the three-way table; dqn, sac, td3: rayfield-rllib and SB3 (RLlib not run)",
    )
    parser.add_argument(
        "--peer-python", default=sys.executable, help="the interpreter for SB3 and RLlib"
    )
    args = parser.parse_args()
    example, target, window, sb3_code = ALGOS[args.algo]
    tuned = str(Path(__file__).resolve().parents[1] / "tuned_examples" / f"{example}.yaml")
    peers = [("rayfield-rllib", RAYFIELD, "rayfield.rllib"), ("SB3", sb3_code, "stable_baselines3")]
    if args.algo == "ppo":
        peers.append(("RLlib", RLLIB, "ray.rllib"))
    chosen = []
    for name, code, module in peers:
        if args.only and args.only.lower() not in name.lower():
            continue
        python = sys.executable if name == "rayfield-rllib" else args.peer_python
        if not available(python, module):
            print(f"{name}: not installed for {python}, skipped")
            continue
        chosen.append((name, code, python))
    table: dict[str, list[dict[str, float]]] = {}
    for seed in range(args.seeds):  # one round: every library once, in turn
        for name, code, python in chosen:
            t = time.time()
            res = run(python, code, seed, tuned, args.timeout, target, window)
            load = os.getloadavg()[0]
            print(f"{name} seed {seed}: {res} ({time.time() - t:.1f} s, load {load:.1f})")
            if res:
                table.setdefault(name, []).append(res)
    base = statistics.median(r["wall_s"] for r in table.get("rayfield-rllib", [{"wall_s": 1.0}]))
    print(
        f"\n{'library':<15}{'wall s (median)':>16}{'start-up s':>12}{'env steps':>11}"
        f"{'steps/s':>9}{'reached':>9}{'vs rayfield':>12}  env steps per seed"
    )
    for name, runs in table.items():
        wall = statistics.median(r["wall_s"] for r in runs)
        start = statistics.median(r["startup_s"] for r in runs)
        steps = statistics.median(r["steps"] for r in runs)
        reached = sum(r["reward"] >= target for r in runs)
        print(
            f"{name:<15}{wall:>16.1f}{start:>12.2f}{steps:>11.0f}{steps / wall:>9.0f}"
            f"{reached:>6}/{len(runs)}{wall / base:>11.2f}x  "
            + ", ".join(f"{r['steps']:.0f}" for r in runs)
        )
    load = os.getloadavg()
    print(f"load average at the end: {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1/5/15 min)")


if __name__ == "__main__":
    main()
