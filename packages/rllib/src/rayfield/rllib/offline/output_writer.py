"""`OutputWriter`, the interface of experience sinks, and `NoopOutput`."""

from __future__ import annotations

import abc
from typing import Any

__all__ = ["NoopOutput", "OutputWriter"]


class OutputWriter(abc.ABC):
    """Where a rollout worker writes each batch it samples (``output`` config key)."""

    @abc.abstractmethod
    def write(self, sample_batch: Any) -> None:
        """Save a `SampleBatch` or `MultiAgentBatch`."""

    def close(self) -> None:  # noqa: B027  (optional for writers that hold nothing open)
        """Flush and close what the writer holds open (called when the worker stops)."""


class NoopOutput(OutputWriter):
    """Writes nothing (``output: None``)."""

    def write(self, sample_batch: Any) -> None:
        pass
