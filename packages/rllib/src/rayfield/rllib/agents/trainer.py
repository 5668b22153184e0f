"""`Trainer`: the base class of algorithms (the Ray 2 name is `Algorithm`).

A trainer merges its config over `COMMON_CONFIG` (unknown keys are errors), builds
a `WorkerSet` and runs `training_step` per `train()` call. It follows Tune's
Trainable protocol by duck typing (``train``, ``save``, ``restore``, ``stop``,
``setup``/``step``, ``_setup``/``_train``, ``default_resource_request``) without
importing Tune.

Subclasses set ``_name``, ``_default_config`` and ``_policy`` (a policy class, or its
dotted path so that importing the trainer does not import torch) and implement
`training_step`, which returns the learner statistics of one step. The built-in
algorithms build a policy optimizer (`rayfield.rllib.optimizers`) in ``_init`` as
``self.optimizer`` and call its ``step()``; the trainer then reports the optimizer's
counters and the episodes its steps finished. A trainer without one counts
``_timesteps_total`` / ``_steps_trained`` and fills ``_episodes_this_iter`` itself.
"""

from __future__ import annotations

import collections
import copy
import logging
import os
import random
import socket
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rayfield.rllib.agents import checkpoints
from rayfield.rllib.agents.common_config import COMMON_CONFIG
from rayfield.rllib.agents.trainer_config import TrainerConfigMethods
from rayfield.rllib.env.registry import get_env_creator
from rayfield.rllib.evaluation.callbacks import make_callbacks
from rayfield.rllib.evaluation.episode import RolloutMetrics
from rayfield.rllib.evaluation.metrics import summarize_episodes
from rayfield.rllib.evaluation.worker_set import WorkerSet
from rayfield.rllib.offline.estimators import OffPolicyEstimate, summarize_estimates
from rayfield.rllib.policy.policy import clip_action
from rayfield.rllib.policy.sample_batch import DEFAULT_POLICY_ID
from rayfield.rllib.utils import preload
from rayfield.rllib.utils.config import deep_update
from rayfield.util import private_files

if TYPE_CHECKING:
    from rayfield.rllib.optimizers.policy_optimizer import PolicyOptimizer

logger = logging.getLogger("rayfield.rllib")

MAX_WORKER_FAILURE_RETRIES = 3


def _optimizer_counter(name: str) -> property:
    """A trainer counter that is the policy optimizer's attribute `name` when the trainer
    has one (so `Trainer.restore` sets the optimizer's), else the trainer's own
    ``_own_<name>``."""
    own = f"_own_{name}"

    def holder(self: Trainer) -> tuple[Any, str]:
        return (self.optimizer, name) if self.optimizer is not None else (self, own)

    def get(self: Trainer) -> int:
        return getattr(*holder(self))

    def set_(self: Trainer, value: int) -> None:
        setattr(*holder(self), value)

    return property(get, set_)


class SaveResult(str):
    """The checkpoint path `save` returns (a str, as in RLlib 0.7), with the Ray 2
    spelling ``result.checkpoint.path`` too."""

    @property
    def checkpoint(self) -> Any:
        return _Checkpoint(str(checkpoints.checkpoint_dir(str(self))))


class _Checkpoint:
    def __init__(self, path: str) -> None:
        self.path = path

    def __repr__(self) -> str:
        return f"Checkpoint(path={self.path!r})"


