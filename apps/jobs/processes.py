"""The processes of a job: a job's processes end with the process that started them, and a
worker can list its own descendants.

- ``die_with_parent(expected_parent, sig)``: Linux's ``PR_SET_PDEATHSIG``: the calling process gets
  ``sig`` when its parent ends. Used by the RQ work horse (dies with its worker), by the torchrun
  launcher of a multi-GPU run (SIGTERM when its job's work horse ends: it then stops every rank)
  and by each rank (dies with the launcher), so that no process is left holding GPU memory after
  the worker or job that started it is gone. ``expected_parent`` closes the race of a parent that
  ended before the call: the process then signals itself at once. Elsewhere (not Linux): a no-op.
- ``descendants(pid)``: every process below ``pid`` (from /proc; empty elsewhere).
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys
from pathlib import Path

PR_SET_PDEATHSIG = 1
_prctl = None
if sys.platform.startswith("linux"):
    try:
        _prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # a libc without prctl: leave processes as they are
        _prctl = None


def die_with_parent(expected_parent: int | None = None, sig: int = signal.SIGKILL) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent ends. Returns whether it is set.

    Safe in a ``preexec_fn`` (no import, no allocation beyond the call)."""
    if _prctl is None:
        return False
    if _prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        return False
    if expected_parent is not None and os.getppid() != expected_parent:
        os.kill(os.getpid(), sig)  # the parent ended before the call: do now what the kernel would have done
    return True


def descendants(pid: int) -> set[int]:
    """The pids of every process below ``pid`` (children, their children, ...), read from /proc."""
    children: dict[int, list[int]] = {}
    proc = Path("/proc")
    if not proc.is_dir():
        return set()
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # ended meanwhile
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    out: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out
