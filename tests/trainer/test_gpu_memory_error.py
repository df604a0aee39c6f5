"""A CUDA out-of-memory error in a run becomes one message that says where, what held the card's memory and what to
lower, and the checkpoint written before it stays resumable. The error text is torch's own, as an H200 shared by three
1.5B runs printed it on 2026-11-28 (the update of a SCOPE run); the run here is a real tiny GRPO run on the CPU, whose
update is made to raise that error in its second step, after step 1's checkpoint (a CPU cannot run out of CUDA
memory)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import trainer.update as update_module
from trainer.config import load_config
from trainer.context import RecipeContext
from trainer.runner import GpuMemoryError, gpu_memory_message, run

H200_TEXT = ("CUDA out of memory. Tried to allocate 712.00 MiB. GPU 0 has a total capacity of 139.80 GiB of which "
             "523.88 MiB is free. Process 2617 has 48.55 GiB memory in use. Including non-PyTorch memory, this process "
             "has 36.54 GiB memory in use. Process 2624 has 54.17 GiB memory in use. Of the allocated memory 35.08 GiB "
             "is allocated by PyTorch, with 8.69 GiB allocated in private pools (e.g., CUDA Graphs), and 529.64 MiB is "
             "reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
             "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
             "Management  (https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)")


def test_the_message_names_the_co_tenants_the_settings_and_the_checkpoint(tiny_config):
    cfg = load_config(tiny_config(train={"micro_batch_tokens": 4096}, rollout={"max_new_tokens": 512}))
    message = gpu_memory_message(cfg, torch.OutOfMemoryError(H200_TEXT), 3, Path("/runs/x/checkpoints/step-000002"))
    assert message.startswith("out of GPU memory in step 3: CUDA out of memory. Tried to allocate 712.00 MiB.")
    assert "Process 2617 has 48.55 GiB memory in use" in message and "Process 2624 has 54.17 GiB" in message
    assert "train.micro_batch_tokens (now 4096" in message and "rollout.max_new_tokens (now 512)" in message
    assert "a GPU no other process shares" in message
    assert "step-000002 is intact: resuming continues from it" in message
    assert "Of the allocated memory" not in message and "PYTORCH_CUDA_ALLOC_CONF" not in message
    fresh = gpu_memory_message(cfg, torch.OutOfMemoryError(H200_TEXT), 1, None)
    assert fresh.endswith("no checkpoint had been written yet")


def test_a_run_out_of_memory_fails_with_the_message_and_resumes_from_its_checkpoint(tiny_config, tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    real, real_checkpoint = update_module._micro_loss, RecipeContext.checkpoint
    saved = []

    def checkpoint(self, step, *args, **kwargs):  # step 1's save is asked for (it may still be writing in the
        saved.append(step)                         # background when step 2 starts: the runner waits for it)
        return real_checkpoint(self, step, *args, **kwargs)

    def out_of_memory_after_step_1(*args, **kwargs):
        if saved:
            raise torch.OutOfMemoryError(H200_TEXT)
        return real(*args, **kwargs)

    monkeypatch.setattr(RecipeContext, "checkpoint", checkpoint)
    monkeypatch.setattr(update_module, "_micro_loss", out_of_memory_after_step_1)
    with pytest.raises(GpuMemoryError) as caught:
        run(tiny_config(train={"steps": 3, "skip_zero_advantage": False}), run_dir=run_dir)
    message = str(caught.value)
    assert message.startswith("out of GPU memory in step 2:")
    assert "step-000001 is intact" in message
    assert isinstance(caught.value.__cause__, torch.OutOfMemoryError)

    monkeypatch.setattr(update_module, "_micro_loss", real)  # a GPU of its own: the resume runs to the end
    result = run(tiny_config(train={"steps": 3, "skip_zero_advantage": False}), run_dir=run_dir, resume=True)
    assert result.steps == 3
