"""`MixedInput` (several sources, drawn at random per batch) and `ShuffledInput` (a
sliding-window shuffle of batches)."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from rayfield.rllib.offline.input_reader import InputReader
from rayfield.rllib.offline.io_context import IOContext

__all__ = ["MixedInput", "ShuffledInput"]


def _default_reader(source: Any, ioctx: IOContext) -> InputReader:
    if source == "sampler":
        return ioctx.default_sampler_input()
    from rayfield.rllib.offline.json_reader import JsonReader

    return JsonReader(source, ioctx)


class MixedInput(InputReader):
    """Draws each batch from one of several sources with given probabilities, e.g.
    ``{"sampler": 0.4, "/tmp/cartpole-out": 0.6}`` (RLlib draws with
    ``np.random.choice`` the same way).

    Args:
        dist: ``{source: probability}``; a source is ``"sampler"``, a path, glob or list
            of them, or an `InputReader`. The probabilities must sum to 1.
        ioctx: the worker context.
        make_reader: turns a source into an `InputReader` (default: ``"sampler"`` is
            the worker's sampler, anything else a `JsonReader`; the worker passes
            `rayfield.rllib.offline.worker_io.make_input_reader`).

    Raises:
        ValueError: an empty mix, a negative or non-finite probability, or
            probabilities that do not sum to 1.
    """

    def __init__(
        self,
        dist: Mapping[Any, float],
        ioctx: IOContext | None = None,
        make_reader: Callable[[Any, IOContext], InputReader] | None = None,
    ) -> None:
        if not dist:
            raise ValueError("a mixed input needs at least one source")
        probs = [float(p) for p in dist.values()]
        if any(not math.isfinite(p) or p < 0 for p in probs):
            raise ValueError(f"mixed input probabilities must be >= 0, got {dict(dist)}")
        if abs(sum(probs) - 1.0) > 1e-6:
            raise ValueError(f"mixed input probabilities must sum to 1, got {sum(probs):g}")
        self.ioctx = ioctx or IOContext()
        make_reader = make_reader or _default_reader
        self.choices = [
            src if isinstance(src, InputReader) else make_reader(src, self.ioctx) for src in dist
        ]
        self.p = np.asarray(probs) / sum(probs)
        seed = self.ioctx.config.get("seed")
        self._rng = np.random.default_rng(
            None if seed is None else int(seed) + 1000 * self.ioctx.worker_index
        )

    def next(self) -> Any:
        return self.choices[int(self._rng.choice(len(self.choices), p=self.p))].next()

    def get_metrics(self) -> list[Any]:
        return [m for child in self.choices for m in child.get_metrics()]

    def close(self) -> None:
        for child in self.choices:
            child.close()


class ShuffledInput(InputReader):
    """A sliding-window shuffle (``shuffle_buffer_size``): keeps `n` batches and
    returns a random one of them, replaced by the next batch read. The first call
    fills the window.

    Args:
        child: the reader to shuffle.
        n: batches in the window (0 or 1: no shuffling).
        seed: seed of the choices.
    """

    def __init__(self, child: InputReader, n: int = 0, seed: int | None = None) -> None:
        self.child = child
        self.n = int(n)
        self._buffer: list[Any] = []
        self._rng = random.Random(seed)

    def next(self) -> Any:
        if self.n <= 1:
            return self.child.next()
        while len(self._buffer) < self.n:
            self._buffer.append(self.child.next())
        i = self._rng.randrange(len(self._buffer))
        out = self._buffer[i]
        self._buffer[i] = self.child.next()
        return out

    def get_metrics(self) -> list[Any]:
        return self.child.get_metrics()

    def close(self) -> None:
        self.child.close()
