"""Test tripwire (tests/fault/test_worker_cuda_fork.py): with SELFPLAY_CUDA_TRIPWIRE=FILE, every process
started with this folder on PYTHONPATH appends ``<pid> <what>`` to FILE when it imports torch and when
it calls a torch.cuda function that asks the CUDA driver (any of them poisons a later fork on a GPU
machine). Nothing else changes: the functions are wrapped, not replaced."""
import importlib.abc
import os
import sys

MARK = os.environ.get("SELFPLAY_CUDA_TRIPWIRE")
ASKS_THE_DRIVER = ("is_available", "device_count", "get_device_properties", "get_device_name",
                   "get_device_capability", "init", "_lazy_init", "current_device", "set_device", "mem_get_info",
                   "synchronize", "is_bf16_supported", "memory_allocated", "max_memory_allocated", "empty_cache",
                   "manual_seed_all")
C_ENTRY_POINTS = ("_cuda_getDeviceCount", "_cuda_init")


def _note(what: str) -> None:
    with open(MARK, "a") as out:
        out.write(f"{os.getpid()} {what}\n")


def _wrapped(fn, what):
    def call(*args, **kwargs):
        _note(what)
        return fn(*args, **kwargs)
    call.__wrapped__ = fn
    return call


def _arm(cuda) -> None:
    for name in ASKS_THE_DRIVER:
        if callable(getattr(cuda, name, None)):
            setattr(cuda, name, _wrapped(getattr(cuda, name), f"torch.cuda.{name}"))
    c = sys.modules.get("torch._C")
    for name in C_ENTRY_POINTS:
        if c is not None and callable(getattr(c, name, None)):
            setattr(c, name, _wrapped(getattr(c, name), f"torch._C.{name}"))


class _Watch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in ("torch", "torch.cuda"):
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        run = spec.loader.exec_module

        def exec_module(module):
            if name == "torch":
                _note("import torch")
            run(module)
            if name == "torch.cuda":
                _arm(module)

        spec.loader.exec_module = exec_module
        return spec


if MARK:
    sys.meta_path.insert(0, _Watch())
