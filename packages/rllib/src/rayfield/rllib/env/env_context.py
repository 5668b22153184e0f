"""`EnvContext`: the ``env_config`` dict that env creators receive, with the
worker's identity attached."""

from __future__ import annotations

from typing import Any


class EnvContext(dict):
    """``env_config`` plus where the env runs.

    Args:
        env_config: the user's ``env_config`` dict.
        worker_index: 0 for the local (driver) worker, 1..num_workers for remote ones.
        vector_index: index of this env among the worker's ``num_envs_per_worker``.
        remote: whether the env runs in its own process.
        num_workers: the number of remote rollout workers.
    """

    def __init__(
        self,
        env_config: dict[str, Any] | None,
        worker_index: int = 0,
        vector_index: int = 0,
        remote: bool = False,
        num_workers: int = 0,
    ) -> None:
        super().__init__(env_config or {})
        self.worker_index = worker_index
        self.vector_index = vector_index
        self.remote = remote
        self.num_workers = num_workers

    @property
    def num_env_runners(self) -> int:
        return self.num_workers

    def copy_with_overrides(
        self,
        env_config: dict[str, Any] | None = None,
        worker_index: int | None = None,
        vector_index: int | None = None,
    ) -> EnvContext:
        return EnvContext(
            dict(self) if env_config is None else env_config,
            self.worker_index if worker_index is None else worker_index,
            self.vector_index if vector_index is None else vector_index,
            self.remote,
            self.num_workers,
        )
