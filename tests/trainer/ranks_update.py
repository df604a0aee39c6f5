"""Run under torchrun by tests/trainer/test_multi_rank.py (CPU, gloo): one policy update of a
fixed set of samples split unevenly over the ranks; rank 0 saves the updated weights.

    python -m torch.distributed.run --nproc_per_node 2 tests/trainer/ranks_update.py CONFIG.json SAMPLES.json OUT.pt SPLIT
SPLIT: the sample indices of each rank, e.g. "0,1,2,3,4/5" (rank 0 gets five, rank 1 one).
"""
import json
import sys

import torch

from trainer import distributed as dist
from trainer.config import load_config
from trainer.engine import make_engine
from trainer.models import load_policy
from trainer.update import Sample, policy_update


def main(config_path, samples_path, out, split):
    torch.set_num_threads(1)
    dist.init_process_group()
    cfg = load_config(json.loads(open(config_path).read()))
    torch.manual_seed(0)
    policy = load_policy(cfg)
    engine = make_engine(cfg, policy)
    rows = json.loads(open(samples_path).read())
    mine = [int(i) for i in split.split("/")[dist.rank()].split(",") if i]
    metrics = policy_update(policy, engine, [Sample(**rows[i]) for i in mine], cfg)
    if getattr(engine, "zero_stage", None) == 3:
        weights = engine.model_state_dict()  # collective: the partitions put back together
    else:
        weights = policy.model.state_dict()
    if dist.is_main():
        torch.save({"weights": {k: v.float().cpu() for k, v in weights.items()},
                    "metrics": metrics, "world": dist.world_size()}, out)
    if hasattr(engine, "close"):  # a DeepSpeed engine holds process groups until closed
        engine.close()
    del engine, policy
    dist.shutdown()


if __name__ == "__main__":
    main(*sys.argv[1:])
