"""The programs :mod:`bench_rllib` runs, one fresh interpreter per run.

Each is run as ``python -c CODE SEED TUNED_YAML TIMEOUT_S TARGET WINDOW [EXTRA...]``: the
seed, the tuned example's path, the wall-time limit in seconds, the target mean return and
the number of episodes in that mean (RLlib's scripts use its own mean). Each prints, as its
last line, the JSON ``{"wall_s", "startup_s", "steps", "reward"}``; ``RLLIB_IMPALA`` may
print ``NOT_STARTED`` instead. Extra arguments: ``RAYFIELD`` takes a JSON config that
replaces the tuned example's ``config`` (``IMPALA_DEFAULTS``); ``RLLIB_IMPALA`` takes the
Ray runtime's CPU count and the seconds its ``build()`` may wait. The leading underscore keeps
``nox -s bench``, which runs every ``bench_*.py``, from running this module.
"""

from __future__ import annotations

import json

RAYFIELD = r"""
import json, sys, time
t0 = time.time()
from rayfield.rllib.agents.registry import get_trainer_class
import yaml, pathlib
spec = yaml.safe_load(pathlib.Path(sys.argv[2]).read_text())
(exp,) = spec.values()
config = json.loads(sys.argv[6]) if len(sys.argv) > 6 and sys.argv[6] else exp["config"]
trainer = get_trainer_class(exp["run"])(env=exp["env"],
                                         config={**config, "seed": int(sys.argv[1])})
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
    if ret >= float(sys.argv[4]) or time.time() - t0 > float(sys.argv[3]):
        break
steps = (runners.get("num_env_steps_sampled_lifetime")
         or r.get("num_env_steps_sampled_lifetime") or r.get("timesteps_total", 0))
algo.stop()
print(json.dumps({"wall_s": time.time() - t0, "startup_s": startup, "steps": steps, "reward": ret}))
"""

# RLlib's IMPALA with its defaults (model, batch sizes, learning rate) and 2 env runners on a
# runtime of argv[6] CPUs. Ray 2.60's IMPALA needs a CPU for its learner besides the two env
# runners' and the driver's, so on 2 CPUs `build()` waits; after argv[7] seconds the script
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

ray.init(num_cpus=int(sys.argv[6]), include_dashboard=False)
signal.signal(signal.SIGALRM, not_started)
signal.alarm(int(float(sys.argv[7])))
algo = (IMPALAConfig().environment("CartPole-v1").env_runners(num_env_runners=2)
        .debugging(seed=int(sys.argv[1])).build())
signal.alarm(0)
print("BUILT", flush=True)
startup = time.time() - t0
while True:
    r = algo.train()
    runners = r.get("env_runners", {})
    ret = runners.get("episode_return_mean", r.get("episode_reward_mean", 0.0))
    if ret is None or ret != ret:  # no episode finished yet (None or NaN)
        ret = 0.0
    if ret >= float(sys.argv[4]) or time.time() - t0 > float(sys.argv[3]):
        break
steps = (runners.get("num_env_steps_sampled_lifetime")
         or r.get("num_env_steps_sampled_lifetime") or r.get("timesteps_total", 0))
algo.stop()
print(json.dumps({"wall_s": time.time() - t0, "startup_s": startup, "steps": steps, "reward": ret}))
"""

# rayfield-rllib's IMPALA with the defaults of `agents.impala.DEFAULT_CONFIG` (256x256 model,
# 50-step fragments, 500-row train batches, lr 5e-4) and 2 rollout workers: the throughput
# peer of RLLIB_IMPALA (both with their default model). RAYFIELD's argv[6].
IMPALA_DEFAULTS = json.dumps({"num_workers": 2})
