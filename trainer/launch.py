"""Multi-GPU launch: ``python -m trainer run CONFIG --gpus N`` re-executes itself through a launcher.

``launch_command(argv, gpus, launcher=..., hostfile=..., master_port=...)`` builds the command
(a list of strings, tested on CPU):

- ``torchrun`` (default; part of torch): ``python -m torch.distributed.run --standalone
  --nproc_per_node N -m trainer run CONFIG ...``;
- ``deepspeed`` (the DeepSpeed launcher, needed for a hostfile of several machines):
  ``python -m deepspeed.launcher.runner --num_gpus N [--hostfile H] --master_port P
  --module trainer run CONFIG ...``.

The child processes see ``SELFPLAY_LAUNCHED=1`` (so they do not relaunch again) plus the
launcher's ``RANK``/``LOCAL_RANK``/``WORLD_SIZE``; ``--gpus`` and ``--launcher``/``--hostfile``
are removed from their argv. The RQ worker uses the same function to start multi-GPU runs.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Sequence

LAUNCHERS = ("torchrun", "deepspeed")
_OWN_FLAGS = ("--gpus", "--launcher", "--hostfile", "--master-port")


def add_launch_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``run`` subcommand's multi-GPU flags."""
    parser.add_argument("--gpus", type=int, default=None,
                        help="GPUs on this machine (>1 relaunches, one process each; default: train.gpus)")
    parser.add_argument("--launcher", choices=LAUNCHERS, default="torchrun", help="multi-GPU launcher")
    parser.add_argument("--hostfile", default=None, help="DeepSpeed hostfile for several machines")
    parser.add_argument("--master-port", type=int, default=None, help="rendezvous port (default: a free one)")


def strip_launch_flags(argv: Sequence[str]) -> list[str]:
    """``argv`` without ``--gpus N``, ``--launcher X``, ``--hostfile H``, ``--master-port P``."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in _OWN_FLAGS:
            skip = True
            continue
        if any(arg.startswith(flag + "=") for flag in _OWN_FLAGS):
            continue
        out.append(arg)
    return out


def launch_command(argv: Sequence[str], gpus: int, *, launcher: str = "torchrun", hostfile: str | None = None,
                   master_port: int | None = None, python: str | None = None) -> list[str]:
    """The command that runs ``python -m trainer <argv>`` once per GPU."""
    if gpus < 1:
        raise ValueError(f"--gpus must be >= 1, got {gpus}")
    if launcher not in LAUNCHERS:
        raise ValueError(f"--launcher must be one of {', '.join(LAUNCHERS)}, got {launcher!r}")
    if hostfile and launcher != "deepspeed":
        raise ValueError("--hostfile needs --launcher deepspeed (torchrun here launches on one machine)")
    if hostfile and not os.path.isfile(hostfile):
        raise ValueError(f"hostfile {hostfile} does not exist; write lines like 'worker-1 slots=8'")
    python = python or sys.executable
    args = strip_launch_flags(argv)
    if launcher == "torchrun":
        cmd = [python, "-m", "torch.distributed.run", f"--nproc_per_node={gpus}"]
        cmd += [f"--master_port={master_port}"] if master_port else ["--standalone"]
        return cmd + ["-m", "trainer", *args]
    cmd = [python, "-m", "deepspeed.launcher.runner", "--num_gpus", str(gpus)]
    if hostfile:
        cmd += ["--hostfile", hostfile]
    if master_port:
        cmd += ["--master_port", str(master_port)]
    return cmd + ["--module", "trainer", *args]


def launched() -> bool:
    """True inside a process started by a launcher (or by ourselves)."""
    return os.environ.get("SELFPLAY_LAUNCHED") == "1" or "LOCAL_RANK" in os.environ


def child_env(base: dict | None = None) -> dict:
    env = dict(os.environ if base is None else base)
    env["SELFPLAY_LAUNCHED"] = "1"
    # NVLink multicast stays off (shared hosts): keep it off in every child too.
    env.setdefault("NCCL_NVLS_ENABLE", "0")
    env.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    return env


def relaunch_if_needed(args: argparse.Namespace, argv: Sequence[str]) -> int | None:
    """Run the multi-GPU command and return its exit code, or None to go on in this process."""
    gpus = int(getattr(args, "gpus", 1) or 1)
    if gpus <= 1 and not getattr(args, "hostfile", None) or launched():
        return None
    cmd = launch_command(argv, gpus, launcher=args.launcher, hostfile=args.hostfile, master_port=args.master_port)
    return subprocess.call(cmd, env=child_env())
