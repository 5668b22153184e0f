"""PPO on CartPole-v1 until the mean return of the last 100 training episodes reaches 450:
wall time (start-up included), env steps, and sampling throughput, for rayfield-rllib next to
Stable-Baselines3 and RLlib when they are installed (``nox -s bench`` installs them).

    python bench_rllib.py [--seeds 3] [--timeout 300] [--only rayfield] [--peer-python PATH]
                          [--algo ppo|dqn|impala] [--rllib-cpus 2] [--start-timeout 120]

``--algo dqn`` runs DQN instead (``tuned_examples/cartpole-dqn.yaml``, same stop rule) for
rayfield-rllib and SB3's DQN with the settings SB3 has (see ``SB3_DQN``); RLlib is not run.
``--algo impala`` runs IMPALA with 2 rollout workers: rayfield-rllib's tuned example
(``cartpole-impala.yaml``), rayfield-rllib's IMPALA defaults (``IMPALA_DEFAULTS``: its
default 256x256 model) and RLlib's IMPALA with its defaults (``RLLIB_IMPALA``, 2 env runners on
a Ray runtime of ``--rllib-cpus`` CPUs); an RLlib that has not built its algorithm after
``--start-timeout`` s is reported as not starting (Ray 2.60's IMPALA waits for a CPU for its
learner on 2 CPUs). The "after start" column is env steps per second after start-up (the
sampling throughput the issue compares).

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
from typing import Any

TARGET = 450.0

RAYFIELD = r"""
import json, sys, time
t0 = time.time()
from rayfield.rllib.agents.registry import get_trainer_class
import yaml, pathlib
spec = yaml.safe_load(pathlib.Path(sys.argv[2]).read_text())
(exp,) = spec.values()
config = json.loads(sys.argv[4]) if len(sys.argv) > 4 and sys.argv[4] else exp["config"]
trainer = get_trainer_class(exp["run"])(env="CartPole-v1",
                                         config={**config, "seed": int(sys.argv[1])})
startup = time.time() - t0
while True:
    r = trainer.train()
    if r["episode_reward_mean"] >= 450 or time.time() - t0 > float(sys.argv[3]):
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
        self.returns = deque(maxlen=100)
    def _on_step(self):
        for info in self.locals["infos"]:
            if "episode" in info:
                self.returns.append(info["episode"]["r"])
        solved = len(self.returns) == 100 and sum(self.returns) / 100 >= 450
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

# RLlib's IMPALA with its defaults (model, batch sizes, learning rate) and 2 env runners on a
# runtime of argv[4] CPUs. Ray 2.60's IMPALA needs a CPU for its learner besides the two env
# runners' and the driver's, so on 2 CPUs `build()` waits; after argv[5] seconds the script
# prints NOT_STARTED and exits.
RLLIB_IMPALA = r"""
import json, signal, sys, time
t0 = time.time()
import ray
from ray.rllib.algorithms.impala import IMPALAConfig

def not_started(*_):
    print("NOT_STARTED", flush=True)
    ray.shutdown()
    sys.exit(0)

ray.init(num_cpus=int(sys.argv[4]), include_dashboard=False)
signal.signal(signal.SIGALRM, not_started)
signal.alarm(int(float(sys.argv[5])))
algo = (IMPALAConfig().environment("CartPole-v1").env_runners(num_env_runners=2)
        .debugging(seed=int(sys.argv[1])).build())
signal.alarm(0)
print("BUILT", flush=True)
startup = time.time() - t0
while True:
    r = algo.train()
    runners = r.get("env_runners", {})
    ret = runners.get("episode_return_mean", r.get("episode_reward_mean", 0.0))
    if ret is None or ret != ret:
        ret = 0.0
    if ret >= 450 or time.time() - t0 > float(sys.argv[3]):
        break
steps = (runners.get("num_env_steps_sampled_lifetime")
         or r.get("num_env_steps_sampled_lifetime") or r.get("timesteps_total", 0))
algo.stop()
print(json.dumps({"wall_s": time.time() - t0, "startup_s": startup, "steps": steps, "reward": ret}))
"""

# rayfield-rllib's IMPALA with the defaults of `agents.impala.DEFAULT_CONFIG` (256x256 model,
# 50-step fragments, 500-row train batches, lr 5e-4) and 2 rollout workers: the throughput
# peer of RLLIB_IMPALA (both with their default model).
IMPALA_DEFAULTS = json.dumps({"num_workers": 2})


