"""`ExternalMultiAgentEnv`: an externally driven env with several agents.

The multi-agent form of `ExternalEnv`: `run` executes in its own thread and, per
episode, passes dicts keyed by agent id where `ExternalEnv` passes single values:

1. ``episode_id = start_episode()``;
2. ``actions = get_action(episode_id, {agent_id: obs})`` returns ``{agent_id:
   action}`` for exactly the agents in the dict (each agent's policy, from
   ``multiagent.policy_mapping_fn``, picks its action; the agents of one policy go
   through one batched forward pass), or ``log_action(episode_id, {agent_id: obs},
   {agent_id: action})`` when the env chose the actions itself (it blocks until
   the sampler has taken the step, as for `ExternalEnv`);
3. ``log_returns(episode_id, {agent_id: reward}, {agent_id: info})`` (several calls
   add up per agent);
4. repeat 2-3, then ``end_episode(episode_id, {agent_id: obs})``.

Agents need not observe at every step (turn-based games): an agent's step lasts
from its observation to its next one, and the rewards logged for it in between
(whatever other agents did meanwhile) are that step's reward. `end_episode` ends
every agent's last step in a terminal state, with the agent's observation from
its dict (or, for an agent missing there, its last one). An env step is one
`get_action` / `log_action` call (or the final `end_episode`) that completes at
least one agent's step; `MultiAgentBatch.count` counts those.

Sources:
    RLlib 0.7, ``ray.rllib.env.ExternalMultiAgentEnv`` (the same calls with dicts).
"""

from __future__ import annotations

from typing import Any

from rayfield.rllib.env.external_env import ExternalEnv


def _check_dict(name: str, value: Any) -> dict[Any, Any]:
    if not isinstance(value, dict):
        raise TypeError(
            f"an ExternalMultiAgentEnv's {name} is a dict keyed by agent id, got "
            f"{type(value).__name__}: use ExternalEnv for a single agent"
        )
    return value


class ExternalMultiAgentEnv(ExternalEnv):
    """Base class of externally driven multi-agent envs: override `run`.

    Args:
        action_space: the action space of every agent, or None when each policy in
            ``multiagent.policies`` names its own.
        observation_space: the observation space of every agent, or None (likewise).
        max_concurrent: the most episodes running at once.

    Example:
        >>> class TwoPlayers(ExternalMultiAgentEnv):
        ...     def run(self):
        ...         while True:
        ...             eid = self.start_episode()
        ...             obs = {"a": 0, "b": 1}
        ...             for _ in range(10):
        ...                 actions = self.get_action(eid, obs)
        ...                 self.log_returns(eid, {"a": float(actions["a"] == 0)})
        ...             self.end_episode(eid, obs)
    """

    _multiagent = True

    def get_action(self, episode_id: str, observation_dict: dict[Any, Any]) -> dict[Any, Any]:
        """The policies' actions ``{agent_id: action}`` for the agents of
        `observation_dict` (raw observations by agent id); blocks until the sampler
        computed them.

        Raises:
            TypeError: `observation_dict` is not a dict.
            KeyError: no running episode has this id.
            ExternalEnvStopped: the env was stopped (also while waiting).
        """
        actions: dict[Any, Any] = super().get_action(
            episode_id, dict(_check_dict("observation", observation_dict))
        )
        return actions

    def log_action(
        self, episode_id: str, observation_dict: dict[Any, Any], action_dict: dict[Any, Any]
    ) -> None:
        """Record that the agents of `observation_dict` took the actions of
        `action_dict` (off-policy); blocks until the sampler has taken the step.

        Raises:
            TypeError: either argument is not a dict.
            ValueError: the two dicts name different agents.
            KeyError: no running episode has this id.
            ExternalEnvStopped: the env was stopped (also while waiting).
        """
        obs = _check_dict("observation", observation_dict)
        actions = _check_dict("action", action_dict)
        if set(obs) != set(actions):
            raise ValueError(
                f"log_action needs one action per observing agent: observations for "
                f"{sorted(map(str, obs))}, actions for {sorted(map(str, actions))}"
            )
        super().log_action(episode_id, dict(obs), dict(actions))

    def log_returns(
        self,
        episode_id: str,
        reward_dict: float | dict[Any, float],
        info_dict: dict[Any, Any] | None = None,
    ) -> None:
        """Add each agent's reward to its current step (see the module docstring).

        Raises:
            TypeError: `reward_dict` is not a dict.
            KeyError: no running episode has this id.
        """
        rewards = _check_dict("reward", reward_dict)
        ep = self._episode(episode_id)
        for agent_id, reward in rewards.items():
            ep.reward[agent_id] = ep.reward.get(agent_id, 0.0) + float(reward)
        if info_dict:
            ep.info = dict(info_dict)

    def end_episode(self, episode_id: str, observation_dict: dict[Any, Any]) -> None:
        """End the episode in a terminal state for every agent, with the agents'
        last observations.

        Raises:
            TypeError: `observation_dict` is not a dict.
            KeyError: no running episode has this id.
            ExternalEnvStopped: the env was stopped.
        """
        super().end_episode(episode_id, dict(_check_dict("observation", observation_dict)))
