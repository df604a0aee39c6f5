"""Background checkpoint saves (checkpoint.background): the loop waits only for the copy to host memory,
the write happens in a thread, what is written is the state at the save (not what training did
meanwhile), a process killed mid-write leaves the previous checkpoint to resume from, and the run's end
waits for the last write."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

import trainer
from trainer.checkpoint import BackgroundSaver, list_checkpoints, load_checkpoint, save_checkpoint
from trainer.config import load_config
from trainer.engine import make_engine
from trainer.models import load_policy

# A model whose checkpoint (fp32 weights + Adam moments, ~0.2 GB) takes a real while to write and fsync,
# against steps that stay cheap on CPU (short prompts, 4 new tokens).
MID = dict(hidden_size=256, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=4,
           num_key_value_heads=2, max_position_embeddings=4096, rope_theta=10000.0, tie_word_embeddings=True)


@pytest.fixture(scope="module")
def mid_model_dir(tmp_path_factory, smollm2_tokenizer):
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = smollm2_tokenizer
    out = tmp_path_factory.mktemp("mid-llama")
    config = LlamaConfig(vocab_size=len(tok), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id, **MID)
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(out)
    tok.save_pretrained(out)
    return out


def _one_step(policy, engine):
    loss = policy.model(input_ids=torch.tensor([[1, 2, 3]]), labels=torch.tensor([[1, 2, 3]])).loss
    engine.backward(loss)
    engine.step()


def _tensors(path):
    from safetensors.torch import load_file

    out = {}
    for f in sorted(path.rglob("*.safetensors")):
        out.update({f"{f.relative_to(path)}:{k}": v for k, v in load_file(f).items()})
    return out


@pytest.mark.parametrize("lora", [0, 2])
def test_a_background_save_writes_the_state_at_the_save_not_what_training_did_meanwhile(tiny_config, tmp_path, lora):
    """The save returns before the write; the weights and optimizer then change (another optimizer step while
    the write runs). The background checkpoint equals a synchronous save taken at the same moment, file for
    file and tensor for tensor (LoRA: the same adapter entries), and differs from the weights after the step."""
    cfg = load_config(tiny_config(model={"lora": {"r": lora}}, checkpoint={"keep_last": 5}))
    policy = load_policy(cfg)
    engine = make_engine(cfg, policy)
    _one_step(policy, engine)
    torch.manual_seed(123)  # the RNG state at the save is the one both checkpoints hold
    reference = save_checkpoint(tmp_path / "sync", 1, cfg, policy, engine, {"cursor": [1, 2]})
    torch.manual_seed(123)
    saver = BackgroundSaver()
    state = {"cursor": [1, 2]}
    path, finished = saver.save(tmp_path / "bg", 1, cfg, policy, engine, state)
    assert finished == []  # handed out by wait(), once written
    state["cursor"].append(3)  # the recipe state changes after the save: the checkpoint keeps the old one
    _one_step(policy, engine)
    with torch.no_grad():
        for p in policy.model.parameters():
            if p.requires_grad:
                p.add_(1.0)
    [result] = saver.wait()
    assert result.step == 1 and result.path == str(path) and result.write_seconds > 0 and result.error is None

    assert sorted(p.relative_to(path).as_posix() for p in path.rglob("*")) == \
        sorted(p.relative_to(reference).as_posix() for p in reference.rglob("*"))
    got, want = _tensors(path / "model"), _tensors(reference / "model")
    assert got.keys() == want.keys() and got
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=0, atol=0)
    got_engine = torch.load(path / "engine.pt", weights_only=True)
    want_engine = torch.load(reference / "engine.pt", weights_only=True)
    assert got_engine["steps"] == want_engine["steps"] == 1
    for idx, moments in want_engine["optimizer"]["state"].items():
        for name, value in moments.items():
            torch.testing.assert_close(got_engine["optimizer"]["state"][idx][name], value, rtol=0, atol=0)
    got_state = torch.load(path / "state.pt", weights_only=True)
    want_state = torch.load(reference / "state.pt", weights_only=True)
    assert got_state["recipe"] == {"cursor": [1, 2]}
    assert torch.equal(got_state["rng"]["torch"], want_state["rng"]["torch"])

    live = {n: p for n, p in policy.model.named_parameters() if p.requires_grad}
    fresh = load_policy(cfg)
    load_checkpoint(path, cfg, fresh, make_engine(cfg, fresh))
    restored = dict(fresh.model.named_parameters())
    changed = [n for n in live if not torch.equal(restored[n], live[n])]
    assert changed == list(live)  # every trained weight restored as it was at the save, not after the step


def test_the_loop_waits_for_the_copy_not_the_write(tiny_config, mid_model_dir, tmp_path):
    """A ~0.2 GB checkpoint (weights and Adam moments): save() returns after the copy to host memory; the
    write (files, fsync, rename) takes longer and runs meanwhile. The second save reuses the host buffers."""
    cfg = load_config(tiny_config(model={"name_or_path": str(mid_model_dir)}))
    policy = load_policy(cfg)
    engine = make_engine(cfg, policy)
    _one_step(policy, engine)
    saver = BackgroundSaver()
    results = []
    for step in (1, 2):
        path, _ = saver.save(tmp_path, step, cfg, policy, engine)
        assert saver.in_flight  # returned while the write runs
        [result] = saver.wait()
        results.append(result)
        assert (path / "meta.json").is_file()
    for r in results:
        assert r.blocked_seconds < r.write_seconds, results
    assert sum(r.blocked_seconds for r in results) < 0.5 * sum(r.write_seconds for r in results), results
    assert saver.copier.bytes > 150e6  # the weights and both Adam moments were copied (fp32)


def test_a_run_with_background_saves_reports_them_and_its_end_waits_for_the_last(tiny_config, tmp_path):
    result = trainer.run(tiny_config(train={"steps": 3}, checkpoint={"every": 1, "keep_last": 2}), run_dir=tmp_path)
    assert result.final_checkpoint.endswith("step-000003")
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-000002", "step-000003"]
    assert (tmp_path / "checkpoints" / "step-000003" / "meta.json").is_file()  # written before run() returned
    assert [json.loads(line)["step"] for line in (tmp_path / "checkpoints.jsonl").read_text().splitlines()] == [1, 2, 3]
    assert result.saves["saves"] == 3 and result.saves["write_seconds"] > 0
    system = [r for r in result.metrics if r["role"] == "system" and "save_blocked_seconds" in r]
    # a step's row counts the writes that finished since the step before (a row is logged only then); the
    # last write may finish after the last row, so the rows add up to at most the run's total
    assert system and all(r["save_write_seconds"] > 0 for r in system)
    assert sum(r["save_write_seconds"] for r in system) <= result.saves["write_seconds"] + 1e-9
    events = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    [totals] = [e for e in events if e.get("data", {}).get("what") == "checkpoint_saves"]
    assert totals["data"]["saves"] == 3 and totals["data"]["background"] is True
    assert "the step loop waited" in totals["message"]

    sync = trainer.run(tiny_config(train={"steps": 1}, checkpoint={"background": False}), run_dir=tmp_path / "sync")
    assert sync.saves["saves"] == 1 and sync.saves["blocked_seconds"] == sync.saves["write_seconds"]


RUN = """
import json, sys
import trainer
trainer.run(json.loads(sys.argv[1]), run_dir=sys.argv[2])
"""


def test_a_kill_during_a_background_write_leaves_a_resumable_run(tiny_config, mid_model_dir, tmp_path):
    """A training process is SIGKILLed while its step-2 checkpoint is being written in the background. The
    partial write stays a hidden temporary folder; the run resumes from step 1 (the newest whole checkpoint),
    takes steps 2 and 3, and its first write removes the dead process's temporary folder."""
    cfg = tiny_config(model={"name_or_path": str(mid_model_dir)}, rollout={"max_new_tokens": 4, "group_size": 2},
                      train={"steps": 40, "prompts_per_step": 1, "micro_batch_size": 2, "device": "cpu"},
                      checkpoint={"every": 1, "keep_last": 3})
    run_dir = tmp_path / "run"
    env = {**os.environ, "SELFPLAY_TORCH_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-c", RUN, json.dumps(cfg), str(run_dir)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    ckpts = run_dir / "checkpoints"
    deadline = time.monotonic() + 300
    partial = None
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if (ckpts / "step-000001" / "meta.json").is_file():
                found = [p for p in ckpts.iterdir() if p.name.startswith(".tmp-step-000002-")]
                if found:
                    os.kill(proc.pid, signal.SIGKILL)
                    partial = found[0]
                    break
            time.sleep(0.002)
    finally:
        if proc.poll() is None and partial is None:
            proc.kill()
        proc.wait()
    assert partial is not None, f"never saw the step-2 write (rc {proc.returncode}): {proc.stderr.read()[-2000:]!r}"
    assert proc.returncode == -signal.SIGKILL
    assert partial.is_dir() and not (partial / "meta.json").exists()  # killed mid-write
    assert [p.name for p in list_checkpoints(run_dir)] == ["step-000001"]

    cfg["train"]["steps"] = 3
    result = trainer.run(cfg, run_dir=run_dir, resume=True)
    assert result.steps == 3 and len(result.step_seconds) == 2  # steps 2 and 3, after step 1's checkpoint
    assert sorted({r["step"] for r in result.metrics}) == [2, 3]
    assert [p.name for p in list_checkpoints(run_dir)] == ["step-000001", "step-000002", "step-000003"]
    assert not partial.exists() and not [p for p in ckpts.iterdir() if p.name.startswith(".tmp")]
