"""A conformance test class for :class:`~rayfield.tune.contract.TrainableProtocol`.

Every implementation of the contract passes the same tests: subclass
:class:`TrainableConformance` in a package's test suite (its name must start with
``Test``) and give the factory::

    from rayfield.tune.testing import TrainableConformance

    class TestMyTrainable(TrainableConformance):
        def make_trainable(self, config):
            return MyTrainable(config=config)

        config = {"lr": 0.1}          # the trials' config (optional)

pytest then runs every ``test_*`` method below on it. Each test builds its own
trainables and stops them; fixtures the factory needs (a cluster) come from the
package's own ``conftest.py`` through :meth:`TrainableConformance.setup_factory`.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from rayfield.tune.contract import CONTRACT, TrainableProtocol, as_trainable, missing

__all__ = ["TrainableConformance"]


class TrainableConformance:
    """The contract's tests; a subclass gives :meth:`make_trainable`.

    Attributes:
        config: the config each trainable is made with.
        other_config: a second config for ``reset_config`` (default: ``config``).
        iterations: how many ``train()`` calls the checkpoint test makes before saving.
    """

    config: dict[str, Any] = {}
    other_config: dict[str, Any] | None = None
    iterations: int = 2

    def make_trainable(self, config: dict[str, Any]) -> Any:
        """A new trainable for ``config`` (an instance implementing the contract)."""
        raise NotImplementedError("a TrainableConformance subclass defines make_trainable")

    def _made(self) -> Any:
        return self.make_trainable(dict(self.config))

    def test_has_every_method_of_the_contract(self) -> None:
        trainable = self._made()
        try:
            assert not missing(type(trainable)), missing(type(trainable))
            assert isinstance(trainable, TrainableProtocol)
            # The one adapter accepts it (a tune.Trainable is returned as it is).
            adapted = as_trainable(type(trainable))
            assert all(callable(getattr(adapted, name)) for name in CONTRACT)
        finally:
            trainable.stop()

    def test_train_returns_metrics_and_counts_iterations(self) -> None:
        trainable = self._made()
        try:
            first = trainable.train()
            second = trainable.train()
            assert isinstance(first, dict) and isinstance(second, dict)
            assert first.get("training_iteration", 1) == 1
            assert second.get("training_iteration", 2) == 2
        finally:
            trainable.stop()

    def test_save_then_restore_continues_from_the_checkpoint(self) -> None:
        trainable = self._made()
        try:
            for _ in range(self.iterations):
                trainable.train()
            with tempfile.TemporaryDirectory(prefix="tune-conformance-") as root:
                path = trainable.save(root)
                assert isinstance(path, str) and os.path.exists(path)
                assert os.path.abspath(path).startswith(os.path.abspath(root))
                trainable.train()  # moves past the checkpoint
                restored = self._made()
                try:
                    restored.restore(path)
                    after = restored.train()
                    assert after.get("training_iteration", self.iterations + 1) == (
                        self.iterations + 1
                    )
                finally:
                    restored.stop()
        finally:
            trainable.stop()

    def test_default_resource_request_is_none_or_resources(self) -> None:
        trainable = self._made()
        try:
            request = type(trainable).default_resource_request(dict(self.config))
            from rayfield.tune.placement_groups import PlacementGroupFactory

            assert (
                request is None
                or isinstance(request, (dict, PlacementGroupFactory))
                or hasattr(request, "cpu")
            )
        finally:
            trainable.stop()

    def test_reset_config_answers_whether_it_took_the_config(self) -> None:
        trainable = self._made()
        try:
            trainable.train()
            other = dict(self.other_config if self.other_config is not None else self.config)
            took = trainable.reset_config(other)
            assert isinstance(took, bool)
            if took:  # a reset trainable trains on
                assert isinstance(trainable.train(), dict)
        finally:
            trainable.stop()
