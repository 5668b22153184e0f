"""`rayfield.rllib.policy.adam.Adam` against `torch.optim.Adam`, and what it is for: a
policy that learns without importing ``torch._dynamo``."""

from __future__ import annotations

import copy
import subprocess
import sys
import textwrap

import pytest
import torch

from rayfield.rllib.policy.adam import Adam, fused_supported


def _pair(
    fused: bool = False, **kwargs: object
) -> tuple[torch.nn.Module, Adam, torch.nn.Module, torch.optim.Adam]:
    torch.manual_seed(0)
    ours = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
    theirs = copy.deepcopy(ours)
    kernel = {"fused": True} if fused else {"foreach": True}
    return (
        ours,
        Adam(ours.parameters(), fused=fused, **kwargs),  # type: ignore[arg-type]
        theirs,
        torch.optim.Adam(theirs.parameters(), **kernel, **kwargs),  # type: ignore[arg-type]
    )


def _train(model: torch.nn.Module, opt: Adam | torch.optim.Adam, seed: int, steps: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(8, 4, generator=gen)
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()


def _max_diff(a: torch.nn.Module, b: torch.nn.Module) -> float:
    return max((p - q).abs().max().item() for p, q in zip(a.parameters(), b.parameters()))


@pytest.mark.parametrize(
    "kwargs",
    [{"lr": 1e-2}, {"lr": 3e-3, "eps": 1e-5, "weight_decay": 0.01, "amsgrad": True}],
)
def test_steps_match_torch_adam(kwargs: dict[str, object]) -> None:
    ours, opt, theirs, ref = _pair(**kwargs)
    before = copy.deepcopy(ours)
    _train(ours, opt, 1, 25)
    _train(theirs, ref, 1, 25)
    assert _max_diff(ours, before) > 1e-3  # it moved
    assert _max_diff(ours, theirs) == 0.0


@pytest.mark.skipif(
    not fused_supported([torch.zeros(1)]), reason="torch < 2.4 has no fused Adam on the CPU"
)
@pytest.mark.parametrize(
    "kwargs",
    [{"lr": 1e-2}, {"lr": 3e-3, "eps": 1e-5, "weight_decay": 0.01, "amsgrad": True}],
)
def test_fused_steps_match_torch_fused_adam(kwargs: dict[str, object]) -> None:
    ours, opt, theirs, ref = _pair(fused=True, **kwargs)
    assert opt.param_groups[0]["fused"] and not opt.param_groups[0]["foreach"]
    before = copy.deepcopy(ours)
    _train(ours, opt, 1, 25)
    _train(theirs, ref, 1, 25)
    assert _max_diff(ours, before) > 1e-3
    assert _max_diff(ours, theirs) == 0.0
    # and a fused state dict goes on in torch's foreach Adam (the same update, rounded
    # differently: close, not equal)
    other = copy.deepcopy(ours)
    ref2 = torch.optim.Adam(other.parameters(), foreach=True)
    ref2.load_state_dict(copy.deepcopy(opt.state_dict()))
    ref2.param_groups[0].update(fused=None, foreach=True)
    _train(ours, opt, 3, 10)
    _train(other, ref2, 3, 10)
    assert _max_diff(ours, other) < 1e-5


def test_fused_is_used_only_where_torch_has_it() -> None:
    assert not fused_supported([torch.zeros(2, dtype=torch.complex64)])
    assert not fused_supported([torch.zeros(2, dtype=torch.int64)])
    opt = Adam([torch.nn.Parameter(torch.zeros(2, dtype=torch.complex64))], fused=True)
    assert opt.param_groups[0]["fused"] is None and opt.param_groups[0]["foreach"]


def test_state_dicts_move_between_the_two_and_training_goes_on_alike() -> None:
    ours, opt, theirs, ref = _pair(lr=1e-2)
    _train(ours, opt, 2, 10)
    # ours -> torch.optim.Adam on a copy of our model: both continue identically. A
    # state dict holds the optimizer's own tensors (as torch's does): copy it, as a
    # checkpoint's torch.save / torch.load does.
    theirs.load_state_dict(ours.state_dict())
    ref.load_state_dict(copy.deepcopy(opt.state_dict()))
    _train(ours, opt, 3, 10)
    _train(theirs, ref, 3, 10)
    assert _max_diff(ours, theirs) == 0.0
    # torch.optim.Adam -> a fresh Adam of ours
    fresh_model = copy.deepcopy(theirs)
    fresh = Adam(fresh_model.parameters(), lr=5.0)
    fresh.load_state_dict(copy.deepcopy(ref.state_dict()))
    assert fresh.param_groups[0]["lr"] == 1e-2
    _train(fresh_model, fresh, 4, 5)
    _train(theirs, ref, 4, 5)
    assert _max_diff(fresh_model, theirs) == 0.0


def test_lr_set_through_param_groups_takes_effect() -> None:
    ours, opt, _, _ = _pair(lr=1e-2)
    opt.param_groups[0]["lr"] = 0.0
    before = copy.deepcopy(ours)
    _train(ours, opt, 5, 3)
    assert _max_diff(ours, before) == 0.0


def test_bad_arguments_and_state_dicts_raise() -> None:
    model = torch.nn.Linear(3, 1)
    with pytest.raises(ValueError, match="lr"):
        Adam(model.parameters(), lr=-1.0)
    with pytest.raises(ValueError, match="beta"):
        Adam(model.parameters(), betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="no parameters"):
        Adam([])
    opt = Adam(model.parameters())
    with pytest.raises(ValueError, match="2 parameters"):
        opt.load_state_dict({"state": {}, "param_groups": [{"params": [0]}]})
    other_model = torch.nn.Linear(3, 2)
    other = torch.optim.Adam(other_model.parameters())
    other_model(torch.ones(1, 3)).sum().backward()
    other.step()
    with pytest.raises(ValueError, match="shape"):
        opt.load_state_dict(other.state_dict())


def test_a_ppo_trainer_learns_without_importing_torch_dynamo() -> None:
    """The default optimizer's reason to exist: ``torch._dynamo`` costs about a
    CPU-second to import, and no step of a PPO trainer's start-up or training needs it."""
    code = textwrap.dedent(
        """
        import sys
        from rayfield.rllib.agents.ppo import PPOTrainer
        trainer = PPOTrainer(env="CartPole-v1", config={
            "num_workers": 0, "train_batch_size": 64, "rollout_fragment_length": 64,
            "sgd_minibatch_size": 32, "num_sgd_iter": 2, "lr_schedule": [[0, 1e-3], [64, 1e-4]]})
        before = [p.detach().clone() for p in trainer.get_policy().model.parameters()]
        trainer.train()
        trainer.train()
        after = list(trainer.get_policy().model.parameters())
        assert any((a - b).abs().max() > 0 for a, b in zip(after, before))
        lr = trainer.get_policy().optimizer.param_groups[0]["lr"]
        trainer.stop()
        print("dynamo" if "torch._dynamo" in sys.modules else "no dynamo", lr)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.split() == ["no", "dynamo", "0.0001"]
