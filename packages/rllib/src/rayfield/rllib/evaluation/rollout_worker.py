"""`RolloutWorker`: envs, a policy and a sampler in one process.

The trainer's process holds the local worker (worker_index 0), whose policy
learns; remote workers (worker_index 1..n) are rayfield actors that only sample.
Every method is plain Python, so the same class is a local object or an actor
(``rayfield.remote(RolloutWorker)``).
"""

from __future__ import annotations

import copy
import importlib
import sys
from collections.abc import Callable
from typing import Any

from rayfield.rllib.env.base_env import BaseEnv, BaseEnvSubEnv, _VectorEnvToBaseEnv
from rayfield.rllib.env.env_context import EnvContext
from rayfield.rllib.env.external_env import ExternalEnv
from rayfield.rllib.env.external_multi_agent_env import ExternalMultiAgentEnv
from rayfield.rllib.env.multi_agent_env import MultiAgentEnv
from rayfield.rllib.env.remote_vector_env import RemoteVectorEnv, remote_multi_agent_envs
from rayfield.rllib.env.vector_env import VectorEnv
from rayfield.rllib.evaluation.callbacks import make_callbacks
from rayfield.rllib.evaluation.episode import RolloutMetrics
from rayfield.rllib.models.catalog import ModelCatalog
from rayfield.rllib.models.preprocessors import Preprocessor
from rayfield.rllib.policy.sample_batch import DEFAULT_POLICY_ID, MultiAgentBatch, SampleBatch
from rayfield.rllib.utils.config import deep_update
from rayfield.rllib.utils.filter import MeanStdFilter, NoFilter, filter_from_dict, get_filter

# RolloutWorker keyword names of RLlib 0.7, mapped to config keys.
_KWARG_KEYS = {
    "batch_steps": "rollout_fragment_length",
    "batch_mode": "batch_mode",
    "episode_horizon": "horizon",
    "num_envs": "num_envs_per_worker",
    "observation_filter": "observation_filter",
    "clip_rewards": "clip_rewards",
    "clip_actions": "clip_actions",
    "env_config": "env_config",
    "model_config": "model",
    "callbacks": "callbacks",
    "seed": "seed",
}


def resolve_policy_class(policy: type | str) -> type:
    """A policy class, or the class a dotted path ``"package.module.Class"`` names
    (imported here, so a trainer can name a torch policy without importing torch).

    Raises:
        ImportError: the path's module does not import.
        AttributeError: the module has no such class.
    """
    if isinstance(policy, str):
        module, _, name = policy.rpartition(".")
        return getattr(importlib.import_module(module), name)
    return policy


def policy_default_config(cls: type) -> dict[str, Any]:
    """The default config of the algorithm a policy class belongs to: its
    ``default_config`` attribute, else the ``DEFAULT_CONFIG`` of its module or of the
    package above it (``rayfield.rllib.agents.ppo`` for ``ppo_torch_policy``), else {}."""
    own = getattr(cls, "default_config", None)
    if isinstance(own, dict):
        return own
    module = cls.__module__
    for name in (module, module.rpartition(".")[0]):
        if not name:
            continue
        try:
            mod = sys.modules.get(name) or importlib.import_module(name)
        except ImportError:
            continue
        found = getattr(mod, "DEFAULT_CONFIG", None)
        if isinstance(found, dict):
            return found
    return {}


class _IndexedCreator:
    """``make_env(index)`` for remote sub-envs: the creator with the vector index set."""

    def __init__(self, env_creator: Callable[[Any], Any], ctx: EnvContext) -> None:
        self.env_creator = env_creator
        self.ctx = ctx

    def __call__(self, index: int) -> Any:
        return self.env_creator(self.ctx.copy_with_overrides(vector_index=index))


class _DeepMindCreator:
    """The env creator with Atari games wrapped by `wrap_deepmind` (the
    ``preprocessor_pref: "deepmind"`` rule); `wrapped_atari` says whether it did."""

    def __init__(self, env_creator: Callable[[Any], Any], model: dict[str, Any]) -> None:
        self.env_creator = env_creator
        self.dim = int(model.get("dim", 84))
        self.framestack = bool(model.get("framestack", True))
        self.wrapped_atari = False

    def __call__(self, ctx: Any) -> Any:
        from rayfield.rllib.env.atari_wrappers import is_atari, wrap_deepmind

        env = self.env_creator(ctx)
        if is_atari(env):
            self.wrapped_atari = True
            return wrap_deepmind(env, self.dim, self.framestack)
        return env


