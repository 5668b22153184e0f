"""The learning examples (Pong, A3C, ResNet, torch weights), end to end on a real 2-CPU runtime.

Each runtime test calls an example's ``main()`` with small settings and checks what a broken
runtime or example would miss: the torch weights reach ``w = 0.1, b = 0.3``, the ResNet's test
accuracy passes 0.9, A3C's last 20 CartPole games average 195, Pong's gradients, weights and
scores move. The pure functions under them (Pong's preprocessing and backward pass, A3C's
advantages) are checked against numbers worked out independently. The runtime fixture is
``test_examples``'s (the examples' folder on ``sys.path`` and the workers' ``PYTHONPATH``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("rayfield.sgd")
pytest.importorskip("ale_py")

from test_examples import (
    EXAMPLES_DIR,
    WORKER_ENV,
    assert_no_child_processes,
    example,
    runtime,  # noqa: F401  (the fixture)
)

import rayfield as rf


@pytest.fixture(autouse=True)
def examples_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES_DIR))


# ---- pure functions, no runtime ----------------------------------------------------------------


def test_pong_preprocess_keeps_paddles_and_ball_only() -> None:
    pong = example("_pong")
    frame = np.full((210, 160, 3), 144, dtype=np.uint8)  # background
    frame[35:195:2, ::2, 0][10, 20] = 236  # a ball pixel, on a kept row and column
    frame[35:195:2, ::2, 0][30, 5] = 109  # the other background shade
    frame[0, 0, 0] = 236  # the score area, cropped away
    x = pong.preprocess(frame)
    assert x.shape == (6400,) and x.dtype == np.float32
    assert np.flatnonzero(x).tolist() == [10 * 80 + 20]


def test_pong_returns_restart_at_each_point() -> None:
    returns = example("_pong").discount_pong_rewards(np.array([0, 0, 1, 0, -1.0]), 0.5)
    np.testing.assert_allclose(returns, [0.25, 0.5, 1.0, -0.5, -1.0])


def test_pong_policy_backward_matches_finite_differences() -> None:
    rl_pong = example("rl_pong")
    rng = np.random.default_rng(0)
    model = {"W1": rng.standard_normal((5, 7)), "W2": rng.standard_normal(5)}
    xs, weights = rng.standard_normal((4, 7)), rng.standard_normal(4)

    def objective(m: dict[str, np.ndarray]) -> float:  # sum_t weights[t] * logit_t
        return sum(
            w * float(m["W2"] @ rl_pong.policy_forward(m, x)[1])
            for x, w in zip(xs, weights, strict=True)
        )

    hiddens = np.array([rl_pong.policy_forward(model, x)[1] for x in xs])
    grad = rl_pong.policy_backward(model, xs, hiddens, weights)
    for key in model:
        numeric = np.zeros_like(model[key])
        for index in np.ndindex(model[key].shape):
            bumped = {k: v.copy() for k, v in model.items()}
            bumped[key][index] += 1e-6
            numeric[index] = (objective(bumped) - objective(model)) / 1e-6
        np.testing.assert_allclose(grad[key], numeric, rtol=1e-4, atol=1e-5)


def test_a3c_process_rollout_bootstraps_from_the_last_value() -> None:
    a3c = example("a3c")
    rollout = {
        "obs": np.zeros((2, 4), np.float32),
        "actions": np.array([0, 1]),
        "rewards": np.array([1.0, 1.0]),
        "values": np.array([0.5, 2.0]),
        "bootstrap": 4.0,
    }
    batch = a3c.process_rollout(rollout, gamma=0.5, lambda_=1.0)
    # Targets: 1 + 0.5 * (1 + 0.5 * 4) = 2.5 and 1 + 0.5 * 4 = 3; with lambda = 1 the advantage
    # is the target minus the value.
    np.testing.assert_allclose(batch["targets"], [2.5, 3.0])
    np.testing.assert_allclose(batch["advantages"], [2.0, 1.0])


def test_a3c_pong_option_sees_frame_differences() -> None:
    env = example("a3c").Env("pong", seed=0)
    first = env.reset()
    assert first.shape == (6400,) and not first.any()  # no previous frame yet
    second, reward, terminated, _ = env.step(0)
    assert second.shape == (6400,) and reward == 0.0 and not terminated
    with pytest.raises(ValueError, match="cartpole"):
        example("a3c").Env("breakout", seed=0)


# ---- on a runtime -------------------------------------------------------------------------------


@pytest.mark.usefixtures("runtime")
class TestLearningExamples:
    def test_torch_weights_reach_the_line(self) -> None:
        metrics = example("torch_weights").main(num_workers=2, num_iters=101)
        for averaging in ("weight", "gradient"):
            assert metrics[f"{averaging}_loss"] < metrics["initial_loss"] / 1000
            assert metrics[f"{averaging}_w"] == pytest.approx(0.1, abs=0.005)
            assert metrics[f"{averaging}_b"] == pytest.approx(0.3, abs=0.005)
        assert metrics["ok"]

    def test_resnet_weight_averaging_learns_digits(self) -> None:
        metrics = example("resnet").main(num_workers=2, num_rounds=5)
        assert metrics["gpu_ids"] == [[], []]  # no GPU in this runtime: two CPU actors
        assert metrics["devices"] == ["cpu", "cpu"]
        assert metrics["accuracies"][0] < metrics["accuracy"]
        assert metrics["accuracy"] > 0.9  # chance is 0.1

    @pytest.mark.timeout(400)
    def test_a3c_reaches_195_on_cartpole(self) -> None:
        metrics = example("a3c").main(num_workers=2, max_wall_s=240)
        assert metrics["first_return"] < 60  # a random policy's games last about 20 steps
        assert metrics["mean_return"] >= 195
        assert metrics["updates"] * 20 >= metrics["steps"]  # rollouts of at most 20 steps
        assert metrics["ok"]

    def test_rl_pong_rollouts_gradients_and_updates_flow(self) -> None:
        metrics = example("rl_pong").main(
            num_workers=2, num_iterations=2, batch_size=3, max_game_steps=300
        )
        assert metrics["updates"] == 2 and metrics["episodes"] == 6
        assert metrics["steps"] == 6 * 300  # every game was played to the cut
        assert all(np.isfinite(n) and n > 0 for n in metrics["grad_norms"])
        assert metrics["weight_change"] > 0
        assert all(-21 <= r <= 21 for r in metrics["episode_rewards"])
        assert any(r != 0 for r in metrics["episode_rewards"])  # points were scored
        assert metrics["ok"]


@pytest.fixture
def runtime_with_one_gpu(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A runtime that declares one GPU (none is used: torch finds no CUDA and stays on CPU)."""
    for name in WORKER_ENV:  # restored afterwards, set or not
        if name in os.environ:
            monkeypatch.setenv(name, os.environ[name])
        else:
            monkeypatch.delenv(name, raising=False)
    example("_common").prepare_worker_environment()
    rf.init(num_cpus=2, num_gpus=1)
    try:
        yield
    finally:
        rf.shutdown()
        assert_no_child_processes()


