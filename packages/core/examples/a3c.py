"""Asynchronous advantage actor-critic (A3C): runner actors with background threads, a wait loop.

Run from this folder (CartPole-v1 until the mean return of the last 20 games reaches 195)::

    python a3c.py --num-workers 2 [--env cartpole|pong] [--address HOST:PORT]

Each ``Runner`` actor owns an environment, a copy of the policy and a ``RunnerThread``: a
background thread that plays continuously with the runner's current weights and queues partial
rollouts of ``num_local_steps`` steps. ``compute_gradient(params)`` sets the weights it is given,
takes the next rollout from the queue, computes advantages (generalised advantage estimation with
``lambda = 1``: discounted rewards bootstrapped by the value of the last state, minus the values)
and returns the actor-critic loss's gradients. The driver starts one call per runner, then loops
on ``rf.wait``: it applies each gradient as soon as it arrives (Adam on its own copy of the
policy) and gives that runner a new call with the latest weights. The policy is a small torch
network with a softmax head (the actor) and a value head (the critic).

``--env pong`` trains on Atari Pong instead (the frame differences of ``_pong.preprocess``, paddle
up or down); that takes hours on 2 cores.

Prints the steps, gradient updates and mean return of the last 20 games every few seconds, then
the time to reach the target.

Ports the A3C example of Ray's example applications (adapted there from OpenAI's universe starter
agent, an LSTM policy in TensorFlow on Pong) with a feed-forward torch policy and CartPole-v1.

Sources:
    Mnih et al., "Asynchronous Methods for Deep Reinforcement Learning", ICML 2016.
    Schulman et al., "High-Dimensional Continuous Control Using Generalized Advantage
    Estimation", ICLR 2016.
"""

from __future__ import annotations

import argparse
import queue
import sys
import threading
import time
from collections import deque
from typing import Any

import _pong
import numpy as np
import torch
from _common import CARTPOLE_OBS_SCALE, make_cartpole, ship_by_value
from _script import run_script

import rayfield as rf
from rayfield.sgd import TorchVariables


class Env:
    """A gymnasium environment seen through the policy's input and action space.

    ``cartpole``: CartPole-v1, observations scaled to about [-1, 1], actions 0 and 1.
    ``pong``: Atari Pong-v0, the difference of two preprocessed frames, actions up and down.
    """

    def __init__(self, name: str, seed: int) -> None:
        if name not in ("cartpole", "pong"):
            raise ValueError(f"env must be 'cartpole' or 'pong', got {name!r}")
        self.name = name
        self.env = _pong.make_pong(seed) if name == "pong" else make_cartpole()
        self.obs_dim = _pong.PONG_OBS_SIZE if name == "pong" else 4
        self.seed = seed
        self.previous: np.ndarray | None = None

    def reset(self) -> np.ndarray:
        obs, _ = self.env.reset(seed=self.seed)
        self.seed += 1_000
        self.previous = None
        return self._observe(obs)

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool]:
        """Returns ``(observation, reward, terminated, truncated)``."""
        env_action = (_pong.UP, _pong.DOWN)[action] if self.name == "pong" else action
        obs, reward, terminated, truncated, _ = self.env.step(env_action)
        return self._observe(obs), float(reward), terminated, truncated

    def _observe(self, obs: np.ndarray) -> np.ndarray:
        if self.name == "cartpole":
            return (np.asarray(obs) / CARTPOLE_OBS_SCALE).astype(np.float32)
        current = _pong.preprocess(obs)
        diff = current - self.previous if self.previous is not None else np.zeros_like(current)
        self.previous = current
        return diff


class ActorCritic(torch.nn.Module):
    """``obs float32[batch, obs_dim]`` -> (action logits ``[batch, 2]``, values ``[batch]``)."""

    def __init__(self, obs_dim: int, hidden: int = 64) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(obs_dim, hidden), torch.nn.Tanh())
        self.pi = torch.nn.Linear(hidden, 2)
        self.vf = torch.nn.Linear(hidden, 1)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.body(obs)
        return self.pi(h), self.vf(h).squeeze(-1)


