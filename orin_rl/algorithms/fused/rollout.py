"""The fused rollout kernel: grid = agents x env chunks, a block runs its envs for all
``num_steps``: the actor and critic forward passes (the agent's weights copied into shared
memory), the categorical draw, the task's step (a ``DeviceTask``, task.py), the time limit,
auto-reset, the episode statistics, every buffer field, the value of the true final observation
where an episode was truncated, and GAE at the end. The uniform draws come from one
``torch.rand`` per iteration (torch's CUDA generator, saved in checkpoints), so a resumed run
draws what it would have.

The kernel is assembled from device functions by meaning: the policy's (``policy_functions``:
weights into shared memory, the forward pass over a block's envs, the draw of an action) and
the env's (``env_functions``: one env's step with its bookkeeping, GAE). Each env's state and
its observation live in two shared-memory rows (the task's ``state_dim`` and ``obs_dim``
floats): the task steps and resets the state, and ``observe`` writes the observation the
policy reads.
"""

from __future__ import annotations

import math
from typing import Any

import numba
from numba import cuda

from orin_rl.algorithms.fused.device import Device
from orin_rl.algorithms.fused.shapes import ZERO, Shape
from orin_rl.algorithms.fused.task import DeviceTask


def policy_functions(s: Shape, dev: Device) -> tuple[Any, Any, Any]:
    """The rollout's policy: ``load_weights`` (an agent's weights into shared memory),
    ``forward_envs`` (both networks over a block's envs) and ``sample`` (the categorical
    draw)."""
    D, H1, H2, A, E, RT = s.D, s.H1, s.H2, s.A, s.E, s.RT
    SIZE, OFF, NOUT, W2H1, W2H2, A1 = s.SIZE, s.OFF, s.NOUT, s.W2H1, s.W2H2, s.A1
    act, logsumexp, gidx = dev.act, dev.logsumexp, dev.gidx
    f32 = numba.float32

    @cuda.jit(device=True, inline=True)
    def sw(t, i, j):
        """Index of (i, j) of tensor t in the rollout's shared copy (always input-major)."""
        return OFF[t] + i * NOUT[t] + j

    @cuda.jit(device=True, inline=True)
    def load_weights(params, ws, k, tid):
        """Agent k's weights, input-major, into the shared ``ws``, all threads."""
        for tt in range(12):
            n_out = NOUT[tt]
            for idx in range(tid, SIZE[tt], RT):
                ws[OFF[tt] + idx] = params[gidx(tt, k, idx // n_out, idx % n_out)]

    @cuda.jit(device=True)
    def forward_envs(ws, xs, n, h1s, h2s, outs, tid):
        """Actor logits and critic value of the n observations in xs, all threads; weights in
        shared memory."""
        for idx in range(tid, n * W2H1, RT):
            e = idx // W2H1
            u = idx % W2H1
            net = u // H1
            q = u % H1
            acc = ws[OFF[6 * net + 1] + q]
            for i in range(D):
                acc += xs[e, i] * ws[sw(6 * net, i, q)]
            h1s[e, u] = act(acc)
        cuda.syncthreads()
        hacc = cuda.local.array(E, f32)
        for u in range(tid, W2H2, RT):  # one unit per thread, every env: each weight read once
            net = u // H2
            q = u % H2
            w0 = OFF[6 * net + 2] + q
            bias = ws[OFF[6 * net + 3] + q]
            for e in range(E):
                hacc[e] = bias
            for i in range(H1):
                w = ws[w0 + i * H2]
                for e in range(E):
                    if e < n:
                        hacc[e] += h1s[e, net * H1 + i] * w
            for e in range(E):
                if e < n:
                    h2s[e, u] = act(hacc[e])
        cuda.syncthreads()
        for idx in range(tid, n * A1, RT):
            e = idx // A1
            o = idx % A1
            if o < A:
                acc = ws[OFF[5] + o]
                for i in range(H2):
                    acc += h2s[e, i] * ws[OFF[4] + i * A + o]
            else:
                acc = ws[OFF[11]]
                for i in range(H2):
                    acc += h2s[e, H2 + i] * ws[OFF[10] + i]
            outs[e, o] = acc
        cuda.syncthreads()

    @cuda.jit(device=True, inline=True)
    def sample(outs, e, u):
        """(action, log-sum-exp of env e's logits): the first action whose cumulative
        probability passes the uniform ``u`` (the last where rounding leaves none)."""
        lse = logsumexp(outs, e)
        a = A - 1
        cum = ZERO
        for j in range(A):
            cum += math.exp(outs[e, j] - lse)
            if u < cum:
                a = j
                break
        return a, lse

    return load_weights, forward_envs, sample


def env_functions(s: Shape, task: DeviceTask) -> tuple[Any, Any]:
    """The rollout's env side: ``step_env`` (one env's step, time limit, episode statistics
    and auto-reset) and ``gae`` (its advantages and returns after the last step)."""
    A = s.A
    reset, step, observe = task.reset, task.step, task.observe

    @cuda.jit(device=True, inline=True)
    def count_episode(last_ret, last_len, finished, g, reward, done, ret, length):
        """Env g's running return and length after a step; where the episode is done, they
        become its last ones (``finished``) and restart at zero. The new (ret, length)."""
        ret += reward
        length += 1
        if done:
            last_ret[g] = ret
            last_len[g] = length
            finished[g] = True
            ret = 0.0
            length = 0
        return ret, length

    @cuda.jit(device=True, inline=True)
    def step_env(ss, xs, fin, need, flag, rand, rewards_b, term_b, end_b, boot_b, last_ret,
                 last_len, finished, t, e, g, a, steps, ret, length, max_steps):  # fmt: skip
        """Env e (row e of the states ``ss`` and observations ``xs``, index g) takes action a
        at step t: its buffer fields, its true final observation into ``fin`` (``need[e]``,
        ``flag``) where the time limit cut the episode, a reset where it ended, and the
        observation of its new state. The env's new (steps, ret, length)."""
        reward, terminated = step(ss, e, a)
        steps += 1
        truncated = steps >= max_steps
        done = terminated or truncated
        rewards_b[t, g] = reward
        term_b[t, g] = terminated
        end_b[t, g] = done
        boot_b[t, g] = ZERO
        ret, length = count_episode(last_ret, last_len, finished, g, reward, done, ret, length)
        need[e] = 0
        if truncated and not terminated:  # bootstrap from V(true final observation)
            observe(ss, e, fin)
            need[e] = 1
            flag[0] = 1
        if done:
            reset(ss, e, rand, t, g)
            steps = 0
        observe(ss, e, xs)
        return steps, ret, length

    @cuda.jit(device=True, inline=True)
    def gae(outs, tid, g, num_steps, values_b, rewards_b, term_b, end_b, boot_b, next_b, adv_b,
            ret_b, gamma, lam):  # fmt: skip
        """GAE of env g backwards over the rollout (ops.gae's arithmetic), ``outs[tid, A]``
        the value of the observation after the last step."""
        last = ZERO
        for t in range(num_steps - 1, -1, -1):
            nv = outs[tid, A] if t == num_steps - 1 else values_b[t + 1, g]
            if end_b[t, g]:
                nv = boot_b[t, g]
            next_b[t, g] = nv
            bootstrap = ZERO if term_b[t, g] else gamma * nv
            delta = rewards_b[t, g] + bootstrap - values_b[t, g]
            carry = ZERO if end_b[t, g] else gamma * lam * last
            last = delta + carry
            adv_b[t, g] = last
            ret_b[t, g] = last + values_b[t, g]

    return step_env, gae


def rollout_kernel(s: Shape, dev: Device, task: DeviceTask, use_cache: bool) -> Any:
    """The rollout kernel: a block steps its envs for the whole rollout (module docstring)."""
    D, A, E, RT, P, W2H1, W2H2, A1 = s.D, s.A, s.E, s.RT, s.P, s.W2H1, s.W2H2, s.A1
    if (task.obs_dim, task.num_actions) != (D, A):
        raise ValueError(f"{task.task_id} has {task.obs_dim} observations and "
                         f"{task.num_actions} actions, not the policy's {D} and {A}")  # fmt: skip
    S, observe = task.state_dim, task.observe
    load_weights, forward_envs, sample = policy_functions(s, dev)
    step_env, gae = env_functions(s, task)
    f32 = numba.float32

    @cuda.jit(cache=use_cache)
    def rollout(params, state, elapsed, ep_ret, ep_len, last_ret, last_len, finished, rand,
                obs_b, actions_b, logp_b, values_b, rewards_b, term_b, end_b, boot_b, next_b,
                adv_b, ret_b, gamma, lam, max_steps, n_envs, chunks):  # fmt: skip
        tid = cuda.threadIdx.x
        k = cuda.blockIdx.x // chunks
        e0 = (cuda.blockIdx.x % chunks) * E
        n = n_envs - e0
        if n > E:
            n = E
        g0 = k * n_envs + e0
        ws = cuda.shared.array(P, f32)
        ss = cuda.shared.array((E, S), f32)
        xs = cuda.shared.array((E, D), f32)
        fin = cuda.shared.array((E, D), f32)
        h1s = cuda.shared.array((E, W2H1), f32)
        h2s = cuda.shared.array((E, W2H2), f32)
        outs = cuda.shared.array((E, A1), f32)
        need = cuda.shared.array(E, numba.int32)
        flag = cuda.shared.array(1, numba.int32)
        load_weights(params, ws, k, tid)
        # Each env's state and observation live in shared memory and its counters in its
        # thread's registers for the whole rollout; written back at the end.
        steps = 0
        ret = 0.0
        length = 0
        if tid < n:
            for i in range(S):
                ss[tid, i] = state[g0 + tid, i]
            observe(ss, tid, xs)
            steps = elapsed[g0 + tid]
            ret = ep_ret[g0 + tid]
            length = ep_len[g0 + tid]
        cuda.syncthreads()
        num_steps = obs_b.shape[0]
        for t in range(num_steps):
            for idx in range(tid, n * D, RT):
                obs_b[t, g0 + idx // D, idx % D] = xs[idx // D, idx % D]
            if tid == 0:
                flag[0] = 0
            cuda.syncthreads()
            forward_envs(ws, xs, n, h1s, h2s, outs, tid)
            if tid < n:
                e = tid
                g = g0 + e
                a, lse = sample(outs, e, rand[t, g, 0])
                actions_b[t, g] = a
                logp_b[t, g] = outs[e, a] - lse
                values_b[t, g] = outs[e, A]
                steps, ret, length = step_env(ss, xs, fin, need, flag, rand, rewards_b, term_b,
                                              end_b, boot_b, last_ret, last_len, finished, t, e,
                                              g, a, steps, ret, length, max_steps)  # fmt: skip
            cuda.syncthreads()
            if flag[0] != 0:  # the same shared value for every thread: a uniform branch
                forward_envs(ws, fin, n, h1s, h2s, outs, tid)
                if tid < n and need[tid] != 0:
                    boot_b[t, g0 + tid] = outs[tid, A]
                cuda.syncthreads()
        # V(observation after the last step), then GAE per env
        forward_envs(ws, xs, n, h1s, h2s, outs, tid)
        if tid < n:
            g = g0 + tid
            for i in range(S):
                state[g, i] = ss[tid, i]
            elapsed[g] = steps
            ep_ret[g] = ret
            ep_len[g] = length
            gae(outs, tid, g, num_steps, values_b, rewards_b, term_b, end_b, boot_b, next_b,
                adv_b, ret_b, gamma, lam)  # fmt: skip

    return rollout
