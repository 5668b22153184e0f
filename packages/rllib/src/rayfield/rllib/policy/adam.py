"""`Adam`: the default optimizer of rayfield's torch policies.

Adam as in Kingma & Ba, "Adam: A Method for Stochastic Optimization" (ICLR 2015,
Algorithm 1, with the bias corrections), computed by torch's own update function
`torch.optim.adam.adam`. This class only holds the moment estimates and the step
counts, in `torch.optim.Adam`'s layout, so a state dict moves between the two.

It exists for start-up time: each method of `torch.optim.Optimizer` (the constructor's
``add_param_group``, ``step``, ``state_dict``...) is wrapped by ``torch._disable_dynamo``,
whose first call imports ``torch._dynamo``, about a CPU-second, a third of a trainer's
start-up on a 2-core machine. The functional update does not import it. A policy's
``make_optimizer`` may still return any `torch.optim.Optimizer`; the policies only use
the members below.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch.optim.adam import adam

__all__ = ["Adam", "fused_supported"]


def fused_supported(params: list[torch.Tensor]) -> bool:
    """Whether torch's fused Adam kernel can update `params`: torch 2.4 or later (the
    first with a CPU kernel), every tensor real floating-point and on the CPU or a CUDA
    device, all on one device."""
    major, minor = (int(x) for x in torch.__version__.split(".")[:2])
    if (major, minor) < (2, 4):
        return False
    devices = {p.device for p in params}
    return (
        len(devices) == 1
        and next(iter(devices)).type in ("cpu", "cuda")
        and all(p.is_floating_point() for p in params)
    )


class Adam:
    """Adam over one group of parameters.

    Args:
        params: the tensors to optimize (``model.parameters()``); each is updated in
            place by `step` from its ``.grad``.
        lr: learning rate (step size, alpha in the paper); may be changed between steps
            through ``param_groups[0]["lr"]``.
        betas: decay rates ``(beta1, beta2)`` of the first and second moment estimates.
        eps: the constant added to the second moment's square root.
        weight_decay: L2 penalty coefficient added to the gradient.
        amsgrad: keep the maximum of the second moment estimates (Reddi et al., 2018).
        foreach: use torch's multi-tensor kernels.
        fused: use torch's fused Adam kernel (one pass over each tensor instead of about
            ten multi-tensor passes: a third of the CPU time for the 400x300 networks of
            TD3) where `fused_supported` says it exists (torch >= 2.4 on the CPU, CUDA;
            real floating-point parameters), ``foreach`` otherwise. The same update up
            to floating-point rounding.

    Raises:
        ValueError: a negative ``lr``, ``eps`` or ``weight_decay``, a beta outside
            ``[0, 1)``, or no parameters.
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
        foreach: bool = True,
        fused: bool = False,
    ) -> None:
        if lr < 0 or eps < 0 or weight_decay < 0:
            raise ValueError(
                f"Adam: lr, eps and weight_decay must be >= 0, got lr={lr}, eps={eps}, "
                f"weight_decay={weight_decay}"
            )
        if not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"Adam: each beta must be in [0, 1), got betas={betas}")
        plist = list(params)
        if not plist:
            raise ValueError("Adam: no parameters to optimize (the model has none)")
        use_fused = bool(fused) and fused_supported(plist)
        self.param_groups: list[dict[str, Any]] = [
            {
                "params": plist,
                "lr": float(lr),
                "betas": (float(betas[0]), float(betas[1])),
                "eps": float(eps),
                "weight_decay": float(weight_decay),
                "amsgrad": bool(amsgrad),
                "maximize": False,
                "foreach": bool(foreach) and not use_fused,
                "capturable": False,
                "differentiable": False,
                "fused": True if use_fused else None,
                "decoupled_weight_decay": False,
            }
        ]
        self.state: dict[torch.Tensor, dict[str, torch.Tensor]] = {}

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop (or zero) the parameters' gradients."""
        for p in self.param_groups[0]["params"]:
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                p.grad.detach_().zero_()

    def _moments(self, p: torch.Tensor) -> dict[str, torch.Tensor]:
        """``p``'s step count and moment estimates, zero before its first update."""
        state = self.state.setdefault(p, {})
        if not state:
            # the fused kernel reads the step count on the parameter's device
            where = p.device if self.param_groups[0]["fused"] else None
            state["step"] = torch.tensor(0.0, dtype=torch.float32, device=where)
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        if self.param_groups[0]["amsgrad"] and "max_exp_avg_sq" not in state:
            state["max_exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return state

    @torch.no_grad()
    def step(self) -> None:
        """One Adam update of every parameter that has a gradient.

        Raises:
            RuntimeError: a gradient is sparse (Adam needs dense gradients).
        """
        group = self.param_groups[0]
        params = [p for p in group["params"] if p.grad is not None]
        if not params:
            return
        if any(p.grad.is_sparse for p in params):
            raise RuntimeError("Adam does not support sparse gradients")
        states = [self._moments(p) for p in params]
        adam(
            params,
            [p.grad for p in params],
            [s["exp_avg"] for s in states],
            [s["exp_avg_sq"] for s in states],
            [s["max_exp_avg_sq"] for s in states] if group["amsgrad"] else [],
            [s["step"] for s in states],
            foreach=group["foreach"],
            fused=group["fused"],
            has_complex=any(torch.is_complex(p) for p in params),
            amsgrad=group["amsgrad"],
            beta1=group["betas"][0],
            beta2=group["betas"][1],
            lr=group["lr"],
            weight_decay=group["weight_decay"],
            eps=group["eps"],
            maximize=False,
        )

    def state_dict(self) -> dict[str, Any]:
        """``{"state": {index: {"step", "exp_avg", "exp_avg_sq"}}, "param_groups": [...]}``,
        the layout of `torch.optim.Adam.state_dict` (parameters by their index)."""
        group = self.param_groups[0]
        index = {id(p): i for i, p in enumerate(group["params"])}
        hyper = {k: v for k, v in group.items() if k != "params"}
        return {
            "state": {index[id(p)]: dict(s) for p, s in self.state.items()},
            "param_groups": [{**hyper, "params": list(index.values())}],
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a state dict of this class or of `torch.optim.Adam` (one parameter group).

        Raises:
            ValueError: it has another number of parameter groups or of parameters, or a
                moment whose shape differs from its parameter's.
        """
        groups = state_dict.get("param_groups") or []
        params = self.param_groups[0]["params"]
        if len(groups) != 1 or len(groups[0]["params"]) != len(params):
            raise ValueError(
                f"Adam.load_state_dict: expected one parameter group of {len(params)} "
                f"parameters, got {[len(g['params']) for g in groups]}"
            )
        by_index = dict(zip(groups[0]["params"], params))
        state: dict[torch.Tensor, dict[str, torch.Tensor]] = {}
        for i, saved in state_dict.get("state", {}).items():
            p = by_index[i]
            moments = {}
            for k, v in saved.items():
                if k != "step" and tuple(v.shape) != tuple(p.shape):
                    raise ValueError(
                        f"Adam.load_state_dict: {k} of parameter {i} has shape "
                        f"{tuple(v.shape)}, the parameter {tuple(p.shape)}"
                    )
                step_device = p.device if self.param_groups[0]["fused"] else None
                moments[k] = (
                    torch.as_tensor(v, dtype=torch.float32, device=step_device).clone()
                    if k == "step"
                    else v.to(device=p.device, dtype=p.dtype).clone()
                )
            state[p] = moments
        self.state = state
        saved_group = groups[0]
        for key in ("lr", "betas", "eps", "weight_decay", "amsgrad"):
            if key in saved_group:
                self.param_groups[0][key] = saved_group[key]
