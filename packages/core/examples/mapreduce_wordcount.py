"""Streaming MapReduce: word counts over the Python Language Reference, checked against Counter.

The corpus is real English prose that ships with every CPython: ``pydoc_data.topics.topics``, the
text of the Language Reference topics that ``help()`` shows (79 topics, about 65,000 words on
Python 3.11). Topics are dealt round-robin to ``Mapper`` actors, which read their stream lazily,
a few articles per call. Each mapper holds handles to all ``Reducer`` actors (actor handles passed
to a constructor); for every chunk it counts words, splits the counts by a stable hash of the word,
and sends each reducer its partition, actor to actor. The driver keeps one chunk request in flight
per mapper and takes whichever finishes first (``rf.wait`` with ``num_returns=1``), asking that
mapper for its next chunk until its stream is exhausted. Reducers own disjoint sets of words, so
the global top 10 is the top 10 of their merged answers.

Ports the streaming MapReduce example of Ray's example applications
(``examples/streaming/streaming.py``, word counts over Wikipedia articles), with a corpus bundled
with Python in place of the ``wikipedia`` package and its network access, and a finite stream.

Prints one line per chunk as it arrives, then the top 10 words with their counts, the total and
distinct word counts, and whether every count equals ``collections.Counter`` run locally.
"""

from __future__ import annotations

import re
import time
import zlib
from collections import Counter
from typing import Any

from _common import run_standalone

import rayfield as rf

WORD = re.compile(r"[a-z]+(?:'[a-z]+)*")


def load_corpus() -> list[str]:
    """The Language Reference topics bundled with CPython, in topic-name order."""
    from pydoc_data.topics import topics

    return [topics[name] for name in sorted(topics)]


def tokenize(text: str) -> list[str]:
    """Lower-cased runs of letters, with inner apostrophes kept (``don't``)."""
    return WORD.findall(text.lower())


def top_words(counts: dict[str, int], n: int) -> list[tuple[str, int]]:
    """The ``n`` most frequent words, ties broken alphabetically."""
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:n]


@rf.remote(num_cpus=0)
class Reducer:
    """Accumulates the counts of the words routed to it."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def add(self, counts: dict[str, int]) -> int:
        self.counts.update(counts)
        return len(self.counts)

    def top(self, n: int) -> list[tuple[str, int]]:
        return top_words(self.counts, n)

    def get_counts(self) -> dict[str, int]:
        return dict(self.counts)


@rf.remote(num_cpus=0)
class Mapper:
    """Reads its articles a chunk at a time and sends partial counts to the reducers."""

    def __init__(self, articles: list[str], reducers: list[Any]) -> None:
        self.articles, self.reducers, self.position = articles, reducers, 0

    def next_chunk(self, num_articles: int) -> dict[str, Any]:
        chunk = self.articles[self.position : self.position + num_articles]
        self.position += len(chunk)
        counts = Counter(word for text in chunk for word in tokenize(text))
        parts: list[dict[str, int]] = [{} for _ in self.reducers]
        for word, count in counts.items():
            parts[zlib.crc32(word.encode()) % len(parts)][word] = count
        # Wait for the reducers, so a finished chunk is a counted chunk.
        rf.get([r.add.remote(part) for r, part in zip(self.reducers, parts)])
        done = self.position >= len(self.articles)
        return {"articles": len(chunk), "words": counts.total(), "done": done}


def main(num_workers: int = 2, num_reducers: int = 2, chunk_articles: int = 4) -> dict[str, Any]:
    """Counts words with ``num_workers`` mappers and ``num_reducers`` reducers.

    Returns:
        ``total_words``, ``distinct_words``, ``top10`` (list of (word, count)), ``chunks``,
        ``matches_counter`` (every count equals the local Counter's), ``wall_s``, and ``ok``.
    """
    start = time.perf_counter()
    articles = load_corpus()
    reducers = [Reducer.remote() for _ in range(num_reducers)]
    mappers = [Mapper.remote(articles[i::num_workers], reducers) for i in range(num_workers)]

    in_flight = {m.next_chunk.remote(chunk_articles): i for i, m in enumerate(mappers)}
    chunks = 0
    while in_flight:
        [ready], _ = rf.wait(list(in_flight), num_returns=1)
        index = in_flight.pop(ready)
        info = rf.get(ready)
        chunks += 1
        print(f"mapper {index} chunk: {info['articles']} articles, {info['words']:5d} words")
        if not info["done"]:
            in_flight[mappers[index].next_chunk.remote(chunk_articles)] = index

    tops = rf.get([r.top.remote(10) for r in reducers])
    top10 = top_words(dict(kv for top in tops for kv in top), 10)
    counts: dict[str, int] = {}
    for part in rf.get([r.get_counts.remote() for r in reducers]):
        counts.update(part)  # reducers own disjoint words: no key appears twice
    expected = Counter(word for text in articles for word in tokenize(text))
    matches = counts == dict(expected) and top10 == top_words(expected, 10)
    total = sum(counts.values())
    wall_s = time.perf_counter() - start
    print("top 10 words:")
    for word, count in top10:
        print(f"  {word:10s} {count:6d}")
    print(
        f"{total} words ({len(counts)} distinct) in {len(articles)} articles, {chunks} chunks; "
        f"equal to collections.Counter: {matches} ({wall_s:.1f} s)"
    )
    return {
        "total_words": total,
        "distinct_words": len(counts),
        "top10": top10,
        "chunks": chunks,
        "matches_counter": matches,
        "wall_s": wall_s,
        "ok": matches and total > 0,
    }


if __name__ == "__main__":
    run_standalone(main, __doc__ or "")
