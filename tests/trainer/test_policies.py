"""Separate policies (``model.policies: separate``): one LoRA adapter per role over one frozen base.

Each role's adapter gets its own update and optimizer state, the checkpoint holds and resume
restores each, the frozen base (judge, KL reference) is every adapter switched off, and rollouts
run the adapter of the role that plays (the decode-graph key and the vLLM push name it)."""
import json

import pytest
import torch

from trainer.checkpoint import load_checkpoint, save_checkpoint
from trainer.config import ConfigError, load_config
from trainer.engine import make_engine
from trainer.models import load_policy
from trainer.rollout import HFGenerator, SamplingParams
from trainer.update import Sample, policy_update


def _separate(tiny_config, method="scope", **model):
    return load_config(tiny_config(method, model={"lora": {"r": 4, "alpha": 8}, "policies": "separate", **model},
                                   train={"lr": 1e-2, "kl_coef": 0.0}))


def _samples(tok, role, n=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    prompt = tok.encode(f"The {role} writes", add_special_tokens=False)
    return [Sample(prompt_ids=prompt, completion_ids=torch.randint(100, 2000, (6,), generator=g).tolist(),
                   loss_mask=[1] * 6, old_logprobs=[-7.0] * 6, advantage=1.0 if i % 2 else -1.0, role=role)
            for i in range(n)]


def _adapter(policy, role):
    return {n: p.detach().clone() for n, p in policy.role_parameters(role).items()}


def _moved(before, after):
    return any(not torch.equal(before[n], after[n]) for n in before)


@pytest.fixture
def separate(tiny_config):
    cfg = _separate(tiny_config)
    policy = load_policy(cfg)
    return cfg, policy, make_engine(cfg, policy)


def test_scope_and_piplay_default_to_separate_policies_and_shared_stays_an_option():
    for method, roles in (("scope", ("challenger", "solver")), ("piplay", ("examiner", "student"))):
        cfg = load_config({"method": method})
        assert cfg.model.policies == "separate" and cfg.model.lora.r > 0 and cfg.section.roles == roles
        assert load_config({"method": method, "model": {"policies": "shared", "lora": {"r": 0}}}).model.policies == "shared"
    assert load_config({"method": "spice"}).model.policies == "shared"


@pytest.mark.parametrize("data, key, says", [
    ({"method": "scope", "model": {"lora": {"r": 0}}}, "model.lora.r", "set model.lora.r > 0"),  # adapters need LoRA
    ({"method": "spice", "model": {"policies": "separate", "lora": {"r": 8}}}, "model.policies",
     "does not switch policies per role yet"),
    ({"method": "piplay", "train": {"engine": "deepspeed"}}, "train.engine", "set train.engine=torch"),
])
def test_separate_policies_refuse_what_they_cannot_do_and_say_how_to_fix_it(data, key, says):
    with pytest.raises(ConfigError) as err:
        load_config(data)
    problems = dict(err.value.problems)
    assert says in problems[key] and "model.policies=shared" in problems[key]


def test_each_role_updates_only_its_own_adapter_with_its_own_optimizer(separate):
    cfg, policy, engine = separate
    tok = policy.tokenizer
    c0, s0 = _adapter(policy, "challenger"), _adapter(policy, "solver")
    out = policy_update(policy, engine, _samples(tok, "challenger"), cfg)
    c1, s1 = _adapter(policy, "challenger"), _adapter(policy, "solver")
    assert set(out) == {"challenger"} and _moved(c0, c1) and not _moved(s0, s1)
    assert engine.for_role("challenger").steps == 1 and engine.for_role("solver").steps == 0

    out = policy_update(policy, engine, _samples(tok, "solver", seed=1) + _samples(tok, "challenger", seed=2), cfg)
    c2, s2 = _adapter(policy, "challenger"), _adapter(policy, "solver")
    assert set(out) == {"challenger", "solver"} and _moved(c1, c2) and _moved(s1, s2)
    assert engine.for_role("challenger").steps == 2 and engine.for_role("solver").steps == 1
    # two policies now: same-position weights differ between the roles, and each optimizer holds only its role's
    assert any(not torch.equal(c2[n], s2[n.replace(".challenger.", ".solver.")]) for n in c2 if "lora_B" in n)
    for role in ("challenger", "solver"):
        mine = {id(p) for p in policy.role_parameters(role).values()}
        state = engine.for_role(role).optimizer.state
        assert state and all(id(p) in mine for p in state)


def test_the_frozen_base_is_every_adapter_off_and_each_role_samples_its_own(separate, tiny_model_dir):
    from transformers import AutoModelForCausalLM

    cfg, policy, engine = separate
    tok = policy.tokenizer
    for role, seed in (("challenger", 0), ("solver", 1)):
        for _ in range(3):
            policy_update(policy, engine, _samples(tok, role, seed=seed), cfg)
    ids = torch.tensor([tok.encode("A question about rivers", add_special_tokens=False)])
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        want = base(input_ids=ids).logits
        judge = policy.reference_logits(ids, torch.ones_like(ids))  # what the judge and the KL term see
        with policy.acting("challenger"):
            chal = policy.model(input_ids=ids).logits
        with policy.acting("solver"):
            solv = policy.model(input_ids=ids).logits
    assert torch.allclose(judge, want, atol=1e-5)
    assert not torch.allclose(chal, want, atol=1e-3) and not torch.allclose(solv, chal, atol=1e-3)

    gen = HFGenerator.from_policy(policy)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=4)
    prompt = ids[0].tolist()
    with policy.acting("solver"):  # the judge: adapters off whatever role is active
        assert gen.generate([prompt], greedy, use_adapter=False)[0].completion_ids == \
            HFGenerator(base, tok).generate([prompt], greedy)[0].completion_ids
    lps = {}
    for role in ("challenger", "solver"):
        with policy.acting(role):
            lps[role] = gen.generate([prompt], greedy)[0].logprobs
    assert lps["challenger"] != lps["solver"]


