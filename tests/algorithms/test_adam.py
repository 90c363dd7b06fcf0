"""FusedAdam against torch.optim.Adam(fused=True) on fresh random problems, its state dict
against torch's both ways, and a PPO update that leaves torch._dynamo unimported."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from orin_rl.algorithms.adam import FusedAdam


def _problem(seed: int):
    g = torch.Generator().manual_seed(seed)
    shapes = [(5, 3), (3,), (7, 5), (1,)]
    return [torch.randn(s, generator=g, dtype=torch.float64).float() for s in shapes], g


def _run(opt_cls, params0, g_seed: int, steps: int, lr, capturable=False, **kw):
    params = [torch.nn.Parameter(p.clone()) for p in params0]
    opt = opt_cls(params, lr=lr, eps=1e-5, capturable=capturable, **kw)
    g = torch.Generator().manual_seed(g_seed)
    for i in range(steps):
        opt.zero_grad(set_to_none=not capturable)
        for p in params:
            if i == 1 and p.dim() == 1 and p.numel() == 1:
                continue  # a parameter without a gradient this step: no update, no step count
            p.grad = torch.randn(p.shape, generator=g) * 3.0
        opt.step()
    return params, opt


@pytest.mark.parametrize("tensor_lr", [False, True])
def test_steps_match_torch_fused_adam(tensor_lr):
    seed = int(torch.randint(0, 2**31, ()).item())
    params0, _ = _problem(seed)
    lr = torch.tensor(3e-2) if tensor_lr else 3e-2
    ours, opt = _run(FusedAdam, params0, seed + 1, 6, lr, capturable=tensor_lr)
    ref, ref_opt = _run(torch.optim.Adam, params0, seed + 1, 6,
                        lr.clone() if tensor_lr else lr, capturable=tensor_lr,
                        fused=True)  # fmt: skip
    for a, b in zip(ours, ref, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)  # the same kernel
    for p, q in zip(ours, ref, strict=True):
        for key in ("step", "exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(opt.state[p][key], ref_opt.state[q][key], rtol=0, atol=0)
    # skipped once where gradients are set to None (a zeroed one still steps, as in torch)
    assert float(opt.state[ours[3]]["step"]) == (6.0 if tensor_lr else 5.0)


def test_state_dict_is_torchs_both_ways():
    seed = int(torch.randint(0, 2**31, ()).item())
    params0, _ = _problem(seed)
    ours, opt = _run(FusedAdam, params0, seed + 1, 3, 1e-2)
    ref, ref_opt = _run(torch.optim.Adam, params0, seed + 1, 3, 1e-2, fused=True)
    mine, theirs = opt.state_dict(), ref_opt.state_dict()
    assert mine["param_groups"] == theirs["param_groups"]
    assert mine["state"].keys() == theirs["state"].keys()
    # torch's state into ours and ours into torch's: both continue identically
    a = FusedAdam([torch.nn.Parameter(p.detach().clone()) for p in ref], lr=1e-2, eps=1e-5)
    a.load_state_dict(theirs)
    b_params = [torch.nn.Parameter(p.detach().clone()) for p in ours]
    b = torch.optim.Adam(b_params, lr=1e-2, eps=1e-5, fused=True)
    b.load_state_dict(mine)
    g = torch.Generator().manual_seed(seed + 2)
    grads = [torch.randn(p.shape, generator=g) for p in params0]
    for opt_, ps in ((a, a.param_groups[0]["params"]), (b, b_params)):
        for p, gr in zip(ps, grads, strict=True):
            p.grad = gr.clone()
        opt_.step()
    for p, q in zip(a.param_groups[0]["params"], b_params, strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=0)


def test_load_refuses_another_layout():
    params0, _ = _problem(0)
    _, opt = _run(FusedAdam, params0, 1, 1, 1e-2)
    other = FusedAdam([torch.nn.Parameter(torch.zeros(2))], lr=1e-2, eps=1e-5)
    with pytest.raises(ValueError, match="another parameter layout"):
        other.load_state_dict(opt.state_dict())


def test_ppo_update_does_not_import_the_compiler():
    """The point of the class: a PPO process (fp32) never imports torch._dynamo."""
    code = (
        "import sys, torch\n"
        "from tests.algorithms.test_ppo import TestUpdate\n"
        "t = TestUpdate()\n"
        "env, algo = t._algo()\n"
        "t._rollout(env, algo)\n"
        "algo.update()\n"
        "algo.load_state_dict(algo.state_dict())\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)  # fmt: skip
    assert out.stdout.strip().splitlines()[-1] == "False", out.stderr[-2000:]
