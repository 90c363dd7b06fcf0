"""torch's fused Adam kernel (``torch._fused_adam_``, what ``torch.optim.Adam(fused=True)``
runs) behind the verbs PPO uses, without ``torch.optim.Optimizer``.

``Optimizer``'s ``add_param_group`` (called by its constructor), ``zero_grad`` and state-dict
methods are wrapped in ``torch._disable_dynamo`` and its ``step`` in a wrapper that imports
``torch._dynamo``: the compiler, with sympy, is imported on the first call. On the H200,
``import torch, torch._dynamo`` took 6.9 s against 2.9 s for ``import torch``, and a fused
CartPole process's ``startup.build_s`` (summary.json) was 3.4-3.8 s with torch.optim.Adam
(docs/benchmarks/startup_before_fusedadam_h200.json) against 0.007 s with this class
(startup_h200.json); a Jetson's cores are slower. A run without ``train.compile`` never uses
the compiler. The update is torch's own kernel and the state dict is ``torch.optim.Adam``'s
layout, so checkpoints load into either.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import torch

BETAS = (0.9, 0.999)


class FusedAdam:
    """Adam (no weight decay, no amsgrad) over one parameter group, stepped by
    ``torch._fused_adam_``; ``lr`` a float or a device tensor (capturable: a CUDA graph
    replays the step with the tensor's current value)."""

    _step_supports_amp_scaling = False  # GradScaler: only used with fp16 off (PPO picks)

    def __init__(self, params: Any, lr: float | torch.Tensor, eps: float,
                 capturable: bool = False):  # fmt: skip
        params = list(params)
        if not params:
            raise ValueError("optimizer got an empty parameter list")
        self.param_groups: list[dict[str, Any]] = [{
            "params": params, "lr": lr, "betas": BETAS, "eps": eps, "weight_decay": 0,
            "amsgrad": False, "maximize": False, "foreach": None, "capturable": capturable,
            "differentiable": False, "fused": True, "decoupled_weight_decay": False,
        }]  # fmt: skip
        # torch's type: a state written by key (the fused kernels' moments) needs no set-up
        self.state: defaultdict[torch.Tensor, dict[str, Any]] = defaultdict(dict)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.param_groups[0]["params"]:
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                p.grad.detach_()
                p.grad.zero_()

    @torch.no_grad()
    def init_state(self) -> None:
        """Create now the state the first ``step`` would create (torch's lazy init): a CUDA
        graph that captured the creation would zero the moments at every replay."""
        for p in self.param_groups[0]["params"]:
            if not self.state.get(p):
                self.state[p] = self._fresh_state(p)

    @staticmethod
    def _fresh_state(p: torch.Tensor) -> dict[str, torch.Tensor]:
        """torch's lazy init: a float32 step count on the parameter's device, zero moments."""
        return {
            "step": torch.zeros((), dtype=torch.float32, device=p.device),
            "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
            "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format),
        }

    @torch.no_grad()
    def step(self) -> None:
        group = self.param_groups[0]
        params, grads, m1, m2, steps = [], [], [], [], []
        for p in group["params"]:
            if p.grad is None:
                continue
            state = self.state.get(p)
            if not state:
                state = self.state[p] = self._fresh_state(p)
            elif state["step"].device != p.device:  # a count set by hand on the host
                state["step"] = state["step"].to(p.device, torch.float32)
            params.append(p)
            grads.append(p.grad)
            m1.append(state["exp_avg"])
            m2.append(state["exp_avg_sq"])
            steps.append(state["step"])
        if not params:
            return
        lr = group["lr"]
        if isinstance(lr, torch.Tensor) and lr.device != params[0].device:
            lr = lr.to(params[0].device, non_blocking=True)
        torch._foreach_add_(steps, 1)
        beta1, beta2 = group["betas"]
        torch._fused_adam_(params, grads, m1, m2, [], steps, amsgrad=False, lr=lr,
                           beta1=beta1, beta2=beta2, weight_decay=0.0, eps=group["eps"],
                           maximize=False, grad_scale=None, found_inf=None)  # fmt: skip

    def state_dict(self) -> dict[str, Any]:
        """``torch.optim.Adam.state_dict()``'s layout: parameters by index."""
        group = self.param_groups[0]
        index = {id(p): i for i, p in enumerate(group["params"])}
        saved = {k: v for k, v in group.items() if k != "params"}
        saved["params"] = list(range(len(group["params"])))
        return {
            "state": {index[id(p)]: dict(s) for p, s in self.state.items()},
            "param_groups": [saved],
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load what this class or ``torch.optim.Adam`` (one group) saved."""
        groups = state_dict["param_groups"]
        params = self.param_groups[0]["params"]
        if len(groups) != 1 or len(groups[0]["params"]) != len(params):
            raise ValueError("the saved optimizer state has another parameter layout")
        for key in ("lr", "betas", "eps"):
            self.param_groups[0][key] = groups[0][key]
        self.state = defaultdict(dict)
        for i, s in state_dict["state"].items():
            if not s:  # a parameter that never stepped
                continue
            p = params[groups[0]["params"].index(i)]
            self.state[p] = {
                "step": torch.as_tensor(s["step"], dtype=torch.float32).to(p.device).clone(),
                "exp_avg": s["exp_avg"].to(p.device, p.dtype).clone(),
                "exp_avg_sq": s["exp_avg_sq"].to(p.device, p.dtype).clone(),
            }
