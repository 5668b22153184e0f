"""Which byte ranges of one object a pull still needs, and from which node: a pure object.

A pull over the data channel (``data_pull.py``) copies an object in chunks of a few MB on
several streams at once, possibly from several nodes that hold it. :class:`ChunkPlan`
decides, for a stream that asks, which chunk it fetches next and from which source; it is
told when a chunk arrived and when one failed (the chunk goes back to the queue, and the
source that failed is not asked again). It does no I/O and takes no lock: the caller
serializes its calls, and the unit tests drive it with plain calls.

Sources are tried round-robin by chunk, so with two holders every other chunk comes from
each; a source that fails a chunk is dropped, and once every source is dropped the pull
cannot complete (:attr:`ChunkPlan.hopeless`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

__all__ = ["ChunkPlan"]


class ChunkPlan:
    """The chunks of one object of ``size`` bytes from ``start`` on, and who sends them.

    Args:
        size: the object's size in bytes.
        chunk_bytes: the size of one chunk (the last one may be shorter); > 0.
        sources: addresses of the nodes that hold the object, in order of preference.
        start: bytes before this offset are here already (the first reply's chunk).

    Raises:
        ValueError: ``chunk_bytes`` is not positive, or ``start`` is not within
            ``0..size``.
    """

    def __init__(self, size: int, chunk_bytes: int, sources: Iterable[str], start: int = 0) -> None:
        if chunk_bytes <= 0:
            raise ValueError(f"chunk_bytes must be positive, not {chunk_bytes}")
        if not 0 <= start <= size:
            raise ValueError(f"start must be within 0..{size}, not {start}")
        self.size = size
        self.sources: list[str] = list(dict.fromkeys(sources))
        self.pending: deque[tuple[int, int]] = deque(
            (off, min(chunk_bytes, size - off)) for off in range(start, size, chunk_bytes)
        )
        self.running: dict[tuple[int, int], str] = {}  # chunk -> the source sending it
        self.missing_bytes = size - start
        self._turn = 0  # round-robin position over the sources

    @property
    def complete(self) -> bool:
        """Every byte is here."""
        return self.missing_bytes == 0

    @property
    def hopeless(self) -> bool:
        """Bytes are missing and no source is left to send them."""
        return not self.complete and not self.sources

    def next(self) -> tuple[int, int, str] | None:
        """The next chunk to fetch as ``(offset, length, source)``, now running; None when
        none is left to start (all running or done, or no source left)."""
        if not self.pending or not self.sources:
            return None
        offset, length = self.pending.popleft()
        source = self.sources[self._turn % len(self.sources)]
        self._turn += 1
        self.running[(offset, length)] = source
        return offset, length, source

    def done(self, offset: int, length: int) -> None:
        """The chunk ``(offset, length)`` (from :meth:`next`) is here.

        Raises:
            KeyError: that chunk is not running.
        """
        del self.running[(offset, length)]
        self.missing_bytes -= length

    def failed(self, offset: int, length: int) -> None:
        """The chunk ``(offset, length)`` did not come: it is fetched again, and the source
        that was sending it is asked for nothing more (its other running chunks finish or
        fail on their own).

        Raises:
            KeyError: that chunk is not running.
        """
        source = self.running.pop((offset, length))
        self.pending.appendleft((offset, length))
        if source in self.sources:
            self.sources.remove(source)
