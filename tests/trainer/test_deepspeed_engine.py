"""DeepSpeed engine (CPU, gloo): config, parity with TorchEngine, resume on another world size,
and the multi-GPU launch command. Skips the engine tests cleanly where deepspeed is absent."""
from __future__ import annotations

import copy
import importlib.util
import os

import pytest
import torch

from trainer.engine.deepspeed_engine import ds_config
from trainer.launch import child_env, launch_command, strip_launch_flags

VOCAB = 96


# -- pure parts (no deepspeed needed) ----------------------------------------------------------
def test_ds_config_one_boundary_per_step_and_no_jit_ops():
    cfg = ds_config(zero_stage=2, lr=3e-6, grad_clip=0.5, offload_optimizer=True)
    assert cfg["managed_gradient_accumulation"] is False  # step() is the accumulation boundary
    assert cfg["gradient_accumulation_steps"] == 1
    assert cfg["optimizer"]["params"]["torch_adam"] is True and cfg["optimizer"]["type"] == "AdamW"
    assert cfg["optimizer"]["params"]["lr"] == 3e-6 and cfg["gradient_clipping"] == 0.5
    assert cfg["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert cfg["zero_force_ds_cpu_optimizer"] is False  # torch AdamW on the offloaded states
    # its throughput timer would sync the GPU in every forward, and inside a decode-graph capture (H100, step 3)
    assert cfg["timers"] == {"throughput": {"enabled": False}}
    z3 = ds_config(zero_stage=3, offload_params=True)["zero_optimization"]
    assert z3["stage"] == 3 and z3["stage3_gather_16bit_weights_on_model_save"] and z3["offload_param"]
    # DeepSpeed refuses overlap_comm with our own accumulation unless gradients are partitioned
    # (seen on the H100: ZeRO-1 did not start); stage 2 and 3 keep it
    assert [ds_config(zero_stage=s)["zero_optimization"]["overlap_comm"] for s in (1, 2, 3)] == [False, True, True]
    with pytest.raises(ValueError, match="zero_stage"):
        ds_config(zero_stage=4)
    with pytest.raises(ValueError, match="offload_params needs zero_stage 3"):
        ds_config(zero_stage=2, offload_params=True)


def test_launch_command_torchrun_and_deepspeed(tmp_path):
    argv = ["run", "cfg.yaml", "--gpus", "4", "--set", "train.steps=3", "--launcher=torchrun"]
    assert strip_launch_flags(argv) == ["run", "cfg.yaml", "--set", "train.steps=3"]
    cmd = launch_command(argv, 4, python="py")
    assert cmd == ["py", "-m", "torch.distributed.run", "--nproc_per_node=4", "--standalone",
                   "-m", "trainer", "run", "cfg.yaml", "--set", "train.steps=3"]
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("worker-1 slots=8\nworker-2 slots=8\n")
    cmd = launch_command(argv, 8, launcher="deepspeed", hostfile=str(hostfile), master_port=29512, python="py")
    assert cmd == ["py", "-m", "deepspeed.launcher.runner", "--num_gpus", "8", "--hostfile", str(hostfile),
                   "--master_port", "29512", "--module", "trainer", "run", "cfg.yaml", "--set", "train.steps=3"]
    with pytest.raises(ValueError, match="needs --launcher deepspeed"):
        launch_command(argv, 2, hostfile=str(hostfile))
    with pytest.raises(ValueError, match="does not exist"):
        launch_command(argv, 2, launcher="deepspeed", hostfile=str(tmp_path / "nope"))
    with pytest.raises(ValueError, match=">= 1"):
        launch_command(argv, 0)
    env = child_env({"PATH": "/bin"})
    assert env["SELFPLAY_LAUNCHED"] == "1" and env["NCCL_NVLS_ENABLE"] == "0"


# -- the engine on CPU -------------------------------------------------------------------------
needs_deepspeed = pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None,
                                     reason="deepspeed is not installed (pip install -e .[gpu])")


def _no_shm_build():
    """DeepSpeed's CPU backend JIT-builds an optional shared-memory all-reduce (minutes of g++);
    gloo does the same job, so skip that build."""
    import importlib

    # by module name: the attribute deepspeed.comm.torch is the real torch (re-exported)
    importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None


def _model(seed=0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False)
    return LlamaForCausalLM(cfg)


def _micro_batches(step: int):
    g = torch.Generator().manual_seed(100 + step)
    return [torch.randint(0, VOCAB, (2, 9), generator=g) for _ in range(4)]


HP = dict(lr=5e-3, warmup_steps=1, grad_clip=0.05, weight_decay=0.01)


def _train(engine, model, steps, rank=0, world=1):
    norms = []
    for s in steps:
        mine = _micro_batches(s)[rank::world]
        for x in mine:
            engine.backward(model(input_ids=x, labels=x).loss / (len(mine) * 1.0))
        norms.append(engine.step())
    return norms


def _ds_engine(model, stage):
    from trainer.engine.deepspeed_engine import DeepSpeedEngine

    _no_shm_build()
    return DeepSpeedEngine(model, zero_stage=stage, bf16=False, **HP)


