"""The fused update's gradient as batched GEMMs: every agent's minibatch step at once.

The gradient kernel of ``fused`` gives a block a slice of one agent's minibatch; at 512
agents it held 1 block per SM and took 15.8 of an iteration's 19.3 ms on the H200
(docs/benchmarks/ncu_grads_seeds512_h200.txt). Here a layer is one ``baddbmm`` over the agent
axis forward and two ``bmm`` backward (cuBLAS's batched GEMMs keep the GPU full at any number
of agents and any minibatch size), and the loss's gradient at the heads is PPO's, by hand: no
autograd tape, no per-parameter optimizer loop. The gradient lands in the fused path's flat
buffer, where its ``apply`` kernel clips each agent's norm and takes torch's Adam step, so the
two paths share the parameters, the moments and the checkpoint format.

Shapes: K agents, mb samples a minibatch, D observation, H hidden, A actions. A network is
three (weight, bias) pairs seen as (K, in, out) and (K, 1, out) (``BatchedMLP``'s layout; a
single ``ActorCritic``'s (out, in) weights are viewed transposed).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from orin_rl.buffers import Batch

Layers = list[tuple[torch.Tensor, torch.Tensor]]
"""(weight (K, in, out), bias (K, 1, out)) per layer, input layer first."""

TERMS = 5
"""Loss terms summed per agent: policy, value, entropy, approx KL, clipped."""


class Hyper(NamedTuple):
    """The PPO loss's constants (``PPOConfig``'s fields of the same names)."""

    clip_coef: float
    ent_coef: float
    vf_coef: float
    clip_value_loss: bool


def _activate(x: torch.Tensor, tanh: bool) -> torch.Tensor:
    return torch.tanh(x) if tanh else torch.relu(x)


def _activation_grad(d: torch.Tensor, y: torch.Tensor, tanh: bool) -> torch.Tensor:
    """d * act'(.) from the activation's output y: tanh' = 1 - y^2, relu' = [y > 0]."""
    return d * (1.0 - y * y) if tanh else d * (y > 0)


def forward(net: Layers, x: torch.Tensor, tanh: bool) -> list[torch.Tensor]:
    """Every layer's output of (K, mb, in) ``x``: [hidden 1, hidden 2, head]."""
    outs = []
    for i, (w, b) in enumerate(net):
        x = torch.baddbmm(b, x, w)
        if i < len(net) - 1:
            x = _activate(x, tanh)
        outs.append(x)
    return outs


def _bmm_into(a: torch.Tensor, d: torch.Tensor, out: torch.Tensor) -> None:
    """``out`` (K, in, out) = a^T d for a (K, mb, in), d (K, mb, out); ``out`` may be a
    transposed view of contiguous (K, out, in) memory (a Linear's layout), then d^T a."""
    if out.is_contiguous():
        torch.bmm(a.mT, d, out=out)
    else:
        torch.bmm(d.mT, a, out=out.mT)


def backward(net: Layers, x: torch.Tensor, outs: list[torch.Tensor], d: torch.Tensor,
             grads: Layers, tanh: bool) -> None:  # fmt: skip
    """Backpropagate ``d`` (K, mb, out) at the head into ``grads`` (written, not added)."""
    inputs = [x, *outs[:-1]]
    for i in range(len(net) - 1, -1, -1):
        gw, gb = grads[i]
        _bmm_into(inputs[i], d, gw)  # dW = input^T d
        torch.sum(d, dim=1, keepdim=True, out=gb)  # db = sum over the minibatch
        if i:
            d = _activation_grad(torch.bmm(d, net[i][0].mT), inputs[i], tanh)


