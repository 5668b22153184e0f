"""The core microbenchmark that ``rayfield microbenchmark`` runs (Ray: ``ray microbenchmark``).

Each row measures one operation (single-client ``get``/``put`` calls, ``put``
throughput, tasks, actor calls...). ``build(rayfield, params)`` returns, per row key, a
setup function that does the untimed work and returns ``(call, work_per_call)``;
``timed_rate(call, work_per_call, budget_s, warmup_s)`` runs ``call`` for ``budget_s``
seconds after ``warmup_s`` untimed and returns a dict whose ``"rate"`` is work units
per second.

- ``ROWS``: ``(key, label)`` of every row, in order.
- ``QUICK_ROWS``: the keys the CLI runs by default.
- ``QUICK_PARAMS``: sizes for a short run (``budget_s``, ``warmup_s`` in seconds...).
- ``UNITS``: the unit of a row whose rate is not operations per second.

Example:
    >>> import rayfield
    >>> from rayfield.util import perf
    >>> rayfield.init(num_cpus=2)                                   # doctest: +SKIP
    >>> call, work = perf.build(rayfield, perf.QUICK_PARAMS)["tasks_sync"]()  # doctest: +SKIP
    >>> perf.timed_rate(call, work, budget_s=0.5, warmup_s=0.1)["rate"]       # doctest: +SKIP
"""

from __future__ import annotations

from rayfield._private.perf import QUICK_PARAMS, QUICK_ROWS, ROWS, UNITS, build, timed_rate

__all__ = ["QUICK_PARAMS", "QUICK_ROWS", "ROWS", "UNITS", "build", "timed_rate"]