@needs_deepspeed
@pytest.mark.parametrize("stage", [2, 3])
def test_deepspeed_matches_torch_engine(stage):
    from trainer.engine import TorchEngine

    ref_model = _model()
    ds_model = copy.deepcopy(ref_model)
    ref = TorchEngine(ref_model.parameters(), **HP)
    ref_norms = _train(ref, ref_model, range(3))
    engine = _ds_engine(ds_model, stage)
    ds_norms = _train(engine, engine.ds.module, range(3))
    assert engine.steps == 3 and engine.lr == pytest.approx(HP["lr"])
    assert ds_norms == pytest.approx(ref_norms, rel=1e-4)
    with engine.gathered():
        for (name, a), b in zip(ref_model.named_parameters(), engine.ds.module.parameters()):
            torch.testing.assert_close(b.detach(), a.detach(), atol=2e-6, rtol=1e-4, msg=name)


def _gloo_threads() -> list[str]:
    """This process's threads that belong to a process group (gloo transport and workers, the store)."""
    tasks = "/proc/self/task"
    names = []
    for t in os.listdir(tasks):
        try:
            with open(f"{tasks}/{t}/comm") as f:
                names.append(f.read().strip())
        except OSError:  # the thread ended between listing and reading: it is not left
            pass
    return sorted(n for n in names if n.startswith(("gloo", "pt_gloo", "pt_tcpstore")))


def _spawn_ranks(fn, world: int, *args):
    """fn(rank, world, *args) in `world` spawned CPU processes that fn joins in one gloo group (the
    engine does; a group made before `import deepspeed` would stay referenced by DeepSpeed's default
    arguments). A rank whose fn returns leaves through trainer.distributed.shutdown() and checks that
    no thread of the group is left (one still running at interpreter exit can abort it: SIGABRT)."""
    import torch.multiprocessing as mp

    from trainer.distributed import free_port

    mp.spawn(_rank, args=(fn, world, free_port(), args), nprocs=world, join=True)


def _rank(rank, fn, world, port, args):
    from trainer import distributed as dist

    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    fn(rank, world, *args)
    dist.shutdown()
    left = _gloo_threads()
    assert not left, f"rank {rank}: threads of the process group outlived shutdown(): {left}"


def _train_and_save(rank, world, stage, out):
    engine = _ds_engine(_model(), stage)
    _train(engine, engine.ds.module, range(2), rank, world)
    state = engine.state_dict()  # collective
    if rank == 0:
        torch.save(state, out)
    engine.close()


@needs_deepspeed
def test_checkpoint_resumes_on_a_different_world_size(tmp_path):
    """2 ranks (ZeRO-2) train 2 steps and save; 1 rank resumes for step 3. The result equals
    3 steps on 1 rank: weights, Adam moments, step count and schedule all came across."""
    out = tmp_path / "ckpt.pt"
    _spawn_ranks(_train_and_save, 2, 2, str(out))
    state = torch.load(out, weights_only=False)
    assert state["world_size"] == 2 and state["steps"] == 2 and state["adam_step"] == 2

    straight = _ds_engine(_model(), 2)
    _train(straight, straight.ds.module, range(3))
    expected = {n: p.detach().clone() for n, p in straight.ds.module.named_parameters()}

    resumed = _ds_engine(_model(seed=7), 2)  # different init: everything must come from the checkpoint
    resumed.load_state_dict(state)
    assert resumed.steps == 2
    _train(resumed, resumed.ds.module, [2])
    for name, p in resumed.ds.module.named_parameters():
        torch.testing.assert_close(p.detach(), expected[name], atol=2e-6, rtol=1e-4, msg=name)


@needs_deepspeed
def test_load_rejects_a_foreign_checkpoint():
    engine = _ds_engine(_model(), 2)
    with pytest.raises(ValueError, match="not a DeepSpeed engine checkpoint"):
        engine.load_state_dict({"optimizer": {}, "scheduler": {}, "steps": 1})


@needs_deepspeed
def test_a_lora_policy_update_under_zero2_matches_the_torch_engine(tiny_config):
    """train.engine auto picks ZeRO-2 for LoRA policies on a GPU: the whole update pass (shared
    prompt, packing off) gives the torch engine's LoRA weights after one optimizer step."""
    from trainer.config import load_config
    from trainer.engine import make_engine
    from trainer.models import load_policy
    from trainer.update import Sample, policy_update

    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(5, 900, (12,), generator=g).tolist()
    samples = [Sample(prompt, torch.randint(5, 900, (n,), generator=g).tolist(), [1] * n, [-3.0] * n, advantage=a)
               for n, a in ((6, 1.0), (4, -1.0), (5, 0.5), (3, -0.5))]
    after = {}
    for engine_name in ("torch", "deepspeed"):
        cfg = load_config(tiny_config(model={"lora": {"r": 4}, "dtype": "float32"},
                                      train={"engine": engine_name, "lr": 1e-2, "grad_clip": 0.5}))
        torch.manual_seed(0)
        policy = load_policy(cfg)
        if engine_name == "deepspeed":
            _no_shm_build()
        engine = make_engine(cfg, policy)
        assert (getattr(engine, "zero_stage", None) == 2) == (engine_name == "deepspeed")
        metrics = policy_update(policy, engine, samples, cfg)["policy"]
        assert metrics["prompt_shared"] == 1.0 and metrics["grad_norm"] > 0
        after[engine_name] = ({n: p.detach().float().clone() for n, p in policy.model.named_parameters()
                               if "lora_" in n}, metrics["grad_norm"])
    (torch_w, torch_norm), (ds_w, ds_norm) = after["torch"], after["deepspeed"]
    assert ds_norm == pytest.approx(torch_norm, rel=1e-4)
    assert len(torch_w) >= 4 and set(torch_w) == set(ds_w)
    for name, value in torch_w.items():
        torch.testing.assert_close(ds_w[name], value, atol=2e-6, rtol=1e-4, msg=name)