def _max_weights(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """torch.max(a, b)'s subgradient share of ``a``: 1 where a > b, 1/2 where equal, else 0."""
    return (a > b).to(a.dtype) + 0.5 * (a == b).to(a.dtype)


def heads_gradient(logits: torch.Tensor, value: torch.Tensor, mb: Batch, hp: Hyper,
                   scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """PPO's loss differentiated by hand at the heads: (d logits (K, mb, A), d value
    (K, mb, 1), per-agent sums of the loss terms (K, TERMS)), each gradient times ``scale``
    (1 / mb: a mean over the minibatch). torch.max's and clamp's subgradients as autograd's.

    Loss: max(-A r, -A clip(r, 1 - e, 1 + e)) - c_ent H + c_v 0.5 (V - R)^2 (clipped: the max
    of it and (V_old + clip(V - V_old, -e, e) - R)^2), r = exp(log pi(a) - log pi_old(a)).
    """
    clip = hp.clip_coef
    logp_all = torch.log_softmax(logits, -1)  # (K, mb, A)
    p = logp_all.exp()
    entropy = -(p * logp_all).sum(-1)  # (K, mb)
    logratio = logp_all.gather(-1, mb.actions.unsqueeze(-1)).squeeze(-1) - mb.logprobs
    ratio = logratio.exp()
    inside = ((ratio >= 1.0 - clip) & (ratio <= 1.0 + clip)).to(ratio.dtype)
    unclipped = -mb.advantages * ratio
    clipped = -mb.advantages * ratio.clamp(1.0 - clip, 1.0 + clip)
    share = _max_weights(unclipped, clipped)
    # d loss / d log pi(a) = d loss / d r * r, the clipped side passing only inside the range
    g_logp = -mb.advantages * (share + (1.0 - share) * inside) * ratio * scale
    # d(-c_ent H)/d z_o = c_ent p_o (log p_o + H); d log pi(a)/d z_o = [o = a] - p_o
    d_logits = p * (hp.ent_coef * scale * (logp_all + entropy.unsqueeze(-1)) - g_logp.unsqueeze(-1))
    d_logits = d_logits.scatter_add(-1, mb.actions.unsqueeze(-1), g_logp.unsqueeze(-1))
    v = value.squeeze(-1)
    err = v - mb.returns
    sq = err * err
    if hp.clip_value_loss:
        dv = v - mb.values
        err_c = mb.values + dv.clamp(-clip, clip) - mb.returns
        sq_c = err_c * err_c
        inside_v = ((dv >= -clip) & (dv <= clip)).to(v.dtype)
        share_v = _max_weights(sq, sq_c)
        g_v = share_v * err + (1.0 - share_v) * inside_v * err_c
        sq = torch.maximum(sq, sq_c)
    else:
        g_v = err
    d_value = (hp.vf_coef * scale * g_v).unsqueeze(-1)
    terms = torch.stack([
        torch.maximum(unclipped, clipped), 0.5 * sq, entropy, (ratio - 1.0) - logratio,
        ((ratio - 1.0).abs() > clip).to(ratio.dtype),
    ], -1).sum(1)  # fmt: skip
    return d_logits, d_value, terms


def minibatch_gradients(actor: Layers, critic: Layers, mb: Batch, hp: Hyper, tanh: bool,
                        actor_grads: Layers, critic_grads: Layers) -> torch.Tensor:  # fmt: skip
    """Each agent's gradient of its mean PPO loss on its minibatch (a ``Batch`` of (K, mb, ...)
    fields, actions int64), written into the grads' tensors; returns the (K, TERMS) sums of the
    loss terms."""
    x = mb.obs
    a_outs = forward(actor, x, tanh)
    c_outs = forward(critic, x, tanh)
    d_logits, d_value, terms = heads_gradient(a_outs[-1], c_outs[-1], mb, hp, 1.0 / x.shape[1])
    backward(actor, x, a_outs, d_logits, actor_grads, tanh)
    backward(critic, x, c_outs, d_value, critic_grads, tanh)
    return terms


def layers_of(tensors: list[torch.Tensor], in_major: bool) -> tuple[Layers, Layers]:
    """(actor, critic) layers over the 12 tensors of ``fused.module_params``'s order, or
    gradient buffers shaped like them: weights (K, in, out), biases (K, 1, out); a single
    ActorCritic's (out, in) weights and (out,) biases become views of that shape."""
    pairs = []
    for w, b in zip(tensors[0::2], tensors[1::2], strict=True):
        if not in_major:  # nn.Linear: (out, in), (out,)
            w, b = w.T.unsqueeze(0), b.view(1, 1, -1)
        pairs.append((w, b))
    return pairs[:3], pairs[3:]


class GemmGrads:
    """Drives ``minibatch_gradients`` for a ``fused.FusedPPO``: its permutation, its rollout
    buffer, its flat gradient; the loss sums and the per-agent squared norms in the shapes its
    ``apply`` kernel reads. Launches only (no host reads): a CUDA graph captures it."""

    def __init__(self, run: Any, tanh: bool):
        self.run = run
        self.tanh = tanh
        cfg, buf = run.cfg, run.algo.buffer
        k, n = run.num_agents, run.num_envs
        self.samples = buf.num_steps * n  # per agent
        self.minibatch = self.samples // cfg.num_minibatches
        in_major = k > 1
        self.actor, self.critic = layers_of(run.params, in_major)
        start, views = 0, []
        for p in run.params:  # the gradient buffer viewed as the parameters are (_bind_flat)
            views.append(run.grad[start : start + p.numel()].view(p.shape))
            start += p.numel()
        self.grad_views = views
        self.actor_grads, self.critic_grads = layers_of(views, in_major)
        self.hyper = Hyper(float(cfg.clip_coef), float(cfg.ent_coef), float(cfg.vf_coef),
                           bool(cfg.clip_value_loss))  # fmt: skip
        dev, d = run.device, buf.obs[0, 0].numel()
        # (K, samples, D + 4): an epoch's data in its permuted order (obs, logp, V, A, R)
        self.rows = torch.zeros(buf.num_steps * k * n, d + 4, device=dev)
        self.epoch_data = torch.zeros(k, self.samples, d + 4, device=dev)
        self.epoch_actions = torch.zeros(k, self.samples, dtype=torch.int64, device=dev)
        self.flat_index = torch.zeros(cfg.num_epochs, k, self.samples, dtype=torch.int64,
                                      device=dev)  # fmt: skip
        self.agent_offset = (torch.arange(k, device=dev) * n).view(1, k, 1)
        # what ``apply`` reads: (K, 12) squared norms (a column a tensor), one part's sums
        self.norms = torch.zeros(k, len(run.params), device=dev)
        self.pterms = torch.zeros(1, k, TERMS, device=dev)

    @torch.no_grad()
    def begin(self) -> None:
        """After ``prepare`` (advantages normalised): the samples' rows in the flat rollout,
        and the float fields side by side in one table, gathered once an epoch."""
        run, buf = self.run, self.run.algo.buffer
        k, n = run.num_agents, run.num_envs
        perm = run.perm  # (epochs, K, samples): sample s = t * n + env within the agent
        # row of (T, K * N) flattened: t * K * N + k * N + env
        torch.add((perm // n) * (k * n) + perm % n, self.agent_offset, out=self.flat_index)
        fields = [buf.obs.flatten(2)] + [getattr(buf, f).unsqueeze(-1) for f in (
            "logprobs", "values", "advantages", "returns")]  # fmt: skip
        torch.cat([f.flatten(0, 1) for f in fields], -1, out=self.rows)

    @torch.no_grad()
    def step(self, j: int) -> None:
        """Minibatch step ``j`` (epoch j // num_mb): the gradient into the flat buffer, the
        norms and the loss sums into ``norms`` and ``pterms``."""
        cfg, buf = self.run.cfg, self.run.algo.buffer
        epoch, i = divmod(j, cfg.num_minibatches)
        if i == 0:  # the epoch's samples in its order: two gathers, then views
            index = self.flat_index[epoch].flatten()
            torch.index_select(
                self.rows, 0, index, out=self.epoch_data.view(-1, self.rows.shape[1])
            )
            torch.index_select(buf.actions.flatten(), 0, index, out=self.epoch_actions.view(-1))
        sl = slice(i * self.minibatch, (i + 1) * self.minibatch)
        data, d = self.epoch_data[:, sl], self.epoch_data.shape[-1] - 4
        mb = Batch(data[..., :d], self.epoch_actions[:, sl], *data[..., d:].unbind(-1))
        terms = minibatch_gradients(self.actor, self.critic, mb, self.hyper, self.tanh,
                                    self.actor_grads, self.critic_grads)  # fmt: skip
        self.pterms[0].copy_(terms)
        k = self.run.num_agents
        torch.stack([torch.linalg.vecdot(g.reshape(k, -1), g.reshape(k, -1))
                     for g in self.grad_views], 1, out=self.norms)  # fmt: skip