@pytest.mark.usefixtures("runtime_with_one_gpu")
def test_resnet_places_one_actor_per_gpu_share() -> None:
    metrics = example("resnet").main(num_rounds=1, gpus_per_actor=0.5)
    assert metrics["actors"] == 2  # two halves of the one GPU
    assert metrics["gpu_ids"] == [[0], [0]]  # rf.get_gpu_ids() in each actor
    assert metrics["devices"] == ["cpu", "cpu"]  # CUDA_VISIBLE_DEVICES=0, but no CUDA here


@pytest.mark.slow
@pytest.mark.timeout(3700)
@pytest.mark.usefixtures("runtime")
def test_rl_pong_running_reward_rises_within_an_hour() -> None:
    """The reference's settings (10 games per update) for 55 minutes on 2 actors.

    Pong's scores rise slowly at Karpathy's learning rate: a run on this 2-core machine
    under a load average of about 8 played 4,120 games, and the mean of 300 games rose
    from -20.46 (the first 300) to -19.87 (the last 300), every 300-game window but one
    above the one before. The checks ask for a rise of at least 0.3 points between the
    first and last 300 games that chance cannot explain (one-sided Welch t-test,
    p < 1e-6; that run's p was 5e-14) and an upward trend over all games.
    """
    from scipy import stats

    metrics = example("rl_pong").main(
        num_workers=2, num_iterations=10**6, batch_size=10, max_wall_s=3300
    )
    rewards = np.asarray(metrics["episode_rewards"], dtype=float)
    assert len(rewards) >= 1000
    first, last = rewards[:300], rewards[-300:]
    assert last.mean() > first.mean() + 0.3, (first.mean(), last.mean())
    test = stats.ttest_ind(last, first, equal_var=False, alternative="greater")
    assert test.pvalue < 1e-6, test
    trend = stats.linregress(np.arange(len(rewards)), rewards)
    assert trend.slope > 0 and trend.pvalue < 1e-6, trend