class RolloutWorker:
    """Samples experience with a policy in ``num_envs_per_worker`` envs.

    Args:
        env_creator: ``f(EnvContext) -> gymnasium.Env``.
        policy: the policy class, built with ``(obs_space, action_space, config)``, or its
            dotted path (see `resolve_policy_class`).
        config: the trainer config (``rollout_fragment_length``, ``batch_mode``,
            ``num_envs_per_worker``, ``horizon``, ``observation_filter``, ``seed``...).
        worker_index: 0 for the local worker, 1..num_workers for remote ones.
        num_workers: how many remote workers the set has.
        custom_registry: `ModelCatalog.snapshot()` from the driver.
        log_dir: the trainer's log directory (where ``output: "logdir"`` writes).
        **kwargs: RLlib 0.7 keyword names (``batch_steps``, ``num_envs``,
            ``policy_config``...), which override config keys.

    Raises:
        ValueError: bad batch mode, fragment length or observation filter.
    """

    def __init__(
        self,
        env_creator: Callable[[Any], Any],
        policy: type | str,
        config: dict[str, Any] | None = None,
        worker_index: int = 0,
        num_workers: int = 0,
        custom_registry: dict[str, Any] | None = None,
        log_dir: str = "",
        **kwargs: Any,
    ) -> None:
        from rayfield.rllib.evaluation.external_sampler import ExternalEnvSampler
        from rayfield.rllib.evaluation.multi_agent_sampler import MultiAgentSampler
        from rayfield.rllib.evaluation.sampler import SyncSampler
        from rayfield.rllib.evaluation.sampler_base import SamplerSettings

        policy = resolve_policy_class(policy)
        config = copy.deepcopy(config or {})
        config.update(kwargs.pop("policy_config", None) or {})
        for name, key in _KWARG_KEYS.items():
            if name in kwargs:
                config[key] = kwargs.pop(name)
        if kwargs:
            raise TypeError(f"RolloutWorker got unexpected arguments: {sorted(kwargs)}")
        config["worker_index"] = worker_index
        if worker_index > 0:
            import torch

            torch.set_num_threads(1)
        ModelCatalog.restore(custom_registry)
        self.config = config
        self.worker_index = worker_index
        self.num_workers = num_workers
        self.env_creator = env_creator
        num_envs = int(config.get("num_envs_per_worker", 1))
        if num_envs < 1:
            raise ValueError(f"num_envs_per_worker must be >= 1, got {num_envs}")
        if config.get("preprocessor_pref", "deepmind") == "deepmind":
            env_creator = _DeepMindCreator(env_creator, config.get("model") or {})
        ctx = EnvContext(config.get("env_config"), worker_index, 0, False, num_workers)
        first = env_creator(ctx.copy_with_overrides(vector_index=0))
        if config.get("clip_rewards") is None and getattr(env_creator, "wrapped_atari", False):
            config["clip_rewards"] = True  # None: clip Atari rewards to their sign
        self.vector_env: VectorEnv | None = None
        self.base_env: BaseEnv | None = None
        self.external_env: ExternalEnv | None = None
        # by policy id (set by _build_policies, or below for a single policy)
        self.policy_map: dict[str, Any]
        self.preprocessors: dict[str, Preprocessor]
        self.filters: dict[str, NoFilter | MeanStdFilter]
        if isinstance(first, _VectorEnvToBaseEnv):
            first = first.vector_env
        if isinstance(first, BaseEnv):  # sampled one sub-env at a time (see base_env.py)
            self.base_env = first
            pending: dict[Any, tuple] = {}
            self.envs: list[Any] = [BaseEnvSubEnv(first, i, pending) for i in range(first.num_envs)]
            self.env: Any = self.envs[0]
        elif isinstance(first, ExternalEnv):  # drives itself from its own thread
            self.external_env = first
            self.envs = [first]
            self.env = first
        elif isinstance(first, VectorEnv):  # already vectorised: its sub-envs are the envs
            self.vector_env = first
            self.envs = first.get_sub_environments()
            self.env = first
        elif config.get("remote_worker_envs"):  # each env in its own actor
            close = getattr(first, "close", None)
            if close is not None:
                close()
            remote_ctx = EnvContext(config.get("env_config"), worker_index, 0, True, num_workers)
            make = _IndexedCreator(env_creator, remote_ctx)
            if isinstance(first, MultiAgentEnv):  # proxies the multi-agent sampler steps
                self.envs = list(remote_multi_agent_envs(make, num_envs))
                self.env = self.envs[0]
            else:
                wait_ms = int(config.get("remote_env_batch_wait_ms", 0))
                self.vector_env = RemoteVectorEnv(make, num_envs, wait_ms)
                self.envs = []
                self.env = self.vector_env
        else:
            self.envs = [first] + [
                env_creator(ctx.copy_with_overrides(vector_index=i)) for i in range(1, num_envs)
            ]
            self.env = self.envs[0]
        self.callbacks = make_callbacks(config.get("callbacks"))
        settings = SamplerSettings.from_config(config, worker_index)
        multiagent = config.get("multiagent") or {}
        self.multiagent = isinstance(self.env, (MultiAgentEnv, ExternalMultiAgentEnv)) or bool(
            multiagent.get("policies")
        )
        if self.multiagent and self.external_env is not None and not self.external_env._multiagent:
            raise NotImplementedError(
                "an ExternalEnv is sampled with one policy: for multiagent.policies subclass "
                "ExternalMultiAgentEnv"
            )
        if self.multiagent:
            self._build_policies(policy, config, multiagent)
            mapping = multiagent.get("policy_mapping_fn") or (lambda agent_id: DEFAULT_POLICY_ID)
            source: Any = self.envs if self.external_env is None else self.external_env
            sampler_cls = MultiAgentSampler if self.external_env is None else ExternalEnvSampler
            self.sampler: Any = sampler_cls(
                source,
                self.policy_map,
                mapping,
                self.preprocessors,
                self.filters,
                self.callbacks,
                settings,
                self,
            )
            self.policy = self.policy_map.get(DEFAULT_POLICY_ID) or next(
                iter(self.policy_map.values())
            )
            self.preprocessor = self.preprocessors[next(iter(self.policy_map))]
            self._init_io(log_dir)
            return
        model_cfg = config.get("model") or {}
        self.preprocessor = ModelCatalog.get_preprocessor_for_space(
            self.env.observation_space, model_cfg
        )
        self.preprocessors = {DEFAULT_POLICY_ID: self.preprocessor}
        obs_space = self.preprocessor.observation_space
        self.filters = {
            DEFAULT_POLICY_ID: get_filter(
                config.get("observation_filter", "NoFilter"), obs_space.shape
            )
        }
        self.policy = policy(obs_space, self.env.action_space, config)
        self.policy_map = {DEFAULT_POLICY_ID: self.policy}
        self.policies_to_train = [DEFAULT_POLICY_ID]
        if self.external_env is not None:
            self.sampler = ExternalEnvSampler(
                self.external_env,
                self.policy_map,
                None,
                self.preprocessors,
                self.filters,
                self.callbacks,
                settings,
                self,
            )
            self._init_io(log_dir)
            return
        self.sampler = SyncSampler(
            self.vector_env or self.envs,
            self.policy,
            self.preprocessor,
            self.filters[DEFAULT_POLICY_ID],
            self.callbacks,
            settings,
            self,
        )
        self._init_io(log_dir)

    def _init_io(self, log_dir: str) -> None:
        """The offline I/O of ``input``, ``output`` and ``input_evaluation`` (see
        `rayfield.rllib.offline.worker_io`)."""
        from rayfield.rllib.offline import worker_io
        from rayfield.rllib.offline.io_context import IOContext

        self.global_vars: dict[str, Any] = {}  # the last set_global_vars
        self.io_context = IOContext(log_dir, self.config, self.worker_index, self)
        self.input_reader = worker_io.make_worker_input(self.config, self.io_context)
        self.output_writer = worker_io.make_output_writer(self.config, self.io_context)
        self.reward_estimators = (
            [] if self.multiagent else worker_io.make_estimators(self.config, self.policy)
        )
        offline = not worker_io.is_sampler_input(self.config.get("input", "sampler"))
        self._simulate = offline and worker_io.estimator_specs(self.config)[1]

    def _build_policies(
        self, default_cls: type, config: dict[str, Any], multiagent: dict[str, Any]
    ) -> None:
        """The policy map of ``multiagent.policies``: ``{pid: (cls or None, obs_space
        or None, act_space or None, config overrides)}``, or a collection of ids
        (spaces from the env; default policy class and config)."""
        specs = multiagent.get("policies") or {DEFAULT_POLICY_ID: (None, None, None, {})}
        if not isinstance(specs, dict):
            specs = {pid: (None, None, None, {}) for pid in specs}
        self.policy_map, self.preprocessors, self.filters = {}, {}, {}
        for pid, spec in specs.items():
            if not isinstance(spec, (tuple, list)) or len(spec) != 4:
                raise ValueError(
                    f"multiagent.policies[{pid!r}] must be (policy_cls or None, obs_space, "
                    f"action_space, config), got {spec!r}"
                )
            cls, obs_space, act_space, overrides = spec
            obs_space = obs_space if obs_space is not None else self.env.observation_space
            act_space = act_space if act_space is not None else self.env.action_space
            if obs_space is None or act_space is None:
                raise ValueError(
                    f"multiagent.policies[{pid!r}] gives no observation or action space and "
                    "the env has none: give them in the policy's tuple"
                )
            pconf = deep_update(copy.deepcopy(config), copy.deepcopy(overrides or {}), True)
            if cls is not None and cls is not default_cls:
                # another algorithm's policy: its own defaults fill the keys this trainer's
                # config lacks (e.g. DQN's n_step in a PPO trainer), as RLlib's policies'
                # get_default_config did
                pconf = {**copy.deepcopy(policy_default_config(cls)), **pconf}
            prep = ModelCatalog.get_preprocessor_for_space(obs_space, pconf.get("model") or {})
            self.preprocessors[pid] = prep
            self.filters[pid] = get_filter(
                pconf.get("observation_filter", "NoFilter"), prep.observation_space.shape
            )
            self.policy_map[pid] = (cls or default_cls)(prep.observation_space, act_space, pconf)
        train = multiagent.get("policies_to_train")
        unknown = set(train or []) - set(self.policy_map)
        if unknown:
            raise ValueError(
                f"multiagent.policies_to_train names {sorted(unknown)}, which are not in "
                f"multiagent.policies {sorted(self.policy_map)}"
            )
        self.policies_to_train = list(train) if train is not None else list(self.policy_map)

    # -- sampling -----------------------------------------------------------------
    def sample(self) -> SampleBatch:
        """One batch from the worker's ``input``: from the sampler,
        ``rollout_fragment_length * num_envs_per_worker`` steps (or more, of whole
        episodes, in ``complete_episodes`` mode); from files, the next batch read.

        Offline batches are also estimated by the off-policy estimators (episode by
        episode) and, with ``input_evaluation: ["simulation"]``, the sampler runs once
        more for the episode metrics only. Every batch returned is written to
        ``output``.
        """
        batch = self.input_reader.next()
        if self._simulate:
            self.sampler.sample()
        if isinstance(batch, SampleBatch):
            for estimator in self.reward_estimators:
                estimator.process(batch)
        self.output_writer.write(batch)
        return batch

    def sample_with_count(self) -> tuple[SampleBatch, int]:
        batch = self.sample()
        return batch, batch.count

    def sample_and_metrics(self) -> tuple[SampleBatch, list[RolloutMetrics]]:
        """A batch and the episodes finished while sampling it (one round trip)."""
        batch = self.sample()
        return batch, self.get_metrics()

    def sample_and_compute_gradients(self) -> tuple[Any, dict[str, Any], int, list[RolloutMetrics]]:
        """Sample a batch and compute the policy's gradients on it (A3C):
        ``(gradients, loss stats, env steps, finished episodes)``."""
        batch = self.sample()
        grads, info = self.compute_gradients(batch)
        return grads, info, batch.count, self.get_metrics()

    def get_metrics(self) -> list[Any]:
        """The `RolloutMetrics` of the episodes finished since the last call, followed
        by the `OffPolicyEstimate` s of the episodes read since then."""
        out: list[Any] = list(self.sampler.get_metrics())
        out.extend(self.input_reader.get_metrics())
        for estimator in self.reward_estimators:
            out.extend(estimator.get_metrics())
        return out

    # -- learning -----------------------------------------------------------------
    def learn_on_batch(self, samples: Any) -> dict[str, Any]:
        """Learn on a batch; a `MultiAgentBatch` trains each policy of
        ``policies_to_train`` on its own rows. Returns ``{policy_id: stats}``."""
        if isinstance(samples, MultiAgentBatch):
            return {
                pid: self.policy_map[pid].learn_on_batch(batch)
                for pid, batch in samples.policy_batches.items()
                if pid in self.policies_to_train and batch.count > 0
            }
        return {DEFAULT_POLICY_ID: self.policy.learn_on_batch(samples)}

    def compute_gradients(self, samples: Any) -> tuple[Any, dict[str, Any]]:
        """Gradients of the policy on a batch: the policy's ``(gradients, stats)``;
        for a `MultiAgentBatch`, ``({policy_id: gradients}, {policy_id: stats})`` over
        the policies of ``policies_to_train`` that have rows in it."""
        if isinstance(samples, MultiAgentBatch):
            grads: dict[str, Any] = {}
            infos: dict[str, Any] = {}
            for pid, batch in samples.policy_batches.items():
                if pid in self.policies_to_train and batch.count > 0:
                    grads[pid], infos[pid] = self.policy_map[pid].compute_gradients(batch)
            return grads, infos
        return self.policy.compute_gradients(samples)

    def apply_gradients(self, grads: Any) -> None:
        """Apply gradients from `compute_gradients` (a dict: per policy)."""
        if isinstance(grads, dict):
            for pid, g in grads.items():
                self.policy_map[pid].apply_gradients(g)
            return
        self.policy.apply_gradients(grads)

    def get_weights(self, policies: list[str] | None = None) -> dict[str, Any]:
        return {
            pid: p.get_weights()
            for pid, p in self.policy_map.items()
            if policies is None or pid in policies
        }

    def set_weights(
        self, weights: dict[str, Any], global_vars: dict[str, Any] | None = None
    ) -> None:
        for pid, w in weights.items():
            if pid in self.policy_map:
                self.policy_map[pid].set_weights(w)
        if global_vars:
            self.set_global_vars(global_vars)

    def set_global_vars(self, global_vars: dict[str, Any]) -> None:
        self.global_vars = dict(global_vars)
        for p in self.policy_map.values():
            p.on_global_var_update(global_vars)

    # -- policies and envs ----------------------------------------------------------
    def get_policy(self, policy_id: str = DEFAULT_POLICY_ID) -> Any:
        return self.policy_map.get(policy_id)

    def for_policy(self, func: Callable[..., Any], policy_id: str = DEFAULT_POLICY_ID) -> Any:
        return func(self.policy_map[policy_id])

    def foreach_policy(self, func: Callable[..., Any]) -> list[Any]:
        return [func(p, pid) for pid, p in self.policy_map.items()]

    def foreach_trainable_policy(self, func: Callable[..., Any]) -> list[Any]:
        return [func(self.policy_map[pid], pid) for pid in self.policies_to_train]

    def foreach_env(self, func: Callable[[Any], Any]) -> list[Any]:
        return [func(env) for env in self.envs]

    def apply(self, func: Callable[..., Any], *args: Any) -> Any:
        return func(self, *args)

    # -- filters ------------------------------------------------------------------
    def get_filters(self, flush_after: bool = False) -> dict[str, Any]:
        out = {k: f.as_serializable() for k, f in self.filters.items()}
        if flush_after:
            for f in self.filters.values():
                f.clear_buffer()
        return out

    def sync_filters(self, new_filters: dict[str, Any]) -> None:
        """Take the merged filters from the driver; the changes they include are not
        reported again."""
        for k, f in new_filters.items():
            self.filters[k].sync(f)
            self.filters[k].clear_buffer()

    # -- checkpoints ----------------------------------------------------------------
    def save(self) -> dict[str, Any]:
        """Policy state (tensors) and filter state (lists): no pickled objects."""
        out: dict[str, Any] = {"filters": {k: f.to_dict() for k, f in self.filters.items()}}
        if self.multiagent:
            out["policies"] = {pid: p.get_state() for pid, p in self.policy_map.items()}
        else:
            out["policy"] = self.policy.get_state()
        return out

    def restore(self, state: dict[str, Any]) -> None:
        if "policies" in state:
            for pid, pstate in state["policies"].items():
                if pid in self.policy_map:
                    self.policy_map[pid].set_state(pstate)
        else:
            self.policy.set_state(state["policy"])
        for k, d in state.get("filters", {}).items():
            if k in self.filters:
                self.filters[k].sync(filter_from_dict(d))  # type: ignore[arg-type]

    def ping(self) -> bool:
        return True

    def stop(self) -> None:
        """Close the input reader, the output writer and the envs."""
        self.input_reader.close()
        self.output_writer.close()
        if self.external_env is not None:
            self.external_env.stop()
            return
        if self.base_env is not None:
            self.base_env.stop()
            return
        if self.vector_env is not None:
            self.vector_env.close()
            return
        for env in self.envs:
            close = getattr(env, "close", None)
            if close is not None:
                close()

    def __repr__(self) -> str:
        return f"RolloutWorker(worker_index={self.worker_index}, num_envs={len(self.envs)})"
