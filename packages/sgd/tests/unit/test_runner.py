"""One replica's work without any process: the default train/validate functions, the
creators' shapes, and TorchRunner's state round trip."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from sgd_testing import line_data, linear_model
from torch.utils.data import DataLoader, TensorDataset

from rayfield.sgd import sgd_mse_optimizer
from rayfield.sgd.pytorch import training
from rayfield.sgd.pytorch.runner import TorchRunner, wrap_ddp


def _spec(**overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "model_creator": linear_model,
        "data_creator": line_data,
        "optimizer_creator": sgd_mse_optimizer,
        "loss_creator": None,
        "config": {"lr": 0.1},
        "num_threads": 1,
    }
    spec.update(overrides)
    return spec


def test_default_train_epoch_learns_a_line() -> None:
    train, _ = line_data({})
    model = linear_model({})
    loss, optimizer = sgd_mse_optimizer(model, {"lr": 0.1})
    loader = DataLoader(train, batch_size=16, shuffle=True)
    first = training.train_epoch(model, loader, loss, optimizer, {})
    for _ in range(5):
        last = training.train_epoch(model, loader, loss, optimizer, {})
    assert first["num_samples"] == 512 and first["batch_count"] == 32
    assert last["train_loss"] < first["train_loss"] / 10
    assert model.weight.item() == pytest.approx(2.0, abs=0.05)


def test_default_validate_reports_accuracy_for_class_scores() -> None:
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
    y = torch.tensor([0, 1, 1, 1])
    model = torch.nn.Identity()
    model.register_parameter("p", torch.nn.Parameter(torch.zeros(1)))
    stats = training.validate(
        model, DataLoader(TensorDataset(x, y), batch_size=2), torch.nn.CrossEntropyLoss(), {}
    )
    assert stats["num_samples"] == 4
    assert stats["val_accuracy"] == pytest.approx(0.75)


def test_creator_shapes_are_normalised_and_checked() -> None:
    assert training.as_list(None) == [] and training.as_list((1, 2)) == [1, 2]
    assert isinstance(training.make_criterion(torch.nn.MSELoss, {}), torch.nn.MSELoss)
    assert training.make_criterion(lambda c: c["x"], {"x": 3}) == 3
    with pytest.raises(TypeError):
        training.make_criterion(3, {})
    assert training.call_data_creator(lambda bs, cfg: (bs, cfg["v"]), 8, {"v": 1}) == (8, 1)
    assert training.call_data_creator(lambda cfg: "train", 8, {}) == ("train", None)
    with pytest.raises(TypeError, match="data_creator"):
        training.call_data_creator(lambda cfg: (1, 2, 3), 8, {})
    with pytest.raises(ValueError, match="one model"):
        training.train_epoch([torch.nn.Linear(1, 1)] * 2, [], None, None, {})


def test_runner_trains_and_its_state_round_trips() -> None:
    runner = TorchRunner(_spec())
    runner.setup(None, 0, 1, "gloo", 10.0, 32)
    first = runner.train_epoch()
    assert first["num_samples"] == 512 and "epoch_time_s" in first
    blob = runner.get_state()
    other = TorchRunner(_spec(config={"lr": 0.1, "model_seed": 7}))
    other.setup(None, 0, 1, "gloo", 10.0, 32)
    other.set_state(blob)
    assert other.epoch == 1
    assert torch.equal(other.models[0].weight, runner.models[0].weight)
    assert runner.validate()["validation_loss"] == pytest.approx(
        other.validate()["validation_loss"]
    )


def test_runner_with_loss_creator_several_models_and_a_scheduler() -> None:
    def models(config: dict[str, Any]) -> list[torch.nn.Module]:
        return [torch.nn.Linear(1, 1), torch.nn.Linear(1, 1)]

    def optimizers(ms: list[torch.nn.Module], config: dict[str, Any]) -> list[Any]:
        return [torch.optim.SGD(m.parameters(), lr=0.1) for m in ms]

    def schedulers(opts: list[Any], config: dict[str, Any]) -> list[Any]:
        return [torch.optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.5) for o in opts]

    def train_both(ms: list, loader: Any, criterion: Any, opts: list, config: dict) -> dict:
        n = 0
        for x, y in loader:
            for m, o in zip(ms, opts):
                o.zero_grad()
                criterion(m(x), y).backward()
                o.step()
            n += len(x)
        return {"num_samples": n}

    runner = TorchRunner(
        _spec(
            model_creator=models,
            optimizer_creator=optimizers,
            loss_creator=torch.nn.MSELoss,
            scheduler_creator=schedulers,
            train_function=train_both,
        )
    )
    runner.setup(None, 0, 1, "gloo", 10.0, 64)
    assert runner.train_epoch()["num_samples"] == 512
    assert [o.param_groups[0]["lr"] for o in runner.optimizers] == [0.05, 0.05]
    state = runner.state_dict()
    assert len(state["models"]) == 2 and len(state["schedulers"]) == 2


def test_runner_refuses_an_optimizer_creator_without_a_loss() -> None:
    runner = TorchRunner(_spec(optimizer_creator=lambda m, c: torch.optim.SGD(m.parameters(), 0.1)))
    with pytest.raises(TypeError, match="loss_creator"):
        runner.setup(None, 0, 1, "gloo", 10.0, 32)


def test_initialization_hook_runs_first_and_loaders_pass_through() -> None:
    import os

    def hook() -> None:
        os.environ["SGD_TEST_HOOK"] = "ran"

    def loaders(batch_size: int, config: dict[str, Any]) -> Any:
        # The (batch_size, config) form returning DataLoaders built by the user.
        assert os.environ.get("SGD_TEST_HOOK") == "ran"
        train, _ = line_data(config)
        return DataLoader(train, batch_size=batch_size)

    runner = TorchRunner(_spec(initialization_hook=hook, data_creator=loaders))
    runner.setup(None, 0, 1, "gloo", 10.0, 64)
    assert isinstance(runner.train_loader, DataLoader) and runner.train_loader.batch_size == 64
    assert runner.train_epoch()["batch_count"] == 8
    with pytest.raises(ValueError, match="validation"):
        runner.validate()  # the creator gave no validation set
    os.environ.pop("SGD_TEST_HOOK", None)


def test_two_ranks_read_disjoint_halves() -> None:
    """Training shards split the 512 samples 256/256; validation shards 64/64."""
    train, validation = line_data({})
    shards = []
    for rank in (0, 1):
        runner = TorchRunner(_spec())
        runner.rank, runner.world_size = rank, 2
        loader = runner._loader(train, shuffle=True)
        loader.sampler.set_epoch(0)
        shards.append(set(iter(loader.sampler)))
        assert len(runner._loader(validation, shuffle=False).dataset) == 64
    assert len(shards[0]) == len(shards[1]) == 256
    assert not shards[0] & shards[1]


def test_wrap_ddp_wraps_trainable_models_and_leaves_frozen_ones(tmp_path: Any) -> None:
    frozen = torch.nn.Linear(2, 1).requires_grad_(False)
    assert wrap_ddp(frozen, torch.device("cpu")) is frozen
    torch.distributed.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1
    )
    try:
        model = torch.nn.Linear(2, 1)
        wrapped = wrap_ddp(model, torch.device("cpu"))
        assert isinstance(wrapped, torch.nn.parallel.DistributedDataParallel)
        assert wrapped.module is model
        wrapped(torch.ones(3, 2)).sum().backward()
        assert model.weight.grad is not None
        assert torch.allclose(model.weight.grad, torch.full((1, 2), 3.0))
    finally:
        torch.distributed.destroy_process_group()
