"""QMIX's networks: the recurrent agent network shared by the agents of a group and
the two mixers that join the agents' chosen Q-values into the team's ``Q_tot``.

Sources:
    Rashid, Samvelyan, Schroeder de Witt, Farquhar, Foerster, Whiteson, "QMIX: Monotonic
    Value Function Factorisation for Deep Multi-Agent Reinforcement Learning", ICML 2018
    (`QMixer`: hypernetworks conditioned on the global state emit the mixing network's
    weights, kept non-negative by an absolute value, so ``Q_tot`` is monotonic in every
    agent's Q; the first layer's bias by a linear hypernetwork, the last bias ``V(s)``
    by a two-layer one with a ReLU; ELU between the two mixing layers).
    Sunehag et al., "Value-Decomposition Networks For Cooperative Multi-Agent Learning",
    AAMAS 2018 (arXiv 2017) (`VDNMixer`: ``Q_tot`` is the sum of the agents' Qs).
"""

from __future__ import annotations

import torch
from torch import nn


class RNNAgent(nn.Module):
    """The agent network of the QMIX paper: a linear layer with ReLU, a GRU cell, and a
    linear layer to one Q-value per action. All agents of a group share it.

    Args:
        obs_dim: size of one agent's (flattened) observation.
        n_actions: actions of one agent.
        hidden: the GRU's state size (``model.lstm_cell_size`` in the config).
    """

    def __init__(self, obs_dim: int, n_actions: int, hidden: int) -> None:
        super().__init__()
        self.hidden = int(hidden)
        self.fc1 = nn.Linear(obs_dim, self.hidden)
        self.rnn = nn.GRUCell(self.hidden, self.hidden)
        self.fc2 = nn.Linear(self.hidden, n_actions)

    def forward(self, obs: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``obs`` float32[N, obs_dim] and ``h`` float32[N, hidden] -> (Q-values
        float32[N, n_actions], the next state float32[N, hidden])."""
        h = self.rnn(torch.relu(self.fc1(obs)), h)
        return self.fc2(h), h


class VDNMixer(nn.Module):
    """``Q_tot = sum_i Q_i`` (Sunehag et al.)."""

    def forward(self, agent_qs: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
        """``agent_qs`` float32[..., n_agents] (``states`` unused) -> float32[..., 1]."""
        return agent_qs.sum(dim=-1, keepdim=True)


class QMixer(nn.Module):
    """The monotonic mixing network of QMIX, its weights made by hypernetworks of the
    global state.

    Args:
        n_agents: agents in the group.
        state_dim: size of the global state.
        embed_dim: width of the mixing network (``mixing_embed_dim``).
    """

    def __init__(self, n_agents: int, state_dim: int, embed_dim: int) -> None:
        super().__init__()
        self.n_agents = int(n_agents)
        self.embed_dim = int(embed_dim)
        self.hyper_w_1 = nn.Linear(state_dim, self.embed_dim * self.n_agents)
        self.hyper_b_1 = nn.Linear(state_dim, self.embed_dim)
        self.hyper_w_final = nn.Linear(state_dim, self.embed_dim)
        self.hyper_b_final = nn.Sequential(
            nn.Linear(state_dim, self.embed_dim), nn.ReLU(), nn.Linear(self.embed_dim, 1)
        )

    def forward(self, agent_qs: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
        """``agent_qs`` float32[..., n_agents] and ``states`` float32[..., state_dim] (the
        same leading dimensions) -> ``Q_tot`` float32[..., 1]."""
        lead = agent_qs.shape[:-1]
        qs = agent_qs.reshape(-1, 1, self.n_agents)
        s = states.reshape(qs.shape[0], -1)
        w1 = self.hyper_w_1(s).abs().view(-1, self.n_agents, self.embed_dim)
        b1 = self.hyper_b_1(s).view(-1, 1, self.embed_dim)
        hidden = nn.functional.elu(torch.bmm(qs, w1) + b1)
        w_final = self.hyper_w_final(s).abs().view(-1, self.embed_dim, 1)
        v = self.hyper_b_final(s).view(-1, 1, 1)
        return (torch.bmm(hidden, w_final) + v).view(*lead, 1)


class QMixModel(nn.Module):
    """The learned parts of a QMIX policy: the shared `RNNAgent` and the mixer (None
    for independent Q-learning). ``get_initial_state`` gives the group's recurrent
    state, one GRU state per agent: ``[float32[n_agents, hidden]]``."""

    def __init__(self, agent: RNNAgent, mixer: nn.Module | None, n_agents: int) -> None:
        super().__init__()
        self.agent = agent
        self.mixer = mixer
        self.n_agents = int(n_agents)

    def get_initial_state(self) -> list[torch.Tensor]:
        return [torch.zeros(self.n_agents, self.agent.hidden)]
