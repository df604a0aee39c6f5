"""One rank of tests/trainer/test_multi_rank.py's import test (run by torchrun, 2 CPU ranks over gloo): rank 1
imports the bundled SmolLM2 into a fresh data dir while rank 0 waits, then both load what it wrote."""
import os
import sys

import torch.distributed as dist

from trainer.models import resolve_model

dist.init_process_group("gloo")
if dist.get_rank() == 1:
    path = resolve_model("smollm2-135m-instruct")
dist.barrier()
path = resolve_model("smollm2-135m-instruct")
from transformers import AutoConfig  # noqa: E402

print(f"rank {dist.get_rank()}: {sorted(os.listdir(path))} {AutoConfig.from_pretrained(path).model_type}", flush=True)
dist.barrier()
dist.destroy_process_group()
sys.exit(0)