def process_rollout(rollout: dict[str, Any], gamma: float, lambda_: float) -> dict[str, Any]:
    """Advantages and value targets of a partial rollout (generalised advantage estimation).

    Args:
        rollout: ``obs float32[T, obs_dim]``, ``actions int[T]``, ``rewards float[T]``,
            ``values float[T]`` (the critic's, while playing), ``bootstrap`` (the value of the
            state after the last step; 0 if the game ended there).

    Returns:
        ``obs``, ``actions``, ``advantages float32[T]`` and ``targets float32[T]`` (the discounted
        rewards plus the discounted bootstrap value).
    """
    rewards = np.append(rollout["rewards"], rollout["bootstrap"])
    values = np.append(rollout["values"], rollout["bootstrap"])
    deltas = rewards[:-1] + gamma * values[1:] - values[:-1]
    advantages, targets = np.zeros(len(deltas)), np.zeros(len(deltas))
    running_adv, running_ret = 0.0, float(rollout["bootstrap"])
    for t in reversed(range(len(deltas))):
        running_adv = deltas[t] + gamma * lambda_ * running_adv
        running_ret = rewards[t] + gamma * running_ret
        advantages[t], targets[t] = running_adv, running_ret
    return {
        "obs": rollout["obs"],
        "actions": rollout["actions"],
        "advantages": advantages.astype(np.float32),
        "targets": targets.astype(np.float32),
    }


def a3c_loss(
    policy: ActorCritic, batch: dict[str, Any], vf_coeff: float = 0.5, entropy_coeff: float = 0.01
) -> torch.Tensor:
    """``-sum(log pi(a|s) * A) + vf_coeff * sum((V(s) - R)^2) / 2 - entropy_coeff * sum(H)``."""
    logits, values = policy(torch.as_tensor(batch["obs"]))
    log_probs = torch.log_softmax(logits, dim=-1)
    actions = torch.as_tensor(batch["actions"])
    chosen = log_probs.gather(1, actions[:, None]).squeeze(1)
    pi_loss = -(chosen * torch.as_tensor(batch["advantages"])).sum()
    vf_loss = 0.5 * ((values - torch.as_tensor(batch["targets"])) ** 2).sum()
    entropy = -(log_probs.exp() * log_probs).sum()
    return pi_loss + vf_coeff * vf_loss - entropy_coeff * entropy


class RunnerThread(threading.Thread):
    """Plays continuously and queues rollouts of ``num_local_steps`` steps (fewer at a game's end).

    Blocks while the queue is full, so it runs at most ``queue_size`` rollouts ahead of the
    gradient calls and idles when nobody asks. Reads the policy under ``lock``.
    """

    def __init__(
        self, env: Env, policy: ActorCritic, lock: threading.Lock, num_local_steps: int
    ) -> None:
        super().__init__(daemon=True, name="a3c-runner")
        self.env, self.policy, self.lock = env, policy, lock
        self.num_local_steps = num_local_steps
        self.queue: queue.Queue[dict[str, Any]] = queue.Queue(maxsize=1)
        self.rng = np.random.default_rng(env.seed)
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._play()
        except BaseException as exc:  # surfaced by Runner.pull_batch_from_queue
            self.error = exc

    def _play(self) -> None:
        obs, episode_return = self.env.reset(), 0.0
        while True:
            steps: dict[str, list[Any]] = {"obs": [], "actions": [], "rewards": [], "values": []}
            finished: list[float] = []
            bootstrap = 0.0
            for _ in range(self.num_local_steps):
                with self.lock, torch.no_grad():
                    logits, value = self.policy(torch.as_tensor(obs)[None])
                probs = torch.softmax(logits[0], dim=-1).numpy().astype(np.float64)
                action = int(self.rng.choice(2, p=probs / probs.sum()))
                next_obs, reward, terminated, truncated = self.env.step(action)
                for key, item in zip(steps, (obs, action, reward, float(value[0])), strict=True):
                    steps[key].append(item)
                episode_return += reward
                obs = next_obs
                if terminated or truncated:
                    if truncated:  # cut by the time limit, not lost: the state still has value
                        with self.lock, torch.no_grad():
                            bootstrap = float(self.policy(torch.as_tensor(obs)[None])[1][0])
                    finished.append(episode_return)
                    obs, episode_return = self.env.reset(), 0.0
                    break
            else:
                with self.lock, torch.no_grad():
                    bootstrap = float(self.policy(torch.as_tensor(obs)[None])[1][0])
            rollout = {k: np.array(v) for k, v in steps.items()}
            rollout["obs"] = rollout["obs"].astype(np.float32)
            self.queue.put({**rollout, "bootstrap": bootstrap, "episode_returns": finished})


