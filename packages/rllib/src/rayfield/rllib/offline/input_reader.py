"""`InputReader`, the interface of experience sources, and `SamplerInput`."""

from __future__ import annotations

import abc
from typing import Any

__all__ = ["InputReader", "SamplerInput"]


class InputReader(abc.ABC):
    """A source of experience batches for a rollout worker (``input`` config key).

    `next` is called by the worker's ``sample()`` once per batch it returns; readers of
    files never run out (they start over).
    """

    @abc.abstractmethod
    def next(self) -> Any:
        """The next `SampleBatch` or `MultiAgentBatch`."""

    def get_metrics(self) -> list[Any]:
        """Episodes the reader saw finish outside the worker's sampler since the last
        call (`RolloutMetrics`; e.g. those a `PolicyServerInput`'s clients played);
        the worker adds them to its own. None by default."""
        return []

    def close(self) -> None:  # noqa: B027  (optional for readers that hold nothing open)
        """Release what the reader holds open (called when the worker stops)."""


class SamplerInput(InputReader):
    """A worker's sampler (``input: "sampler"``): batches from the live env."""

    def __init__(self, sampler: Any) -> None:
        self.sampler = sampler

    def next(self) -> Any:
        return self.sampler.sample()