def test_the_decode_graph_key_and_the_vllm_push_name_the_active_role(separate):
    from trainer.rollout.hf import adapter_key
    from trainer.rollout.vllm_backend import _weights_for_vllm, active_adapter

    cfg, policy, engine = separate
    tok = policy.tokenizer
    for role, seed in (("challenger", 0), ("solver", 1)):
        policy_update(policy, engine, _samples(tok, role, seed=seed), cfg)
    keys, pushed = {}, {}
    for role in ("challenger", "solver"):
        with policy.acting(role):
            keys[role], pushed[role] = adapter_key(policy.model, True), dict(_weights_for_vllm(policy.model))
            assert active_adapter(policy.model) == role
    assert keys == {"challenger": "challenger", "solver": "solver"} and adapter_key(policy.model, False) is False
    # vLLM gets the active role's merge: W + scale * B @ A of that adapter only
    name = next(n for n in pushed["solver"] if n.endswith("q_proj.weight"))
    layer = policy.model.get_base_model().model.layers[int(name.split(".")[2])].self_attn.q_proj
    for role in ("challenger", "solver"):
        merged = layer.base_layer.weight + layer.scaling[role] * layer.lora_B[role].weight @ layer.lora_A[role].weight
        assert torch.allclose(pushed[role][name].float(), merged.detach(), atol=1e-2)
    assert not torch.equal(pushed["challenger"][name], pushed["solver"][name])


def test_checkpoint_holds_each_role_and_resume_restores_both(separate, tmp_path):
    cfg, policy, engine = separate
    tok = policy.tokenizer
    for role, seed in (("challenger", 0), ("solver", 1)):
        policy_update(policy, engine, _samples(tok, role, seed=seed), cfg)
    folder = save_checkpoint(tmp_path / "run", 1, cfg, policy, engine)
    assert (folder / "model" / "challenger" / "adapter_model.safetensors").is_file()
    assert (folder / "model" / "solver" / "adapter_model.safetensors").is_file()
    assert json.loads((folder / "meta.json").read_text())["answer_role"] == "solver"

    fresh = load_policy(cfg)
    fresh_engine = make_engine(cfg, fresh)
    load_checkpoint(folder, cfg, fresh, fresh_engine)
    for role in ("challenger", "solver"):
        want, got = _adapter(policy, role), _adapter(fresh, role)
        assert want.keys() == got.keys() and all(torch.equal(want[n], got[n]) for n in want)
        assert fresh_engine.for_role(role).steps == engine.for_role(role).steps == 1
        saved = engine.for_role(role).optimizer.state_dict()["state"]
        loaded = fresh_engine.for_role(role).optimizer.state_dict()["state"]
        assert saved.keys() == loaded.keys() and all(torch.equal(saved[k]["exp_avg"], loaded[k]["exp_avg"])
                                                     for k in saved)