@rf.remote(num_cpus=1)
class Runner:
    """An environment with a background thread playing it; computes gradients on request."""

    def __init__(
        self, env_name: str, actor_id: int, num_local_steps: int = 20, gamma: float = 0.99
    ) -> None:
        torch.set_num_threads(1)
        torch.manual_seed(actor_id)
        self.env = Env(env_name, seed=1 + actor_id)
        self.id = actor_id
        self.gamma = gamma
        self.policy = ActorCritic(self.env.obs_dim)
        self.variables = TorchVariables(self.policy)
        self.lock = threading.Lock()
        self.runner = RunnerThread(self.env, self.policy, self.lock, num_local_steps)
        self.start()

    def start(self) -> None:
        """Starts the playing thread."""
        self.runner.start()

    def pull_batch_from_queue(self, timeout_s: float = 60.0) -> dict[str, Any]:
        """The next rollout the thread queued.

        Raises:
            RuntimeError: the playing thread died (its exception is chained).
            queue.Empty: no rollout came within ``timeout_s``.
        """
        while True:
            if self.runner.error is not None:
                raise RuntimeError("the runner thread died") from self.runner.error
            try:
                return self.runner.queue.get(timeout=min(timeout_s, 1.0))
            except queue.Empty:
                timeout_s -= 1.0
                if timeout_s <= 0:
                    raise

    def compute_gradient(self, params: dict[str, np.ndarray]) -> tuple[list[np.ndarray], dict]:
        """Sets ``params``, takes the next rollout and returns the loss's gradients and info.

        Returns:
            ``(gradients, info)``: one ``numpy`` array per parameter, in the model's order;
            ``info`` has ``id`` (this runner's), ``size`` (steps in the rollout) and
            ``returns`` (of the games that ended in it).
        """
        with self.lock:
            self.variables.set_weights(params)
        rollout = self.pull_batch_from_queue()
        batch = process_rollout(rollout, gamma=self.gamma, lambda_=1.0)
        self.policy.zero_grad()
        a3c_loss(self.policy, batch).backward()
        gradients = [p.grad.numpy().copy() for p in self.policy.parameters()]
        info = {"id": self.id, "size": len(batch["actions"]), "returns": rollout["episode_returns"]}
        return gradients, info


def train(
    num_workers: int,
    env_name: str = "cartpole",
    target_return: float = 195.0,
    learning_rate: float = 3e-3,
    max_steps: int = 400_000,
    max_wall_s: float = 600.0,
    report_every_s: float = 5.0,
) -> dict[str, Any]:
    """The driver: applies gradients as they arrive until the last 20 games average the target.

    Returns:
        ``returns`` (every game's return in the order seen), ``mean_return`` (of the last 20),
        ``steps``, ``updates``, ``reached`` (whether ``mean_return >= target_return``).
    """
    torch.manual_seed(0)
    policy = ActorCritic(Env(env_name, seed=0).obs_dim)
    variables = TorchVariables(policy)
    optimizer = torch.optim.Adam(policy.parameters(), lr=learning_rate)
    agents = [Runner.remote(env_name, i) for i in range(num_workers)]
    parameters = variables.get_weights()
    gradient_list = [agent.compute_gradient.remote(parameters) for agent in agents]
    returns: list[float] = []
    recent: deque[float] = deque(maxlen=20)
    steps = updates = 0
    start = last_report = time.perf_counter()
    while True:
        # Take whichever gradient is ready first; the other runners keep working meanwhile.
        done_id, gradient_list = rf.wait(gradient_list)
        gradient, info = rf.get(done_id[0])
        steps += info["size"]
        updates += 1
        returns.extend(info["returns"])
        recent.extend(info["returns"])
        optimizer.zero_grad()
        for param, grad in zip(policy.parameters(), gradient, strict=True):
            param.grad = torch.tensor(grad)
        optimizer.step()
        parameters = variables.get_weights()
        mean_return = float(np.mean(recent)) if recent else float("nan")
        now = time.perf_counter()
        reached = len(recent) == recent.maxlen and mean_return >= target_return
        if reached or steps >= max_steps or now - start > max_wall_s:
            break
        if now - last_report > report_every_s:
            print(
                f"{now - start:6.1f} s  {steps:7d} steps  {updates:5d} updates  "
                f"mean return of last 20 games {mean_return:7.1f}",
                flush=True,
            )
            last_report = now
        gradient_list.append(agents[info["id"]].compute_gradient.remote(parameters))
    for agent in agents:
        rf.kill(agent)
    return {
        "returns": returns,
        "mean_return": mean_return,
        "steps": steps,
        "updates": updates,
        "reached": reached,
    }