def run(
    python: str, code: str, seed: int, tuned: str, timeout: float, extra: tuple[str, ...] = ()
) -> dict[str, Any] | None:
    """One fresh process; its JSON result, ``{"not_started": True, "waited_s": ...}`` when it
    was killed before printing ``BUILT`` (the algorithm never started), or None on failure."""
    try:
        out = subprocess.run(
            [python, "-c", code, str(seed), tuned, str(timeout), *extra],
            capture_output=True,
            text=True,
            timeout=timeout + 120,
            check=True,
        )
    except subprocess.TimeoutExpired as exc:
        partial = exc.stdout or b""
        text = partial.decode(errors="replace") if isinstance(partial, bytes) else partial
        if "BUILT" not in text:
            return {"not_started": True, "waited_s": timeout + 120}
        print(f"  failed: {exc}")
        return None
    except subprocess.CalledProcessError as exc:
        err = exc.stderr or ""
        print(f"  failed: {err.strip().splitlines()[-1:] if err else exc}")
        return None
    lines = out.stdout.strip().splitlines()
    if "NOT_STARTED" in lines:
        return {"not_started": True, "waited_s": float(extra[1]) if len(extra) > 1 else timeout}
    return json.loads(lines[-1])  # type: ignore[no-any-return]


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
        choices=["ppo", "dqn", "impala"],
        default="ppo",
        help="ppo: the three-way table; dqn: rayfield-rllib and SB3 (RLlib not run); impala: "
        "rayfield-rllib's tuned and default IMPALA and RLlib's default IMPALA (SB3 has none)",
    )
    parser.add_argument(
        "--rllib-cpus", type=int, default=2, help="impala: CPUs of RLlib's Ray runtime"
    )
    parser.add_argument(
        "--start-timeout",
        type=float,
        default=120.0,
        help="impala: seconds RLlib's build() may wait for resources before it counts as "
        "not starting",
    )
    parser.add_argument(
        "--peer-python", default=sys.executable, help="the interpreter for SB3 and RLlib"
    )
    args = parser.parse_args()
    tuned = str(
        Path(__file__).resolve().parents[1] / "tuned_examples" / f"cartpole-{args.algo}.yaml"
    )
    peers: list[tuple[str, str, str, tuple[str, ...]]] = [
        ("rayfield-rllib", RAYFIELD, "rayfield.rllib", ())
    ]
    if args.algo == "impala":
        rllib_args = (str(args.rllib_cpus), str(args.start_timeout))
        peers += [
            ("rayfield default", RAYFIELD, "rayfield.rllib", (IMPALA_DEFAULTS,)),
            ("RLlib", RLLIB_IMPALA, "ray.rllib", rllib_args),
        ]
    else:
        peers.append(("SB3", SB3 if args.algo == "ppo" else SB3_DQN, "stable_baselines3", ()))
    if args.algo == "ppo":
        peers.append(("RLlib", RLLIB, "ray.rllib", ()))
    table: dict[str, list[dict[str, Any]]] = {}
    for name, code, module, extra in peers:
        if args.only and args.only.lower() not in name.lower():
            continue
        python = sys.executable if name.startswith("rayfield") else args.peer_python
        if not available(python, module):
            print(f"{name}: not installed for {python}, skipped")
            continue
        runs = []
        for seed in range(args.seeds):
            t = time.time()
            res = run(python, code, seed, tuned, args.timeout, extra)
            print(f"{name} seed {seed}: {res} ({time.time() - t:.1f} s)")
            if res and res.get("not_started"):
                print(
                    f"{name}: did not start within {res['waited_s']:.0f} s on "
                    f"{args.rllib_cpus} CPUs (it waits for resources); no further seeds"
                )
                break
            if res:
                runs.append(res)
        if runs:
            table[name] = runs
    base = statistics.median(r["wall_s"] for r in table.get("rayfield-rllib", [{"wall_s": 1.0}]))
    print(
        f"\n{'library':<15}{'wall s (median)':>16}{'start-up s':>12}{'env steps':>11}"
        f"{'steps/s':>9}{'after start':>12}{'reached':>9}{'vs rayfield':>12}  env steps per seed"
    )
    for name, runs in table.items():
        wall = statistics.median(r["wall_s"] for r in runs)
        start = statistics.median(r["startup_s"] for r in runs)
        steps = statistics.median(r["steps"] for r in runs)
        reached = sum(r["reward"] >= TARGET for r in runs)
        print(
            f"{name:<15}{wall:>16.1f}{start:>12.2f}{steps:>11.0f}{steps / wall:>9.0f}"
            f"{steps / max(wall - start, 1e-9):>12.0f}{reached:>6}/{len(runs)}"
            f"{wall / base:>11.2f}x  " + ", ".join(f"{r['steps']:.0f}" for r in runs)
        )
    load = os.getloadavg()
    print(f"load average at the end: {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1/5/15 min)")


if __name__ == "__main__":
    main()
