"""``RunOptions``: the arguments of ``tune.run`` (its reference signature) as one
checked, frozen object; :func:`rayfield.tune.tune.run` builds one and runs it with
:func:`rayfield.tune.tune.run_with`. The meaning of each field is that of ``tune.run``'s
argument of the same name."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rayfield.tune.arguments import check_scheduler, check_search_alg, check_time_budget
from rayfield.tune.error import TuneError

if TYPE_CHECKING:
    from rayfield.tune.callback import Callback
    from rayfield.tune.schedulers.trial_scheduler import TrialScheduler
    from rayfield.tune.search.search_algorithm import SearchAlgorithm
    from rayfield.tune.search.searcher import Searcher
    from rayfield.tune.syncer import SyncConfig
    from rayfield.tune.trial import Trial

__all__ = ["RunOptions"]


@dataclass(frozen=True)
class RunOptions:
    """Every option of ``tune.run`` but the trainable (see :func:`rayfield.tune.run`).

    Raises:
        TypeError: ``scheduler`` not a TrialScheduler, ``search_alg`` not a Searcher or
            SearchAlgorithm, ``time_budget_s`` not a number or timedelta.
        ValueError: ``time_budget_s`` not > 0 (or NaN).
        TuneError: ``mode`` not ``"min"``/``"max"``, or both ``sync_to_cloud`` and its
            classic name ``sync_function``.
    """

    name: str | None = None
    metric: str | None = None
    mode: str | None = None
    stop: Any = None
    time_budget_s: float | None = None
    config: dict[str, Any] | None = None
    resources_per_trial: Any = None
    num_samples: int = 1
    local_dir: str | None = None
    storage_path: str | None = None
    search_alg: SearchAlgorithm | Searcher | None = None
    scheduler: TrialScheduler | None = None
    keep_checkpoints_num: int | None = None
    checkpoint_score_attr: str | None = None
    checkpoint_freq: int = 0
    checkpoint_at_end: bool = False
    verbose: int = 2
    loggers: Sequence[Any] | None = None
    callbacks: Sequence[Callback] | None = None
    trial_name_creator: Callable[[Trial], str] | None = None
    max_failures: int = 0
    restore: str | None = None
    resume: bool | str = False
    reuse_actors: bool | None = None
    raise_on_failed_trial: bool = True
    return_trials: bool = False
    max_concurrent_trials: int | None = None
    upload_dir: str | None = None
    sync_to_cloud: Any = None
    sync_function: Any = None
    sync_config: SyncConfig | None = None
    sync_to_driver: Any = None
    export_formats: Any = None
    queue_trials: bool = False
    global_checkpoint_period: float | None = None
    with_server: bool = False
    server_port: int = 4321
    ray_auto_init: bool = True
    trusted: bool = False

    def __post_init__(self) -> None:
        check_scheduler(self.scheduler)
        check_search_alg(self.search_alg)
        check_time_budget(self.time_budget_s)
        if self.sync_to_cloud is not None and self.sync_function is not None:
            raise TuneError("pass sync_to_cloud or its classic name sync_function, not both")
        if self.mode not in (None, "min", "max"):
            raise TuneError(f"mode must be 'min' or 'max', got {self.mode!r}")

    @property
    def budget_s(self) -> float | None:
        """``time_budget_s`` in seconds (a timedelta converted), or None."""
        return check_time_budget(self.time_budget_s)

    @property
    def cloud_syncer(self) -> Any:
        """How to copy to ``upload_dir``: ``sync_to_cloud`` or its classic name."""
        return self.sync_to_cloud if self.sync_to_cloud is not None else self.sync_function

    @property
    def upload_uri(self) -> str | None:
        """``upload_dir``, else the one of ``sync_config``."""
        if self.upload_dir is None and self.sync_config is not None:
            return self.sync_config.upload_dir
        return self.upload_dir
