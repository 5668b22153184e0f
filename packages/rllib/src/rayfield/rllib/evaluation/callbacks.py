"""Callbacks: user code run at points of sampling and training.

Subclass `DefaultCallbacks` (Ray 2 style) or give the 0.7-style dict of functions
``{"on_episode_end": fn(info), ...}``; `make_callbacks` turns either into a
`DefaultCallbacks` object. The sampler calls only the hooks a user overrode.
"""

from __future__ import annotations

from typing import Any


class DefaultCallbacks:
    """No-op callbacks; override the hooks you need."""

    def on_episode_start(
        self, *, worker: Any, base_env: Any, policies: Any, episode: Any, **kw: Any
    ) -> None:
        pass

    def on_episode_step(self, *, worker: Any, base_env: Any, episode: Any, **kw: Any) -> None:
        pass

    def on_episode_end(
        self, *, worker: Any, base_env: Any, policies: Any, episode: Any, **kw: Any
    ) -> None:
        pass

    def on_postprocess_trajectory(
        self,
        *,
        worker: Any,
        episode: Any,
        agent_id: Any,
        policy_id: Any,
        policies: Any,
        postprocessed_batch: Any,
        original_batches: Any,
        **kw: Any,
    ) -> None:
        pass

    def on_sample_end(self, *, worker: Any, samples: Any, **kw: Any) -> None:
        pass

    def on_train_result(
        self, *, trainer: Any = None, algorithm: Any = None, result: dict[str, Any], **kw: Any
    ) -> None:
        pass

    def overrides(self, name: str) -> bool:
        """Whether this object's class overrides hook `name`."""
        return getattr(type(self), name) is not getattr(DefaultCallbacks, name)


class _LegacyCallbacks(DefaultCallbacks):
    """The 0.7 dict of functions, each called with one info dict."""

    _NAMES = {
        "on_episode_start",
        "on_episode_step",
        "on_episode_end",
        "on_sample_end",
        "on_train_result",
        "on_postprocess_traj",
    }

    def __init__(self, fns: dict[str, Any]) -> None:
        unknown = set(fns) - self._NAMES
        if unknown:
            raise ValueError(f"unknown callbacks {sorted(unknown)}; valid: {sorted(self._NAMES)}")
        self.fns = {k: v for k, v in fns.items() if v is not None}

    def overrides(self, name: str) -> bool:
        return ("on_postprocess_traj" if name == "on_postprocess_trajectory" else name) in self.fns

    def on_episode_start(
        self, *, worker: Any, base_env: Any, policies: Any, episode: Any, **kw: Any
    ) -> None:
        self.fns["on_episode_start"]({"env": base_env, "episode": episode, "policy": policies})

    def on_episode_step(self, *, worker: Any, base_env: Any, episode: Any, **kw: Any) -> None:
        self.fns["on_episode_step"]({"env": base_env, "episode": episode})

    def on_episode_end(
        self, *, worker: Any, base_env: Any, policies: Any, episode: Any, **kw: Any
    ) -> None:
        self.fns["on_episode_end"]({"env": base_env, "episode": episode, "policy": policies})

    def on_postprocess_trajectory(
        self,
        *,
        worker: Any,
        episode: Any,
        agent_id: Any,
        policy_id: Any,
        policies: Any,
        postprocessed_batch: Any,
        original_batches: Any,
        **kw: Any,
    ) -> None:
        self.fns["on_postprocess_traj"](
            {
                "agent_id": agent_id,
                "episode": episode,
                "pre_batch": original_batches.get(agent_id),
                "post_batch": postprocessed_batch,
                "all_pre_batches": original_batches,
            }
        )

    def on_sample_end(self, *, worker: Any, samples: Any, **kw: Any) -> None:
        self.fns["on_sample_end"]({"samples": samples, "worker": worker})

    def on_train_result(
        self, *, trainer: Any = None, algorithm: Any = None, result: dict[str, Any], **kw: Any
    ) -> None:
        self.fns["on_train_result"]({"trainer": trainer or algorithm, "result": result})


def make_callbacks(spec: Any) -> DefaultCallbacks:
    """A callbacks object from a `DefaultCallbacks` subclass, an instance, a dict of
    functions or None.

    Raises:
        TypeError: `spec` is none of these.
    """
    if spec is None or spec == {}:
        return DefaultCallbacks()
    if isinstance(spec, dict):
        return _LegacyCallbacks(spec)
    if isinstance(spec, type) and issubclass(spec, DefaultCallbacks):
        return spec()
    if isinstance(spec, DefaultCallbacks):
        return spec
    raise TypeError(
        f"callbacks must be a DefaultCallbacks subclass or a dict of functions, got {spec!r}"
    )
