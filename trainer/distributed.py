"""Process-group helpers for multi-GPU runs (one process per GPU, data parallel).

A run started by ``python -m trainer run ... --gpus N`` is re-executed by a launcher
(``trainer/launch.py``) that sets ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and
``MASTER_PORT`` in each process. Everything here also works in a plain single process:
``world_size() == 1``, ``rank() == 0``, ``is_main()`` is True, ``shard(x)`` returns ``x``.

Only rank 0 owns the sink (events, samples, metrics) and writes checkpoints' shared files;
every rank generates rollouts for its own shard of the step's prompts.
"""
from __future__ import annotations

import gc
import os
import socket
import sys
from collections.abc import Sequence

import torch


def world_size() -> int:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_world_size()
    return int(os.environ.get("WORLD_SIZE", "1"))


def rank() -> int:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank()
    return int(os.environ.get("RANK", "0"))


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0"))


def is_main() -> bool:
    return rank() == 0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def single_process_env() -> None:
    """Rendezvous variables for a process started without a launcher (world size 1)."""
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(free_port()))


def init_process_group(backend: str | None = None) -> None:
    """Join the process group once (nccl on GPU, gloo on CPU); binds this process to its GPU."""
    if torch.distributed.is_initialized():
        return
    single_process_env()
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank())
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    torch.distributed.init_process_group(backend=backend)


def shard(items: Sequence, r: int | None = None, n: int | None = None) -> list:
    """This rank's share of ``items``: every n-th item starting at r (balanced to within one).

    shard([a, b, c, d, e], r=1, n=2) -> [b, d].
    """
    r = rank() if r is None else r
    n = world_size() if n is None else n
    if not 0 <= r < n:
        raise ValueError(f"rank {r} is outside world size {n}")
    return list(items[r::n])


def barrier() -> None:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.barrier()


def shutdown() -> None:
    """Leave the process group at the end of a rank's work: every rank calls it once its last
    collective is done (a no-op where no group was joined).

    A barrier first, so no rank leaves while another still exchanges with it; then every group
    is destroyed (through DeepSpeed where it made groups, so its own references to them go too)
    and a garbage collection frees them: a gloo group nothing else holds joins its worker threads
    now. Left to interpreter exit, a worker thread can still be releasing its last work while
    Python finalizes, and the process aborts ("terminate called without an active exception",
    SIGABRT). Release what holds a group first (``DeepSpeedEngine.close()``). A module imported
    after the group was made may keep the default group as a default argument (DeepSpeed's,
    ``torch.distributed.nn``'s): it then outlives this call, idle. Not for an error path: the
    barrier would wait for ranks that may be inside another collective.
    """
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return
    torch.distributed.barrier()
    ds_comm = sys.modules.get("deepspeed.comm")
    if ds_comm is not None and ds_comm.is_initialized():
        ds_comm.destroy_process_group()
    else:
        torch.distributed.destroy_process_group()
    gc.collect()


def active() -> bool:
    """True when this process is one of several ranks of an initialised process group."""
    return torch.distributed.is_available() and torch.distributed.is_initialized() and world_size() > 1


def wanted() -> bool:
    """True when a launcher started this process as one of several ranks (WORLD_SIZE > 1)."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def _device() -> torch.device:
    if torch.distributed.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_reduce(values: Sequence[float], op: str = "sum") -> list[float]:
    """Element-wise sum / max / min of a list of numbers over all ranks (the list itself if alone)."""
    if not active():
        return [float(v) for v in values]
    t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=_device())
    ops = {"sum": torch.distributed.ReduceOp.SUM, "max": torch.distributed.ReduceOp.MAX,
           "min": torch.distributed.ReduceOp.MIN}
    torch.distributed.all_reduce(t, op=ops[op])
    return t.tolist()


def gather_objects(obj) -> list:
    """Every rank's ``obj`` in rank order, on every rank ([obj] when alone). Collective."""
    if not active():
        return [obj]
    out = [None] * world_size()
    torch.distributed.all_gather_object(out, obj)
    return out


def broadcast_object(obj, src: int = 0):
    """Rank ``src``'s ``obj`` on every rank. Collective."""
    if not active():
        return obj
    box = [obj]
    torch.distributed.broadcast_object_list(box, src=src)
    return box[0]


def average_gradients(params: Sequence[torch.Tensor], bucket_bytes: int = 256 * 2**20) -> None:
    """Data parallel: replace each gradient by its mean over the ranks (a missing one counts as
    zero). Gradients travel flattened in buckets of one dtype (few large all-reduces)."""
    if not active():
        return
    from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

    n = world_size()
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    bucket: list[torch.Tensor] = []
    size = 0

    def flush():
        nonlocal bucket, size
        if bucket:
            flat = _flatten_dense_tensors(bucket)
            torch.distributed.all_reduce(flat)
            flat.div_(n)
            for g, new in zip(bucket, _unflatten_dense_tensors(flat, bucket)):
                g.copy_(new)
        bucket, size = [], 0

    for p in params:
        if bucket and (p.grad.dtype != bucket[0].dtype or size + p.grad.numel() * p.grad.element_size() > bucket_bytes):
            flush()
        bucket.append(p.grad)
        size += p.grad.numel() * p.grad.element_size()
    flush()