def main(
    num_workers: int = 2,
    env: str = "cartpole",
    target_return: float = 195.0,
    max_steps: int = 400_000,
    max_wall_s: float = 120.0,
    learning_rate: float | None = None,
) -> dict[str, Any]:
    """Trains A3C on ``env`` with ``num_workers`` runners until the target or a limit.

    Args:
        env: ``"cartpole"`` or ``"pong"``.
        target_return: stop once the last 20 games average this much.
        max_steps, max_wall_s: stop after this many environment steps or seconds.
        learning_rate: Adam's step size (None: 3e-3 on CartPole, 1e-4 on Pong).

    Raises:
        ValueError: an unknown ``env``, or ``num_workers`` < 1.

    Returns:
        ``mean_return`` (last 20 games), ``first_return`` (mean of the first 20 games),
        ``returns``, ``steps``, ``updates``, ``games``, ``wall_s``, ``steps_per_s``, and ``ok``
        (the target was reached).
    """
    if num_workers < 1:
        raise ValueError(f"need num_workers >= 1, got {num_workers}")
    ship_by_value(_pong)
    start = time.perf_counter()
    if learning_rate is None:
        learning_rate = 1e-4 if env == "pong" else 3e-3
    result = train(
        num_workers, env, target_return, learning_rate, max_steps=max_steps, max_wall_s=max_wall_s
    )
    wall_s = time.perf_counter() - start
    first = float(np.mean(result["returns"][:20])) if result["returns"] else float("nan")
    verb = "reached" if result["reached"] else "did not reach"
    print(
        f"{verb} a mean return of {target_return} (last 20 games: {result['mean_return']:.1f}, "
        f"first 20: {first:.1f}) after {result['steps']} steps, {result['updates']} updates, "
        f"{wall_s:.1f} s"
    )
    return {
        "mean_return": result["mean_return"],
        "first_return": first,
        "returns": result["returns"],
        "steps": result["steps"],
        "updates": result["updates"],
        "games": len(result["returns"]),
        "wall_s": wall_s,
        "steps_per_s": result["steps"] / wall_s,
        "ok": result["reached"],
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--env", choices=("cartpole", "pong"), default="cartpole")
    parser.add_argument(
        "--target-return", type=float, default=None, help="default: 195 on cartpole, 0 on pong"
    )
    parser.add_argument("--max-steps", type=int, default=None)
    parser.add_argument("--max-wall-s", type=float, default=None)


def to_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    pong = args.env == "pong"
    target = args.target_return
    return {
        "env": args.env,
        "target_return": target if target is not None else (0.0 if pong else 195.0),
        "max_steps": args.max_steps or (10**12 if pong else 400_000),
        "max_wall_s": args.max_wall_s or (10.0**9 if pong else 120.0),
    }


if __name__ == "__main__":
    sys.exit(run_script(main, __doc__ or "", add_arguments, to_kwargs))
