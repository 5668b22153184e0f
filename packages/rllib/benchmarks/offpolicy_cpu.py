"""CPU milliseconds per env step of SAC / TD3 on Pendulum-v1 in each phase, rayfield-rllib
next to Stable-Baselines3 with the same settings (``tuned_examples/pendulum-*.yaml`` and
``_bench_rllib_peers.SB3_SAC`` / ``SB3_TD3``'s), for a machine too loaded for wall times.

    python offpolicy_cpu.py [--algo td3|sac] [--rounds 3] [--random 2000] [--learn 300]
                            [--threads 1]

Each run is a fresh process of one library: ``--random`` env steps of uniform random
actions (no learning), then 300 steps of learning as warm-up, then ``--learn`` steps with
one update each; ``time.process_time`` over the first and the last part gives CPU ms per
env step of each phase (all threads' CPU time: with ``--threads 2`` on a loaded machine it
counts the threads' spin-waiting too). The libraries take turns, round by round; the table
gives the median and the spread over the rounds and the load average at each run. Both
learn from step ``--random`` on (the warm-up keeps start-up and the first updates out).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

PROGRAM = r"""
import json, sys, time
lib, algo, n_rand, n_learn, threads, tuned = sys.argv[1:7]
n_rand, n_learn, threads, warm = int(n_rand), int(n_learn), int(threads), 300
marks = {}
def mark(name):
    marks[name] = time.process_time()
if lib == "rayfield-rllib":
    import pathlib, yaml
    from rayfield.rllib.agents.registry import get_trainer_class
    (exp,) = yaml.safe_load(pathlib.Path(tuned).read_text()).values()
    cfg = {**exp["config"], "seed": 0, "num_cpus_for_driver": threads, "learning_starts": n_rand}
    cfg["exploration_config"] = {**cfg["exploration_config"], "random_timesteps": n_rand}
    trainer = get_trainer_class(exp["run"])(env=exp["env"], config=cfg)
    def steps(n):
        for _ in range(n):
            trainer.training_step()
            trainer.optimizer.take_episodes()
    mark("start"); steps(n_rand); mark("rand_end"); steps(warm); mark("learn_start")
    steps(n_learn); mark("learn_end")
else:
    import numpy as np, torch
    from stable_baselines3 import SAC, TD3
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.noise import NormalActionNoise
    torch.set_num_threads(threads)
    env = make_vec_env("Pendulum-v1", n_envs=1, seed=0)
    if algo == "sac":
        model = SAC("MlpPolicy", env, learning_rate=1e-3, learning_starts=n_rand, seed=0,
                    device="cpu")
    else:
        model = TD3("MlpPolicy", env, gamma=0.98, buffer_size=200000, learning_starts=n_rand,
                    action_noise=NormalActionNoise(np.zeros(1), 0.1 * np.ones(1)),
                    gradient_steps=1, train_freq=1, learning_rate=1e-3,
                    policy_kwargs={"net_arch": [400, 300]}, seed=0, device="cpu")
    class Marks(BaseCallback):
        def _on_step(self):
            if self.num_timesteps == n_rand:
                mark("rand_end")
            if self.num_timesteps == n_rand + warm:
                mark("learn_start")
            return True
    mark("start")
    model.learn(total_timesteps=n_rand + warm + n_learn, callback=Marks())
    mark("learn_end")
print(json.dumps({
    "random_ms": 1e3 * (marks["rand_end"] - marks["start"]) / n_rand,
    "learn_ms": 1e3 * (marks["learn_end"] - marks["learn_start"]) / n_learn,
}))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--algo", choices=["sac", "td3"], default="td3")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--random", type=int, default=2000, help="env steps of random actions")
    parser.add_argument("--learn", type=int, default=300, help="env steps measured learning")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of each")
    args = parser.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    tuned = os.path.join(here, "..", "tuned_examples", f"pendulum-{args.algo}.yaml")
    rows: dict[str, list[dict[str, float]]] = {}
    for r in range(args.rounds):
        for lib in ("rayfield-rllib", "SB3"):
            argv = [str(v) for v in (lib, args.algo, args.random, args.learn, args.threads)]
            out = subprocess.run(
                [sys.executable, "-c", PROGRAM, *argv, tuned],
                capture_output=True,
                text=True,
                check=True,
            )
            res = {**json.loads(out.stdout.strip().splitlines()[-1]), "load": os.getloadavg()[0]}
            print(f"round {r} {lib}: {res}")
            rows.setdefault(lib, []).append(res)
    print(f"\n{'library':<16}{'random CPU ms/step':>22}{'learning CPU ms/step':>24}  load")
    for lib, runs in rows.items():
        cells = []
        for key in ("random_ms", "learn_ms"):
            vals = [x[key] for x in runs]
            cells.append(f"{statistics.median(vals):.3f} ({min(vals):.3f}-{max(vals):.3f})")
        loads = ", ".join(f"{x['load']:.0f}" for x in runs)
        print(f"{lib:<16}{cells[0]:>22}{cells[1]:>24}  {loads}")


if __name__ == "__main__":
    main()
