"""Learning to play Pong: Karpathy's numpy policy gradient, its games played by actors.

Run from this folder (2 actors, 10 games per update, until interrupted or ``--num-iterations``)::

    python rl_pong.py --batch-size 10 --num-workers 2 [--num-iterations 300] [--address HOST:PORT]

The policy is a two-layer network in numpy: the difference of two preprocessed frames
(``float32[6400]``, see ``_pong.preprocess``) goes through 200 ReLU units to the probability of
moving the paddle up. Each ``PongEnv`` actor owns a real Atari Pong (gymnasium's ``Pong-v0`` from
ale-py, whose wheel ships the ROM). The driver puts the model in the object store once per update
(``rf.put``) and asks the actors for ``batch_size`` games, one ``compute_gradient`` call per game,
taking results as they finish (``rf.wait``) and handing the free actor the next game. The summed
gradients of the batch go through RMSProp into the model. A game is played to 21 points, so a
random policy's game lasts about 1,000 steps and its score is about -20.

Prints, per update: the games' scores, the running reward (an exponential average over games,
0.99 / 0.01 as in the reference), the update's wall time and the steps per second over all actors.
Learning Pong takes many hours on 2 cores; in an hour the scores rise by about half a point
(4,120 games in 55 minutes on this 2-core machine under load: the mean of the first 300 games
-20.46, of the last 300 -19.87).

Ports "Learning to Play Pong" of Ray's example applications (``examples/rl_pong/driver.py``),
Karpathy's "Pong from Pixels" (2016) with the games played by actors; only the import differs.

Sources:
    Williams, "Simple statistical gradient-following algorithms for connectionist reinforcement
    learning", Machine Learning 8, 1992 (REINFORCE).
    Karpathy, "Deep Reinforcement Learning: Pong from Pixels", 2016 (the network, preprocessing and
    hyperparameters).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import _pong
import numpy as np
from _common import ship_by_value
from _script import run_script

import rayfield as rf

HIDDEN = 200
Model = dict[str, np.ndarray]


def init_model(seed: int = 0) -> Model:
    """``{"W1": float64[200, 6400], "W2": float64[200]}``, Xavier-scaled normal weights."""
    rng = np.random.default_rng(seed)
    return {
        "W1": rng.standard_normal((HIDDEN, _pong.PONG_OBS_SIZE)) / np.sqrt(_pong.PONG_OBS_SIZE),
        "W2": rng.standard_normal(HIDDEN) / np.sqrt(HIDDEN),
    }


def policy_forward(model: Model, x: np.ndarray) -> tuple[float, np.ndarray]:
    """Returns P(up | x) and the hidden activations ``float64[200]`` for ``x``: ``float[6400]``."""
    hidden = np.maximum(model["W1"] @ x, 0.0)
    logit = float(model["W2"] @ hidden)
    return 1.0 / (1.0 + np.exp(-logit)), hidden


def policy_backward(
    model: Model, xs: np.ndarray, hiddens: np.ndarray, dlogits: np.ndarray
) -> Model:
    """Gradient of ``sum_t dlogits[t] * logit_t`` with respect to the weights.

    Args:
        xs: ``float[T, 6400]``, the inputs.
        hiddens: ``float[T, 200]``, their hidden activations.
        dlogits: ``float[T]``, the derivative of the objective with respect to each logit.
    """
    d_w2 = hiddens.T @ dlogits
    d_hidden = np.outer(dlogits, model["W2"])
    d_hidden[hiddens <= 0] = 0.0
    return {"W1": d_hidden.T @ xs, "W2": d_w2}


@rf.remote(num_cpus=1)
class PongEnv:
    """One Atari Pong; plays whole games with the model it is given and returns their gradients."""

    def __init__(self, seed: int, gamma: float, max_game_steps: int | None = None) -> None:
        # One BLAS thread per actor, or the actors fight over the cores. MKL reads this here;
        # OpenBLAS reads OPENBLAS_NUM_THREADS only when numpy is imported, which
        # ``prepare_worker_environment`` sets for the workers before they start.
        os.environ["MKL_NUM_THREADS"] = "1"
        self.env = _pong.make_pong(seed)
        self.rng = np.random.default_rng(seed)
        self.gamma = gamma
        self.max_game_steps = max_game_steps

    def compute_gradient(self, model: Model) -> tuple[Model, float, int]:
        """Plays one game to 21 points (or ``max_game_steps`` steps) with ``model``.

        Returns:
            ``(gradient, reward_sum, steps)``: the game's REINFORCE gradient (an ascent
            direction), its returns standardised; the game's score (-21..21); the agent steps.
        """
        frame, _ = self.env.reset()
        previous = None
        xs, hiddens, dlogits, rewards = [], [], [], []
        done = False
        while not done:
            current = _pong.preprocess(frame)
            x = current - previous if previous is not None else np.zeros_like(current)
            previous = current
            p_up, hidden = policy_forward(model, x)
            up = self.rng.random() < p_up
            xs.append(x)
            hiddens.append(hidden)
            dlogits.append((1.0 if up else 0.0) - p_up)  # d log pi(action) / d logit
            frame, reward, terminated, truncated, _ = self.env.step(_pong.UP if up else _pong.DOWN)
            rewards.append(float(reward))
            done = terminated or truncated or len(rewards) == self.max_game_steps
        returns = _pong.discount_pong_rewards(np.array(rewards), self.gamma)
        returns -= returns.mean()
        returns /= returns.std() + 1e-8
        grad = policy_backward(model, np.array(xs), np.array(hiddens), np.array(dlogits) * returns)
        return grad, float(sum(rewards)), len(rewards)


class RMSProp:
    """RMSProp for gradient ascent on a dict of arrays (decay 0.99, as in the reference).

    Sources:
        Tieleman and Hinton, "Lecture 6.5 - RMSProp", COURSERA: Neural Networks for Machine
        Learning, 2012.
    """

    def __init__(self, model: Model, learning_rate: float, decay: float = 0.99) -> None:
        self.learning_rate, self.decay = learning_rate, decay
        self.cache = {k: np.zeros_like(v) for k, v in model.items()}

    def step(self, model: Model, grad: Model) -> None:
        """Adds the RMSProp step for ``grad`` to ``model`` in place."""
        for k, g in grad.items():
            self.cache[k] = self.decay * self.cache[k] + (1 - self.decay) * g**2
            model[k] += self.learning_rate * g / (np.sqrt(self.cache[k]) + 1e-5)


def main(
    num_workers: int = 2,
    num_iterations: int = 2,
    batch_size: int = 2,
    learning_rate: float = 1e-4,
    gamma: float = 0.99,
    max_wall_s: float | None = None,
    max_game_steps: int | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Plays ``num_iterations`` updates of ``batch_size`` games on ``num_workers`` actors.

    Args:
        max_wall_s: stop after the update that passes this many seconds (None: no limit).
        max_game_steps: cut each game after this many agent steps (None: play to 21 points).

    Raises:
        ValueError: ``num_workers`` or ``batch_size`` below 1.

    Returns:
        ``episode_rewards`` (every game's score, in the order they finished), ``running_reward``,
        ``grad_norms`` (per update, of the batch's summed gradient), ``weight_change`` (norm of the
        final minus the initial weights), ``updates``, ``episodes``, ``steps``, ``steps_per_s``,
        ``wall_s``, and ``ok``: every update had a finite nonzero gradient and the weights moved.
    """
    if num_workers < 1 or batch_size < 1:
        raise ValueError(f"need num_workers, batch_size >= 1, got {num_workers}, {batch_size}")
    ship_by_value(_pong)
    start = time.perf_counter()
    actors = [PongEnv.remote(seed + 1 + i, gamma, max_game_steps) for i in range(num_workers)]
    model = init_model(seed)
    initial = {k: v.copy() for k, v in model.items()}
    optimizer = RMSProp(model, learning_rate)
    episode_rewards: list[float] = []
    grad_norms: list[float] = []
    running_reward: float | None = None
    steps = 0
    for it in range(1, num_iterations + 1):
        update_start = time.perf_counter()
        model_ref = rf.put(model)
        games_left = batch_size
        pending: dict[Any, Any] = {}
        for actor in actors[:batch_size]:
            pending[actor.compute_gradient.remote(model_ref)] = actor
            games_left -= 1
        summed: Model = {k: np.zeros_like(v) for k, v in model.items()}
        batch_steps = 0
        while pending:
            [ready], _ = rf.wait(list(pending), num_returns=1)
            actor = pending.pop(ready)
            if games_left > 0:
                pending[actor.compute_gradient.remote(model_ref)] = actor
                games_left -= 1
            grad, reward_sum, game_steps = rf.get(ready)
            for k in summed:
                summed[k] += grad[k]
            episode_rewards.append(reward_sum)
            batch_steps += game_steps
            running_reward = (
                reward_sum if running_reward is None else 0.99 * running_reward + 0.01 * reward_sum
            )
        optimizer.step(model, summed)
        grad_norms.append(float(np.sqrt(sum(float((g**2).sum()) for g in summed.values()))))
        steps += batch_steps
        update_s = time.perf_counter() - update_start
        print(
            f"update {it:4d}: scores {episode_rewards[-batch_size:]} running reward "
            f"{running_reward:7.3f}  {update_s:5.1f} s  {batch_steps / update_s:6.0f} steps/s",
            flush=True,
        )
        if max_wall_s is not None and time.perf_counter() - start > max_wall_s:
            break
    wall_s = time.perf_counter() - start
    weight_change = float(np.sqrt(sum(((model[k] - initial[k]) ** 2).sum() for k in model)))
    print(
        f"{len(episode_rewards)} games, running reward {running_reward:.3f}, "
        f"{steps / wall_s:.0f} steps/s overall ({wall_s:.1f} s)"
    )
    return {
        "episode_rewards": episode_rewards,
        "running_reward": running_reward,
        "grad_norms": grad_norms,
        "weight_change": weight_change,
        "updates": len(grad_norms),
        "episodes": len(episode_rewards),
        "steps": steps,
        "steps_per_s": steps / wall_s,
        "wall_s": wall_s,
        "ok": all(np.isfinite(n) and n > 0 for n in grad_norms) and weight_change > 0,
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--batch-size", type=int, default=10, help="games per update")
    parser.add_argument("--num-iterations", type=int, default=10**9, help="updates")
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--max-wall-s", type=float, default=None, help="stop after (seconds)")


def to_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "num_iterations": args.num_iterations,
        "batch_size": args.batch_size,
        "learning_rate": args.learning_rate,
        "max_wall_s": args.max_wall_s,
    }


if __name__ == "__main__":
    sys.exit(run_script(main, __doc__ or "", add_arguments, to_kwargs))