def test_an_evaluation_of_a_separate_checkpoint_loads_the_answering_role(separate, tmp_path):
    from trainer.evaluate import describe_target

    cfg, policy, engine = separate
    folder = save_checkpoint(tmp_path / "run", 1, cfg, policy, engine)
    target = describe_target(str(folder))
    assert target["lora"] and target["path"] == str(folder / "model" / "solver") and target["step"] == 1


@pytest.mark.parametrize("method, section", [
    ("scope", {"challenger_steps": 1, "solver_steps": 1, "challenger_prompts_per_step": 1,
               "solver_prompts_per_step": 1, "scoring_rollouts": 2, "filter_rollouts": 2, "candidate_rounds": 1,
               "max_turns": 2, "max_tool_tokens": 32, "judge_max_new_tokens": 8}),
    ("piplay", {"examiner_steps": 1, "student_steps": 1, "student_attempts": 2, "max_turns": 2,
                "max_tool_tokens": 32, "distill_top_k": 8}),
])
def test_scope_and_piplay_run_and_resume_with_separate_policies(method, section, tiny_config, tmp_path):
    from trainer.checkpoint import latest_checkpoint
    from trainer.runner import run

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"title": t, "text": t + " is a river in Europe that flows to the sea."}) + "\n"
                              for t in ("Danube", "Rhine", "Elbe")))
    cfg = tiny_config(method, model={"lora": {"r": 4, "alpha": 8}, "policies": "separate"},
                      rollout={"max_new_tokens": 16, "group_size": 2}, train={"steps": 2, "prompts_per_step": 1},
                      corpus={"path": str(corpus)}, **{method: section})
    result = run(cfg, run_dir=tmp_path / "run")
    assert result.steps == 2
    roles = load_config(cfg).section.roles
    ckpt = latest_checkpoint(tmp_path / "run")
    assert all((ckpt / "model" / r / "adapter_model.safetensors").is_file() for r in roles)
    assert set(torch.load(ckpt / "engine.pt", weights_only=True)["roles"]) == set(roles)
    again = run(cfg, run_dir=tmp_path / "run", resume=True, overrides=["train.steps=3"])
    assert again.steps == 3


def test_the_piplay_teacher_is_an_ema_of_the_students_adapter_and_pulls_only_it(tiny_config):
    from tests.trainer.test_piplay import _student_samples
    from trainer.methods.piplay_parts import TeacherEMA, make_distill_loss

    cfg = _separate(tiny_config, "piplay")
    policy = load_policy(cfg)
    engine = make_engine(cfg, policy)
    teacher = TeacherEMA.from_parameters(policy.role_parameters("student"), rate=0.05)
    assert teacher.state and all(".student." in n for n in teacher.state)
    with torch.no_grad():  # the teacher drifts from the student, as after a few EMA steps
        for t in teacher.state.values():
            t.add_(torch.randn_like(t) * 0.05)
    samples = _student_samples(policy.tokenizer, "Who founded X?", "Source passage: Ann Lee founded X.")
    examiner, student = _adapter(policy, "examiner"), _adapter(policy, "student")
    extra = make_distill_loss(policy, teacher, 50, "reverse_kl", 1.0)
    first = policy_update(policy, engine, samples, cfg, extra)["student"]["distill"]
    assert first > 0  # the teacher's tensors stood in for the student's adapter
    assert _moved(student, _adapter(policy, "student")) and not _moved(examiner, _adapter(policy, "examiner"))
    second = policy_update(policy, engine, samples, cfg, extra, step=False)["student"]["distill"]
    assert second < first  # one step toward the teacher
    before = {n: t.clone() for n, t in teacher.state.items()}
    teacher.update(policy.model)
    now = dict(policy.model.named_parameters())
    assert all(torch.allclose(teacher.state[n], 0.95 * before[n] + 0.05 * now[n].detach()) for n in before)
