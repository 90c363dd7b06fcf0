"""Multi-process training on ``torch.distributed`` (launched by torchrun / ``--nproc``).

Every rank runs its own environments (seeded apart) and rollout buffer; after each backward
pass the gradients are averaged with one all-reduce of the flattened gradient, so every rank
takes the same optimizer step and the parameters stay bit-identical. Advantage normalisation
and the observation normaliser use statistics over all ranks. Rank 0 owns the run folder.
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from orin_rl.errors import OrinError

log = logging.getLogger(__name__)

# NVLink SHARP / multicast stays off (see the project's KINDS notes): NCCL falls back to rings.
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}


class DistributedError(OrinError, RuntimeError):
    """The process group cannot be used as asked (e.g. a resume with another world size)."""


@dataclass
class Context:
    """Where this process sits in the job."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str = ""

    @property
    def enabled(self) -> bool:
        """More than one process."""
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """Rank 0: logs, evaluates, checkpoints."""
        return self.rank == 0


def init_from_env(device_kind: str) -> Context:
    """Join the process group torchrun described in the environment (single process: no-op)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Context()
    for key, value in MULTICAST_OFF.items():
        os.environ.setdefault(key, value)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    backend = "nccl" if device_kind == "cuda" else "gloo"
    if device_kind == "cuda":
        torch.cuda.set_device(local_rank)
    if not dist.is_initialized():
        kwargs = {"device_id": torch.device("cuda", local_rank)} if backend == "nccl" else {}
        dist.init_process_group(backend=backend, **kwargs)
    ctx = Context(dist.get_rank(), dist.get_world_size(), local_rank, backend)
    log.info("rank %d of %d (%s)", ctx.rank, ctx.world_size, backend)
    return ctx


def broadcast_module(module: nn.Module) -> None:
    """Copy rank 0's parameters and buffers to every rank."""
    for tensor in [*module.parameters(), *module.buffers()]:
        dist.broadcast(tensor.data, src=0)


def average_gradients(params: list[nn.Parameter], world_size: int) -> None:
    """grad <- mean over ranks, with one all-reduce of the flattened gradients.

    For a small policy one collective of a few thousand floats costs a single latency; a
    per-parameter all-reduce (or DDP's buckets) pays it per bucket.
    """
    grads = [p.grad for p in params if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= world_size
    offset = 0
    for g in grads:
        n = g.numel()
        g.copy_(flat[offset : offset + n].view_as(g))
        offset += n


def all_reduce_sum_(x: torch.Tensor) -> None:
    """x <- the sum of every rank's ``x``, in place (captured in a CUDA graph with NCCL)."""
    dist.all_reduce(x)


def all_gather_rows(x: torch.Tensor, world_size: int) -> torch.Tensor:
    """Every rank's (n, ...) ``x`` stacked into (world_size * n, ...)."""
    out = [torch.empty_like(x) for _ in range(world_size)]
    dist.all_gather(out, x.contiguous())
    return torch.cat(out)


def any_rank(flags: list[bool], device: torch.device) -> list[bool]:
    """For each flag: true on every rank when it is true on any rank (one all-reduce)."""
    t = torch.tensor([1.0 if f else 0.0 for f in flags], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return [bool(v) for v in t.tolist()]


def gather_floats(value: float, world_size: int, device: torch.device) -> list[float]:
    """``value`` from every rank, in rank order."""
    return all_gather_rows(torch.tensor([value], device=device, dtype=torch.float64), world_size)\
        .tolist()  # fmt: skip


def params_digest(module: nn.Module) -> str:
    """sha256 of every parameter's bytes (bit-identity check across ranks)."""
    h = hashlib.sha256()
    for p in module.parameters():
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def check_identical(module: nn.Module, world_size: int) -> None:
    """Raise unless every rank holds bit-identical parameters."""
    digests: list[str | None] = [None] * world_size
    dist.all_gather_object(digests, params_digest(module))
    if len(set(digests)) != 1:
        raise DistributedError(f"parameters differ across ranks: {digests}")


def shutdown(wait_for_peers: bool = False) -> None:
    """Leave the process group (if one was joined).

    ``wait_for_peers`` (a run that ended normally on every rank): a barrier first, so every rank
    leaves together. Without it a non-main rank tore the group down and exited right after its
    last collective, while rank 0 was still evaluating; rarely (once in CI, once in about 170
    runs here) that exit aborted in libstdc++ with "terminate called without an active
    exception". The cause inside torch/gloo was not found; the barrier closes the window in
    which it happened. A failed run skips it: a dead peer would hold the barrier until the
    process-group timeout.
    """
    if not dist.is_initialized():
        return
    if wait_for_peers and dist.get_world_size() > 1:
        if dist.get_backend() == "nccl":
            dist.barrier(device_ids=[torch.cuda.current_device()])
        else:
            dist.barrier()
    dist.destroy_process_group()