class Trainer(TrainerConfigMethods):
    """Base class of the algorithms.

    Its config classmethods (`merge_trainer_configs`, `validate_config`,
    `default_resource_request`, `get_default_config`, `get_default_policy_class`) are
    defined in `rayfield.rllib.agents.trainer_config`.

    Args:
        config: overrides of the algorithm's default config; every key must be a known
            key (or a Ray 2 alias of one).
        env: a gymnasium id, a name given to `register_env`, or an env class; the same
            as ``config["env"]``.
        logger_creator: ``f(config) -> logger``, as Tune passes it: the trainer's log
            directory is ``logger.logdir`` (where ``output: "logdir"`` writes), and a
            logger with ``on_result(result)`` gets every result of `train`.

    Raises:
        UnknownConfigKeyError: an unknown config key (names the closest valid one).
        ConfigTypeError: a value of the wrong type.
        ValueError: a number out of its range (``num_workers=-1``, ``lr=nan``,
            ``gamma=5``: see `validate_config`), a removed key (``gpu``...), or a bad env.
    """

    _name = "Trainer"
    _default_config: dict[str, Any] = COMMON_CONFIG
    _policy: type | str | None = None
    optimizer: PolicyOptimizer | None = None
    """The policy optimizer ``_init`` builds (None: the subclass's `training_step`
    samples and counts itself)."""

    def __init__(
        self,
        config: dict[str, Any] | None = None,
        env: Any = None,
        logger_creator: Any = None,
    ) -> None:
        if hasattr(config, "overrides_dict"):  # an AlgorithmConfig
            config = config.overrides_dict()  # type: ignore[union-attr]
        config = dict(config or {})
        if env is not None:
            config["env"] = env
        self.config = self.merge_trainer_configs(self._default_config, config)
        self._logger_creator = logger_creator
        self._iteration = 0
        self._timesteps_total = 0
        self._steps_trained = 0
        self._episodes_total = 0
        self._time_total = 0.0
        self._iterations_since_restore = 0
        self._episode_history: collections.deque[RolloutMetrics] = collections.deque(
            maxlen=int(self.config["metrics_smoothing_episodes"])
        )
        self._episodes_this_iter: list[RolloutMetrics] = []
        self._owns_rayfield = False
        self.logdir = ""
        self._result_logger: Any = None
        if logger_creator is not None:
            self._result_logger = logger_creator(self.config)
            self.logdir = str(getattr(self._result_logger, "logdir", "") or "")
        self.setup(self.config)

    # -- setup ----------------------------------------------------------------------
    def setup(self, config: dict[str, Any]) -> None:
        """Seed, connect to rayfield when remote workers are asked for, build the workers.

        The remote workers start before the driver imports torch and builds its own
        policy, so their start-up runs alongside the driver's (see `WorkerSet`).
        """
        logging.getLogger("rayfield.rllib").setLevel(str(config["log_level"]).upper())
        if config["seed"] is not None:
            random.seed(config["seed"])
            np.random.seed(config["seed"])
        if config["num_workers"] > 0:
            import rayfield

            if not rayfield.is_initialized():  # workers forked with torch imported
                rayfield.init(**preload.init_options(self._policy))
                self._owns_rayfield = True
        self.env_creator = get_env_creator(config["env"]) if config["env"] is not None else None
        if self.env_creator is None:
            raise ValueError("no env given: pass env=... or config={'env': ...}")
        self.callbacks = make_callbacks(config["callbacks"])
        if config["output"] == "logdir" and not self.logdir:
            self._default_logdir()
        # a dotted path is imported where the policy is built (RolloutWorker)
        self.workers = self._make_workers(
            self.env_creator, self._policy, config, config["num_workers"]
        )
        import torch  # loaded by now when the policy is a torch one

        torch.set_num_threads(max(1, int(config["num_cpus_for_driver"])))
        if config["seed"] is not None:
            torch.manual_seed(config["seed"])
        self.evaluation_workers: WorkerSet | None = None
        if config["evaluation_interval"]:
            # evaluation plays the env (not the training input) and writes no output
            base = {**config, "input": "sampler", "output": None, "input_evaluation": []}
            eval_cfg = deep_update(
                copy.deepcopy(base), copy.deepcopy(config["evaluation_config"]), True
            )
            eval_cfg.update({"batch_mode": "complete_episodes", "rollout_fragment_length": 1})
            self.evaluation_workers = self._make_workers(
                self.env_creator, self._policy, eval_cfg, 0
            )
        self._init(config, self.env_creator)

    def _make_workers(
        self, env_creator: Any, policy: Any, config: dict[str, Any], num_workers: int
    ) -> WorkerSet:
        return WorkerSet(env_creator, policy, config, num_workers, log_dir=self.logdir)

    def _init(self, config: dict[str, Any], env_creator: Any) -> None:
        """Algorithm-specific setup (optimizers, replay buffers...)."""

    _setup = setup

    # -- counters -------------------------------------------------------------------
    _timesteps_total = _optimizer_counter("num_steps_sampled")
    _steps_trained = _optimizer_counter("num_steps_trained")

    # -- training -------------------------------------------------------------------
    def training_step(self) -> dict[str, Any]:
        """One step of the algorithm; returns ``{policy_id: learner stats}``. The
        default runs ``self.optimizer.step()``.

        Raises:
            NotImplementedError: the trainer built no optimizer and does not override this.
        """
        if self.optimizer is None:
            raise NotImplementedError(
                f"{type(self).__name__} builds no optimizer: override training_step"
            )
        return self.optimizer.step()

    def train(self) -> dict[str, Any]:
        """One training iteration; returns the result dict (see `step`).

        Raises:
            rayfield.exceptions.RayfieldError: a worker failed and
                ``ignore_worker_failures`` is not set.
        """
        result = self.step()
        if self.config["observation_filter"] != "NoFilter":
            self.workers.sync_filters()
        if (
            self.config["evaluation_interval"]
            and self._iteration % self.config["evaluation_interval"] == 0
        ):
            result["evaluation"] = self._evaluate()
        if self.callbacks.overrides("on_train_result"):
            self.callbacks.on_train_result(trainer=self, algorithm=self, result=result)
        if hasattr(self._result_logger, "on_result"):
            self._result_logger.on_result(result)
        return result

    def step(self) -> dict[str, Any]:
        """Tune's ``step``: run `training_step` until ``timesteps_per_iteration`` steps
        and ``min_iter_time_s`` seconds have passed, and build the result dict."""
        start = time.time()
        steps_before = self._timesteps_total
        self._episodes_this_iter = []
        global_vars = {"timestep": self._timesteps_total}
        self.workers.local_worker().set_global_vars(global_vars)
        stats: dict[str, Any] = {}
        while True:
            stats = self.training_step()
            if self.optimizer is not None:
                self._episodes_this_iter.extend(self.optimizer.take_episodes())
            steps = self._timesteps_total - steps_before
            if steps >= self.config["timesteps_per_iteration"] and (
                time.time() - start >= self.config["min_iter_time_s"]
            ):
                break
        self._iteration += 1
        self._iterations_since_restore += 1
        elapsed = time.time() - start
        self._time_total += elapsed
        return self._build_result(stats, self._timesteps_total - steps_before, elapsed)

    _train = step

    def _build_result(self, stats: dict[str, Any], steps: int, elapsed: float) -> dict[str, Any]:
        # the workers' metrics mix finished episodes and off-policy estimates
        estimates: list[Any] = [
            m for m in self._episodes_this_iter if isinstance(m, OffPolicyEstimate)
        ]
        self._episodes_this_iter = [
            m for m in self._episodes_this_iter if not isinstance(m, OffPolicyEstimate)
        ]
        self._episode_history.extend(self._episodes_this_iter)
        self._episodes_total += len(self._episodes_this_iter)
        result = summarize_episodes(self._episode_history)
        result.update(
            {
                "episodes_this_iter": len(self._episodes_this_iter),
                "episodes_total": self._episodes_total,
                "timesteps_this_iter": steps,
                "timesteps_total": self._timesteps_total,
                "num_env_steps_sampled": self._timesteps_total,
                "training_iteration": self._iteration,
                "iterations_since_restore": self._iterations_since_restore,
                "time_this_iter_s": elapsed,
                "time_total_s": self._time_total,
                "num_healthy_workers": self.workers.healthy_worker_count(),
                "info": {
                    "learner": stats,
                    "num_steps_sampled": self._timesteps_total,
                    "num_steps_trained": self._steps_trained,
                },
                "done": False,
                "timestamp": int(time.time()),
                "date": datetime.now().strftime("%Y-%m-%d_%H-%M-%S"),
                "hostname": socket.gethostname(),
                "pid": os.getpid(),
                "config": self.config,
                "off_policy_estimator": summarize_estimates(estimates),
            }
        )
        result["env_runners"] = {
            "episode_return_mean": result["episode_reward_mean"],
            "episode_return_max": result["episode_reward_max"],
            "episode_return_min": result["episode_reward_min"],
            "episode_len_mean": result["episode_len_mean"],
            "num_episodes": result["episodes_this_iter"],
        }
        return result

    def _evaluate(self) -> dict[str, Any]:
        """Run ``evaluation_num_episodes`` episodes with the current weights on the
        evaluation worker."""
        assert self.evaluation_workers is not None
        worker = self.evaluation_workers.local_worker()
        worker.set_weights(self.workers.local_worker().get_weights())
        worker.sync_filters(self.workers.local_worker().get_filters())
        episodes: list[RolloutMetrics] = []
        while len(episodes) < self.config["evaluation_num_episodes"]:
            worker.sample()
            episodes.extend(m for m in worker.get_metrics() if isinstance(m, RolloutMetrics))
        return summarize_episodes(episodes[: self.config["evaluation_num_episodes"]])

    def evaluate(self) -> dict[str, Any]:
        """Ray 2: evaluate now; ``{"evaluation": metrics}``.

        Raises:
            ValueError: no ``evaluation_interval`` was configured.
        """
        if self.evaluation_workers is None:
            raise ValueError("set evaluation_interval (or .evaluation(...)) to use evaluate()")
        return {"evaluation": self._evaluate()}

    # -- acting ---------------------------------------------------------------------
    def compute_action(
        self,
        observation: Any,
        state: list[Any] | None = None,
        prev_action: Any = None,
        prev_reward: Any = None,
        info: Any = None,
        policy_id: str = DEFAULT_POLICY_ID,
        full_fetch: bool = False,
        explore: bool | None = None,
    ) -> Any:
        """The policy's action for one raw env observation (preprocessed and filtered
        as in training, without updating the filter).

        Returns:
            The action; ``(action, state_out, extra)`` when `state` is given or
            `full_fetch` is set.
        """
        worker = self.workers.local_worker()
        obs = worker.preprocessors[policy_id].transform(observation)
        obs = worker.filters[policy_id](obs, update=False)
        out = self.get_policy(policy_id).compute_single_action(
            obs,
            state,
            prev_action,
            prev_reward,
            info,
            clip_actions=self.config["clip_actions"],
            explore=explore,
        )
        return out if state is not None or full_fetch else out[0]

    compute_single_action = compute_action

    def compute_actions(
        self,
        observations: dict[Any, Any],
        state: dict[Any, list[Any]] | None = None,
        prev_action: dict[Any, Any] | None = None,
        prev_reward: dict[Any, Any] | None = None,
        info: Any = None,
        policy_id: str = DEFAULT_POLICY_ID,
        full_fetch: bool = False,
        explore: bool | None = None,
    ) -> Any:
        """Actions of one policy for several raw observations in one forward pass.

        Args:
            observations: ``{key: raw observation}`` (e.g. agent ids).
            state: ``{key: recurrent state list}`` for recurrent policies (missing
                keys start from the initial state).
            prev_action: ``{key: previous action}``; prev_reward: ``{key: reward}``.
            policy_id: the policy to act with.
            full_fetch: also return the states and extra outputs.
            explore: sample (True) or take the most likely actions (False).

        Returns:
            ``{key: action}``; ``(actions, {key: state_out}, {key: extra})`` when
            `state` is given or `full_fetch` is set.
        """
        worker = self.workers.local_worker()
        policy = self.get_policy(policy_id)
        keys = list(observations)
        prep, filt = worker.preprocessors[policy_id], worker.filters[policy_id]
        obs = filt(prep.transform_batch([observations[k] for k in keys]), update=False)
        init = policy.get_initial_state()
        states = [
            np.stack([np.asarray((state or {}).get(k, init)[i]) for k in keys])
            for i in range(len(init))
        ]
        prev_a = None if prev_action is None else np.stack([prev_action[k] for k in keys])
        prev_r = (
            None
            if prev_reward is None
            else np.asarray([prev_reward[k] for k in keys], dtype=np.float32)
        )
        actions, state_out, extra = policy.compute_actions(
            obs, states, prev_a, prev_r, explore=explore
        )
        if self.config["clip_actions"]:
            actions = np.stack([clip_action(a, policy.action_space) for a in actions])
        out = {k: actions[i] for i, k in enumerate(keys)}
        if state is None and not full_fetch:
            return out
        return (
            out,
            {k: [s[i] for s in state_out] for i, k in enumerate(keys)},
            {k: {name: v[i] for name, v in extra.items()} for i, k in enumerate(keys)},
        )

    def get_policy(self, policy_id: str = DEFAULT_POLICY_ID) -> Any:
        return self.workers.local_worker().get_policy(policy_id)

    def get_weights(self, policies: list[str] | None = None) -> dict[str, Any]:
        return self.workers.local_worker().get_weights(policies)

    def set_weights(self, weights: dict[str, Any]) -> None:
        self.workers.local_worker().set_weights(weights)
        self.workers.sync_weights()

    def export_policy_model(self, export_dir: str, policy_id: str = DEFAULT_POLICY_ID) -> None:
        self.get_policy(policy_id).export_model(export_dir)

    def export_policy_checkpoint(
        self, export_dir: str, filename_prefix: str = "model", policy_id: str = DEFAULT_POLICY_ID
    ) -> None:
        self.get_policy(policy_id).export_checkpoint(export_dir, filename_prefix)

    # -- checkpoints ----------------------------------------------------------------
    def _extra_state(self) -> dict[str, Any]:
        """Algorithm state beyond the local worker's (numbers and tensors only)."""
        return {}

    def _set_extra_state(self, state: dict[str, Any]) -> None:
        pass

    def save(self, checkpoint_dir: str | None = None) -> SaveResult:
        """Write a checkpoint (see `rayfield.rllib.agents.checkpoints`).

        The checkpoint directory is made 0700 and its files 0600 (missing directories
        above it 0700 too).

        Args:
            checkpoint_dir: parent directory (default: this trainer's log dir, made
                under ``~/ray_results`` on first use).

        Returns:
            The ``checkpoint_<N>/checkpoint-<N>`` path (also as ``.checkpoint.path``).

        Raises:
            UnsafeFileError: a directory on the way is another user's, or others can
                write it (see `rayfield.util.private_files`).
        """
        if checkpoint_dir is None:
            checkpoint_dir = self.logdir or self._default_logdir()
        algo_state = {
            "algorithm": self._name,
            "config": checkpoints.to_json_safe(self.config),
            "iteration": self._iteration,
            "timesteps_total": self._timesteps_total,
            "episodes_total": self._episodes_total,
            "steps_trained": self._steps_trained,
            "time_total_s": self._time_total,
        }
        worker_state = {"worker": self.workers.local_worker().save(), "extra": self._extra_state()}
        return SaveResult(
            checkpoints.write(Path(checkpoint_dir), self._iteration, worker_state, algo_state)
        )

    def _default_logdir(self) -> str:
        """Make this trainer's log directory, ``~/ray_results/<name>_<env>_<date>...``
        (0700), and return it (as ``self.logdir``)."""
        root = private_files.ensure_private_dir(os.path.expanduser("~/ray_results"))
        stamp = datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
        env = str(self.config["env"]).replace(os.sep, "_")
        self.logdir = tempfile.mkdtemp(prefix=f"{self._name}_{env}_{stamp}", dir=root)
        return self.logdir

    def restore(self, checkpoint_path: str) -> None:
        """Load a checkpoint written by `save` into this trainer and its workers.

        Raises:
            FileNotFoundError: `checkpoint_path` is not a checkpoint.
            UnsafeFileError: the checkpoint's directory or files are not this user's
                alone (a symlink, another user's, writable by others).
        """
        worker_state, algo_state = checkpoints.read(checkpoint_path)
        self.workers.local_worker().restore(worker_state["worker"])
        self._set_extra_state(worker_state.get("extra", {}))
        self._iteration = int(algo_state["iteration"])
        self._timesteps_total = int(algo_state["timesteps_total"])
        self._episodes_total = int(algo_state["episodes_total"])
        self._steps_trained = int(algo_state.get("steps_trained", 0))
        self._time_total = float(algo_state["time_total_s"])
        self._iterations_since_restore = 0
        self.workers.sync_weights()
        if self.config["observation_filter"] != "NoFilter":
            filters = self.workers.local_worker().get_filters()
            self.workers.foreach_worker(lambda w: w.sync_filters(filters))

    def save_checkpoint(self, checkpoint_dir: str) -> str:
        return str(self.save(checkpoint_dir))

    def load_checkpoint(self, checkpoint: Any) -> None:
        self.restore(str(checkpoint))

    _save = save_checkpoint
    _restore = load_checkpoint

    @classmethod
    def from_checkpoint(cls, checkpoint: Any, **config_overrides: Any) -> Trainer:
        """Build the algorithm a checkpoint was written by, with its config, and
        restore it. Config values that were not JSON (callback classes...) take
        their defaults unless given in `config_overrides`.

        Raises:
            FileNotFoundError: not a checkpoint.
            UnsafeFileError: the checkpoint is not this user's alone (see `restore`).
            ValueError: the checkpoint's algorithm is unknown.
        """
        from rayfield.rllib.agents.registry import get_trainer_class

        path = getattr(checkpoint, "path", checkpoint)
        _, algo_state = checkpoints.read(path)
        trainer_cls = (
            cls
            if cls._name == algo_state["algorithm"]
            else get_trainer_class(algo_state["algorithm"])
        )
        config = checkpoints.drop_unserializable(algo_state["config"])
        config.update(config_overrides)
        trainer = trainer_cls(config=config)
        trainer.restore(path)
        return trainer

    # -- teardown -------------------------------------------------------------------
    def stop(self) -> None:
        """Stop the policy optimizer, end the workers (and the local rayfield runtime if
        this trainer started it)."""
        if self.optimizer is not None:
            self.optimizer.stop()
        workers = getattr(self, "workers", None)
        if workers is not None:
            workers.stop()
        if getattr(self, "evaluation_workers", None) is not None:
            self.evaluation_workers.stop()  # type: ignore[union-attr]
        if self._owns_rayfield:
            import rayfield

            rayfield.shutdown()
            self._owns_rayfield = False

    _stop = stop
    cleanup = stop

    def reset_config(self, new_config: dict[str, Any]) -> bool:
        """Tune's contract (``TrainableProtocol``): a trainer builds its workers from its
        config, so it never takes another in place (False: Tune starts a new trainer)."""
        return False

    @property
    def iteration(self) -> int:
        return self._iteration

    def __repr__(self) -> str:
        return f"{self._name}(env={self.config['env']!r})"
