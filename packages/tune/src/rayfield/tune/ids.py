"""Random hex ids for trials and experiments.

One generator per process, seeded once from the OS: reading the OS's entropy for every id
costs a system call each, which is slow in some sandboxes and containers. A forked child
reseeds, so parent and child never share a sequence.
"""

from __future__ import annotations

import os
import random

__all__ = ["random_hex"]

_rng = random.Random()
os.register_at_fork(after_in_child=_rng.seed)


def random_hex(chars: int) -> str:
    """``chars`` random lower-case hex digits."""
    return f"{_rng.getrandbits(4 * chars):0{chars}x}"
