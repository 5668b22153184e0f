"""Shared by the benchmark's sides: parameters, the timed loop, process-tree figures, output.

Every side (``_system_side`` for rayfield and Ray, ``_pool_side`` for the process
pool) is a script run in its own subprocess by ``bench_core.py``. This module
imports only the standard library at load time (psutil lazily) so that any
interpreter, the Ray venv included, can load it. The rows, their parameters and the
timed loop live in ``rayfield._private.perf`` (shared with ``rayfield microbenchmark``),
loaded here from its file as ``perf``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

RESULT_MARKER = "BENCH_RESULT "  # one line per finished row or figure: {"key": ..., ...}
START_MARKER = "BENCH_START "  # printed before a row starts, so the parent can time it out
DONE_MARKER = "BENCH_DONE"  # the side finished every row it was given
# printed by a row of several long calls after each: the row's timeout starts again
PROGRESS_MARKER = "BENCH_PROGRESS"
MB = 1_000_000
GB = 1_000_000_000

PERF_ENV = "RAYFIELD_PERF_MODULE"  # path of rayfield/_private/perf.py, for every side


def _perf_path() -> str:
    """Where ``rayfield/_private/perf.py`` is: ``$RAYFIELD_PERF_MODULE`` (set by the first
    script that found it, so sides in another interpreter, e.g. Ray's venv, find it too),
    else next to the ``rayfield`` package this interpreter would import."""
    if os.environ.get(PERF_ENV):
        return os.environ[PERF_ENV]
    spec = importlib.util.find_spec("rayfield")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            "rayfield is not importable: install packages/core, or put packages/core/src on "
            "PYTHONPATH (see README.md)"
        )
    for root in spec.submodule_search_locations:
        candidate = os.path.join(root, "_private", "perf.py")
        if os.path.exists(candidate):
            os.environ[PERF_ENV] = candidate
            return candidate
    raise ImportError(f"no _private/perf.py under {list(spec.submodule_search_locations)}")


def _load_perf() -> ModuleType:
    """``rayfield._private.perf`` loaded from its file, without importing ``rayfield``: a
    side's import time and memory figures must not include rayfield (nor, for Ray, it)."""
    spec = importlib.util.spec_from_file_location("rayfield_perf", _perf_path())
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


perf = _load_perf()
timed_rate = perf.timed_rate
tree_cpu_s = perf.tree_cpu_s
machine_busy_s = perf.machine_busy_s


def params(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """The run's parameters; ``--quick`` in ``argv`` (default ``sys.argv``) picks the short set."""
    quick = "--quick" in (sys.argv if argv is None else argv)
    return dict(perf.QUICK_PARAMS if quick else perf.FULL_PARAMS)


def process_tree(idle_s: float = 0.0) -> dict[str, Any]:
    """Descendants of this process and the memory of the whole tree (this process included).

    Memory is the sum of USS (pages private to each process, from
    ``memory_full_info().uss``), or of RSS where USS cannot be read, in MB.
    """
    try:
        import psutil
    except ImportError:
        return {"error": "psutil not installed"}
    if idle_s:
        time.sleep(idle_s)
    me = psutil.Process()
    procs = [me, *me.children(recursive=True)]
    uss = rss = 0
    kind = "uss"
    names: list[str] = []
    for p in procs:
        try:
            rss_p = p.memory_info().rss
            try:
                uss_p = p.memory_full_info().uss
            except (psutil.AccessDenied, AttributeError):
                uss_p, kind = rss_p, "rss"
            uss += uss_p
            rss += rss_p
            if p is not me:
                names.append(" ".join(p.cmdline()[:3])[:80] or p.name())
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return {
        "children": len(procs) - 1,
        "memory_mb": uss / MB,
        "rss_mb": rss / MB,
        "memory_kind": kind,
        "child_cmdlines": names,
    }


def emit(key: str, **fields: Any) -> None:
    """Print one result as a single marked JSON line for ``bench_core.py`` to pick up."""
    sys.stdout.write(RESULT_MARKER + json.dumps({"key": key, **fields}) + "\n")
    sys.stdout.flush()


def announce(key: str) -> None:
    """Tell the parent that row ``key`` starts now (its per-row timeout runs from here)."""
    sys.stdout.write(START_MARKER + key + "\n")
    sys.stdout.flush()


def progress() -> None:
    """Tell the parent that the running row made progress (one of its calls ended): its
    timeout runs again from now, so that a row of several long calls times out only when
    one call hangs."""
    sys.stdout.write(PROGRESS_MARKER + "\n")
    sys.stdout.flush()


def run_row(key: str, body: Callable[[], dict[str, Any]]) -> None:
    """Announce ``key``, run ``body`` and emit its figures, or ``error`` if it raised."""
    announce(key)
    try:
        emit(key, **body())
    except BaseException as exc:  # the row reports it and the run goes on
        if isinstance(exc, KeyboardInterrupt):
            raise
        text = f"{type(exc).__name__}: {exc}"
        emit(key, error=text.splitlines()[0][:300], detail=text[:3000])


def selected(all_keys: Sequence[str]) -> list[str]:
    """The rows named by ``--rows a,b`` (default: all of them), in ``all_keys`` order."""
    if "--rows" in sys.argv:
        wanted = set(sys.argv[sys.argv.index("--rows") + 1].split(","))
        return [k for k in all_keys if k in wanted]
    return list(all_keys)


def flag(name: str) -> bool:
    return name in sys.argv
