"""Tree reduction: the sum of many numpy arrays held in the object store, two ways.

Generator tasks (two return values each) put ``num_blocks`` random arrays in the object store.
They are then summed pairwise, without the driver ever fetching a block:

* **driver-built tree**: the driver keeps a queue of refs, pops two, and appends the ref of a task
  adding them, until one ref is left. Each ``add`` waits only for its own two inputs, so additions
  at the same depth run in parallel.
* **nested tasks**: one ``tree_sum`` task gets the list of refs, splits it in halves, submits a
  ``tree_sum`` task per half and adds the two results; tasks submit tasks down to leaves of at
  most ``leaf_size`` blocks. A task blocked in ``rf.get`` must not hold on to its CPU, or the
  nested calls deadlock.

Both results are checked against numpy: exactly against the same additions done in the same order
locally, and to 1e-9 against ``np.sum``.

Ports the tree-reduce snippet of Ray's tutorial ("Expressing dependencies between tasks", 100
arrays of 1,000 normal draws) and its "Remote Functions Within Remote Functions" section.

Prints, per method, the number of blocks, the wall time, and the largest error against numpy.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from _common import run_standalone

import rayfield as rf


def make_pair(seed: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.normal(size=size), rng.normal(size=size)


generate_pair = rf.remote(num_returns=2)(make_pair)


@rf.remote
def add(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return x + y


@rf.remote
def tree_sum(blocks: list[Any], leaf_size: int) -> np.ndarray:
    """Sums the arrays behind a list of refs (refs inside a list arrive unresolved).

    Lists of at most ``leaf_size`` refs are summed in place, left to right.
    """
    if len(blocks) <= leaf_size:
        arrays = rf.get(blocks)
        return sum(arrays[1:], arrays[0])
    mid = len(blocks) // 2
    left = tree_sum.remote(blocks[:mid], leaf_size)
    right = tree_sum.remote(blocks[mid:], leaf_size)
    return rf.get(add.remote(left, right))


def queue_reduce(items: list[Any], combine: Any) -> Any:
    """The driver-built tree: combine the two front items, append the result, repeat."""
    items = list(items)
    while len(items) > 1:
        items.append(combine(items.pop(0), items.pop(0)))
    return items[0]


def halves_reduce(items: list[np.ndarray], leaf_size: int) -> np.ndarray:
    """``tree_sum``'s order of additions, done locally."""
    if len(items) <= leaf_size:
        return sum(items[1:], items[0])
    mid = len(items) // 2
    return halves_reduce(items[:mid], leaf_size) + halves_reduce(items[mid:], leaf_size)


def main(
    num_workers: int = 2, num_blocks: int = 64, block_size: int = 100_000, leaf_size: int = 8
) -> dict[str, Any]:
    """Sums ``num_blocks`` arrays of ``block_size`` doubles both ways.

    ``num_workers`` is unused: the tasks spread over every CPU of the runtime.

    Returns:
        ``blocks``, ``queue_exact`` and ``nested_exact`` (bit-equal to the same additions done
        locally), ``max_error`` (largest deviation from ``np.sum``), ``wall_s``, and ``ok``.
    """
    del num_workers
    start = time.perf_counter()
    refs = [ref for s in range(num_blocks // 2) for ref in generate_pair.remote(s, block_size)]
    local = [block for s in range(num_blocks // 2) for block in make_pair(s, block_size)]
    expected = np.sum(local, axis=0)

    results = {}
    for name, reduce_refs, reduce_local in [
        ("queue", lambda r: queue_reduce(r, add.remote), lambda b: queue_reduce(b, np.add)),
        ("nested", lambda r: tree_sum.remote(r, leaf_size), lambda b: halves_reduce(b, leaf_size)),
    ]:
        t0 = time.perf_counter()
        total = rf.get(reduce_refs(refs))
        elapsed = time.perf_counter() - t0
        exact = bool(np.array_equal(total, reduce_local(local)))
        error = float(np.max(np.abs(total - expected)))
        results[name] = (exact, error)
        print(
            f"{name:6s} tree over {len(refs)} blocks of {block_size}: {elapsed:.2f} s, "
            f"bit-equal to local: {exact}, max |result - np.sum| {error:.1e}"
        )
    wall_s = time.perf_counter() - start
    max_error = max(e for _, e in results.values())
    return {
        "blocks": len(refs),
        "queue_exact": results["queue"][0],
        "nested_exact": results["nested"][0],
        "max_error": max_error,
        "wall_s": wall_s,
        "ok": results["queue"][0] and results["nested"][0] and max_error < 1e-9,
    }


if __name__ == "__main__":
    run_standalone(main, __doc__ or "")
