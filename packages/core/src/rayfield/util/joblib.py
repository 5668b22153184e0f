"""A joblib parallel backend, ``"rayfield"``, that runs joblib's batches on rayfield actors.

joblib is an optional dependency: it is imported by :func:`register_rayfield`, not by
importing this module.

Example:
    import joblib
    from rayfield.util.joblib import register_rayfield

    register_rayfield()
    with joblib.parallel_backend("rayfield"):
        print(joblib.Parallel(n_jobs=2)(joblib.delayed(abs)(-i) for i in range(5)))
"""

from __future__ import annotations

import functools
from typing import Any

import rayfield as rf

__all__ = ["backend_class", "register_ray", "register_rayfield"]

BACKEND_NAME = "rayfield"
_INSTALL_HINT = (
    "the rayfield joblib backend needs joblib, which is not installed: pip install joblib"
)


def _import_joblib() -> Any:
    try:
        import joblib
        import joblib._parallel_backends  # the backend base classes live here
    except ImportError as exc:
        raise ImportError(_INSTALL_HINT) from exc
    return joblib


@functools.cache
def backend_class() -> type:
    """The backend class (a joblib ``MultiprocessingBackend`` over a rayfield ``Pool``).

    Raises:
        ImportError: joblib is not installed (the message says how to install it).
    """
    joblib = _import_joblib()
    base: Any = joblib._parallel_backends.MultiprocessingBackend

    class RayfieldBackend(base):
        """Runs each joblib batch as a call on a :class:`rayfield.util.multiprocessing.Pool`.

        ``n_jobs`` is the number of pool actors; ``-1`` means the cluster's CPU count
        (``-2`` one less, and so on). Extra keyword ``ray_remote_args`` sets the actors'
        options, as for ``Pool``.
        """

        def __init__(
            self,
            nesting_level: int | None = None,
            inner_max_num_threads: int | None = None,
            ray_remote_args: dict[str, Any] | None = None,
            **kwargs: Any,
        ) -> None:
            self._ray_remote_args = ray_remote_args
            super().__init__(
                nesting_level=nesting_level, inner_max_num_threads=inner_max_num_threads, **kwargs
            )

        def effective_n_jobs(self, n_jobs: int | None) -> int:
            # Pool actors are not forked children: none of multiprocessing's nesting limits.
            if n_jobs == 0:
                raise ValueError("n_jobs == 0 in Parallel has no meaning")
            if n_jobs is None:
                return 1
            if n_jobs < 0:
                if not rf.is_initialized():
                    rf.init()
                cpus = int(rf.cluster_resources().get("CPU", 1))
                return max(cpus + 1 + n_jobs, 1)
            return n_jobs

        def configure(
            self,
            n_jobs: int = 1,
            parallel: Any = None,
            prefer: str | None = None,
            require: str | None = None,
            **_: Any,
        ) -> int:
            from rayfield.util.multiprocessing import Pool

            n_jobs = self.effective_n_jobs(n_jobs)
            self._pool = Pool(processes=n_jobs, ray_remote_args=self._ray_remote_args)
            self.parallel = parallel
            return n_jobs

    return RayfieldBackend


def register_rayfield() -> None:
    """Register the ``"rayfield"`` joblib backend.

    Then ``with joblib.parallel_backend("rayfield"): Parallel(n_jobs=...)(...)`` runs the
    calls on rayfield actors, starting rayfield with ``rayfield.init()`` if needed.

    Raises:
        ImportError: joblib is not installed (the message says how to install it).
    """
    _import_joblib().register_parallel_backend(BACKEND_NAME, backend_class())


def register_ray() -> None:
    """Ray's spelling: register the backend as ``"rayfield"`` and as ``"ray"``."""
    register_rayfield()
    _import_joblib().register_parallel_backend("ray", backend_class())
