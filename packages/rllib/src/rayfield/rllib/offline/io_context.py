"""`IOContext`: what an input reader or output writer knows about where it runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["IOContext"]


@dataclass
class IOContext:
    """Passed to ``input`` / ``output`` functions (``f(ioctx) -> InputReader``).

    Attributes:
        log_dir: the trainer's log directory (where ``output: "logdir"`` writes); "" when
            it has none.
        config: the trainer config.
        worker_index: 0 for the local worker, 1..n for remote ones.
        worker: the `RolloutWorker` (None outside a worker).
    """

    log_dir: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    worker_index: int = 0
    worker: Any = None

    def default_sampler_input(self) -> Any:
        """The worker's sampler as an `InputReader` (what ``input: "sampler"`` reads).

        Raises:
            ValueError: there is no worker.
        """
        from rayfield.rllib.offline.input_reader import SamplerInput

        if self.worker is None:
            raise ValueError("IOContext has no worker: the sampler input needs one")
        return SamplerInput(self.worker.sampler)
