"""pi-Play: hop sampling, examiner parsing and format, QCP, difficulty table, hop-group
advantages, lambda schedule and the teacher EMA."""

import random
from types import SimpleNamespace

import pytest
import torch

from trainer.algos.advantages import group_normalized
from trainer.rewards import piplay_difficulty
from trainer.methods.parts import stratified_counts, stratified_draw
from trainer.methods.piplay_parts import (
    TeacherEMA,
    build_qcp,
    examiner_format,
    examiner_prompt,
    lambda_for_iteration,
    make_distill_loss,
    parse_question_answer,
    student_prompt,
    teacher_prompt,
)


def _turns(*assistant):
    out = []
    for i, text in enumerate(assistant):
        out.append({"role": "assistant", "text": text})
        if i < len(assistant) - 1:
            out.append({"role": "tool", "text": "<information>Doc 1 (Title: X) ...</information>"})
    return out


def test_hops_follow_the_4_3_2_1_ratio():
    assert stratified_counts(10, [4, 3, 2, 1]) == [4, 3, 2, 1]
    hops = stratified_draw(20, [4, 3, 2, 1], random.Random(1))
    assert [hops.count(h) for h in (1, 2, 3, 4)] == [8, 6, 4, 2]


def test_examiner_prompt_parse_and_format():
    assert "exactly 2 search(es)" in examiner_prompt("Passage.", 3)
    assert "needs no search" in examiner_prompt("Passage.", 1)
    with pytest.raises(ValueError):
        examiner_prompt("p", 0)
    final = "<think>ok</think><question>Who founded X?</question><answer> Ann Lee </answer>"
    assert parse_question_answer(final) == ("Who founded X?", "Ann Lee")
    assert parse_question_answer("<question>Q</question>") == ("Q", None)
    # 2 hops: think 1, tool min(1/1, 1) = 1, question+answer 1 -> 1.0
    assert examiner_format(_turns("<think>a</think><search>X founder</search>", final), 2) == 1.0
    # no think in the final turn: (0.5 + 1 + 1) / 3 = 0.8333
    assert examiner_format(_turns("<think>a</think><search>q</search>", final[len("<think>ok</think>"):]),
                           2) == pytest.approx(0.833333, abs=1e-6)
    # 1 hop that searched anyway: tool 0 -> (1 + 0 + 1)/3
    assert examiner_format(_turns("<think>a</think><search>q</search>", final), 1) == pytest.approx(2 / 3)
    assert examiner_format([], 2) == 0.0


def test_the_qcp_holds_passage_searches_results_and_answer_and_only_the_teacher_sees_it():
    turns = _turns("<think>follow Ann</think><search>Ann Lee</search>", "<question>Q?</question><answer>A</answer>")
    qcp = build_qcp("Ann Lee founded X.", turns, "Q?", "A")
    assert qcp.index("Source passage") < qcp.index("Ann Lee</search>") < qcp.index("search results") \
        < qcp.index("Answer: A")
    assert "construction_path" in teacher_prompt("Q?", qcp) and qcp in teacher_prompt("Q?", qcp)
    assert teacher_prompt("Q?", qcp).startswith(student_prompt("Q?"))
    assert qcp not in student_prompt("Q?")


def test_difficulty_table_for_five_attempts():
    # (n - k) / (n - 1) for 0 < k < n, n = 5: k=1 -> 4/4, 2 -> 3/4, 3 -> 2/4, 4 -> 1/4; k = 0 or 5 -> 0
    assert [piplay_difficulty(k, 5) for k in range(6)] == [0.0, 1.0, 0.75, 0.5, 0.25, 0.0]


def test_hop_group_advantages_normalise_within_each_hop_count():
    # examiner rewards r_d + 0.5 r_fmt for 5 questions: hops 1,1,1,2,2
    rewards = [1.0 + 0.5, 0.5 + 0.5, 0.0 + 0.5, 0.75 + 0.5, 0.25 + 0.5]
    adv = group_normalized(rewards, [1, 1, 1, 2, 2])
    # hop 1: mean 1.0, sample std 0.5 -> (0.5, 0, -0.5) / 0.5 = (1, 0, -1)
    # hop 2: mean 1.0, sample std sqrt(((.25)^2 * 2) / 1) = 0.35355 -> (+-0.25) / 0.35355 = +-0.7071
    assert adv.tolist() == pytest.approx([1.0, 0.0, -1.0, 0.707105, -0.707105], abs=1e-4)


def test_lambda_decays_per_iteration_and_the_last_value_repeats():
    assert [lambda_for_iteration([0.03, 0.003, 0.002], i) for i in range(4)] == [0.03, 0.003, 0.002, 0.002]


def _tiny_model():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
    return LlamaForCausalLM(cfg)


def test_teacher_ema_numbers():
    lin = torch.nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        lin.weight.fill_(1.0)
    teacher = TeacherEMA.from_model(lin, rate=0.05)
    with torch.no_grad():
        lin.weight.fill_(3.0)
    teacher.update(lin)
    # 0.95 * 1.0 + 0.05 * 3.0 = 1.1
    assert teacher.state["weight"].item() == pytest.approx(1.1)
    teacher.update(lin)
    # 0.95 * 1.1 + 0.05 * 3.0 = 1.195
    assert teacher.state["weight"].item() == pytest.approx(1.195)
    assert lin.weight.item() == 3.0  # the student is untouched


def test_teacher_logits_use_the_teacher_weights_without_touching_the_student():
    model = _tiny_model()
    teacher = TeacherEMA.from_model(model, rate=0.05)
    ids = torch.tensor([[1, 2, 3, 4]])
    mask = torch.ones_like(ids)
    before = model(input_ids=ids, attention_mask=mask).logits.detach()
    torch.testing.assert_close(teacher.logits(model, ids, mask), before)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1)
    after = model(input_ids=ids, attention_mask=mask).logits.detach()
    assert not torch.allclose(after, before)
    torch.testing.assert_close(teacher.logits(model, ids, mask), before)  # teacher lags: still old weights
    teacher.update(model)
    moved = teacher.logits(model, ids, mask)
    assert not torch.allclose(moved, before) and not torch.allclose(moved, after)


def test_with_lora_the_teacher_copies_only_the_adapter():
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(_tiny_model(), LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"]))
    teacher = TeacherEMA.from_model(model)
    assert teacher.state and all("lora_" in name for name in teacher.state)
    ids = torch.tensor([[1, 2, 3]])
    torch.testing.assert_close(teacher.logits(model, ids, torch.ones_like(ids)),
                               model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits.detach())
    sd = teacher.state_dict()
    other = TeacherEMA.from_model(model)
    other.load_state_dict(sd)
    assert all(torch.equal(other.state[n], teacher.state[n]) for n in teacher.state)


def test_with_lora_the_teacher_is_an_ema_of_the_adapted_weights_not_of_the_factors():
    """theta_T <- 0.95 theta_T + 0.05 (W0 + s B A): the teacher's forward equals a plain model whose
    adapted weights are that average; the average of the factors, EMA(B) EMA(A), is another model."""
    import copy

    from peft import LoraConfig, get_peft_model

    from trainer.methods.piplay_parts import make_teacher

    base = _tiny_model()
    plain = copy.deepcopy(base)
    model = get_peft_model(base, LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"]))
    layers = {n: m for n, m in model.named_modules() if hasattr(m, "get_delta_weight") and "default" in m.lora_A}
    assert len(layers) == 2

    def factors(seed):
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for m in layers.values():
                for p in (m.lora_A["default"].weight, m.lora_B["default"].weight):
                    p.copy_(torch.randn(p.shape, generator=g))
        return {n: (m.lora_B["default"].weight.clone(), m.lora_A["default"].weight.clone()) for n, m in layers.items()}

    first = factors(1)
    teacher = make_teacher(SimpleNamespace(is_lora=True, roles=(), model=model), "student", 0.05)
    second = factors(2)
    teacher.update(model)
    scale = {n: m.scaling["default"] for n, m in layers.items()}
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    mask = torch.ones_like(ids)

    def plain_logits(delta):
        other = copy.deepcopy(plain)
        modules = dict(other.named_modules())
        with torch.no_grad():
            for n in layers:
                w = modules[n.removeprefix("base_model.model.")].weight
                w.add_(delta(n))
        return other(input_ids=ids, attention_mask=mask).logits.detach()

    merged = plain_logits(lambda n: scale[n] * (0.95 * first[n][0] @ first[n][1] + 0.05 * second[n][0] @ second[n][1]))
    torch.testing.assert_close(teacher.logits(model, ids, mask), merged, rtol=1e-4, atol=1e-5)
    by_factors = plain_logits(lambda n: scale[n] * (0.95 * first[n][0] + 0.05 * second[n][0])
                              @ (0.95 * first[n][1] + 0.05 * second[n][1]))
    assert not torch.allclose(merged, by_factors, atol=1e-3)  # the old teacher's model
    student = model(input_ids=ids, attention_mask=mask).logits.detach()
    torch.testing.assert_close(student, plain_logits(lambda n: scale[n] * second[n][0] @ second[n][1]),
                               rtol=1e-4, atol=1e-5)  # the student's own weights were never touched
    again = make_teacher(SimpleNamespace(is_lora=True, roles=(), model=model), "student", 0.05)
    again.load_state_dict(teacher.state_dict())
    torch.testing.assert_close(again.logits(model, ids, mask), merged, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="EMAs of the LoRA factors"):
        again.load_state_dict({"rate": 0.05, "state": {}})


# --- the distillation term through the shared update pass --------------------------------------

@pytest.fixture
def tiny_policy(tiny_config):
    from trainer.config import load_config
    from trainer.engine import make_engine
    from trainer.models import load_policy

    def build(lora_r=0):
        cfg = load_config(tiny_config("piplay", model={"lora": {"r": lora_r}}, train={"lr": 1e-2}))
        policy = load_policy(cfg)
        return cfg, policy, make_engine(cfg, policy)

    return build


def _student_samples(tok, question, qcp, teacher_q=None):
    from trainer.prompts import chat
    from trainer.update import Sample

    prompt = chat(tok, None, student_prompt(question))
    teacher_ids = chat(tok, None, teacher_prompt(teacher_q or question, qcp)) if qcp is not None \
        else chat(tok, None, student_prompt(teacher_q or question))
    completion = tok.encode("<think>x</think><search>a</search><information>doc</information><answer>b</answer>",
                            add_special_tokens=False)
    mask = [1] * 8 + [0] * 6 + [1] * (len(completion) - 14)  # the middle is "tool output"
    return [Sample(prompt, completion, mask, [0.0] * len(completion), adv, role="student",
                   teacher_prompt_ids=teacher_ids) for adv in (1.0, -1.0)]


def test_distillation_is_zero_when_the_teacher_is_the_student_on_the_same_prompt(tiny_policy):
    from trainer.update import policy_update

    cfg, policy, engine = tiny_policy()
    teacher = TeacherEMA.from_model(policy.model)
    samples = _student_samples(policy.tokenizer, "Who founded X?", None)
    extra = make_distill_loss(policy, teacher, k=50, kind="reverse_kl", lam=0.03)
    metrics = policy_update(policy, engine, samples, cfg, extra_loss=extra, step=False)["student"]
    assert metrics["distill"] == pytest.approx(0.0, abs=1e-5)


@pytest.mark.parametrize("lora_r", [0, 4])
def test_the_qcp_teacher_pulls_the_student_and_only_on_model_tokens(tiny_policy, lora_r):
    from trainer.update import make_micro_batch, policy_update, trained_logits

    cfg, policy, engine = tiny_policy(lora_r)
    teacher = TeacherEMA.from_model(policy.model)
    with torch.no_grad():  # the teacher drifts from the student, as after a few EMA steps
        for t in teacher.state.values():
            t.add_(torch.randn_like(t) * 0.05)
    samples = _student_samples(policy.tokenizer, "Who founded X?", "Source passage: Ann Lee founded X.")
    mb = make_micro_batch(samples, 1.0, policy.device, shared=True)
    with torch.no_grad():
        logits = trained_logits(policy.base_model(), mb, policy.device)  # [N, V]
    per_token, m = make_distill_loss(policy, teacher, k=50, kind="reverse_kl", lam=1.0)(mb, logits)
    n_trained = sum(samples[0].loss_mask)
    assert per_token.shape == (2 * n_trained,)  # tool tokens are not scored
    assert m["distill"] > 0 and bool((per_token >= 0).all())
    # with equal and opposite advantages the policy-gradient parts cancel: the step is driven by L_SD
    before = [p.detach().clone() for p in policy.trainable_parameters()]
    metrics = policy_update(policy, engine, samples, cfg, make_distill_loss(policy, teacher, 50, "reverse_kl", 1.0))
    assert metrics["student"]["distill"] == pytest.approx(m["distill"], rel=1e-3)
    assert any(not torch.equal(b, p) for b, p in zip(before, policy.trainable_parameters()))
    with torch.no_grad():
        after = trained_logits(policy.base_model(), make_micro_batch(samples, 1.0, policy.device, True), policy.device)
    per_after, m_after = make_distill_loss(policy, teacher, 50, "reverse_kl", 1.0)(mb, after)
    assert m_after["distill"] < m["distill"]  # one step toward the teacher


# --- end to end on CPU: tiny random model, in-memory BM25 corpus -------------------------------------

CORPUS = [
    {"title": "Ann Lee", "text": "Ann Lee founded the Shaker movement in England and led it to America in 1774."},
    {"title": "Shakers", "text": "The Shakers are a religious group known for furniture, celibacy and communal life."},
    {"title": "Mount Lebanon", "text": "Mount Lebanon in New York was the main Shaker community for many decades."},
    {"title": "Furniture", "text": "Shaker furniture is simple and functional; pieces are collected in museums."},
]


@pytest.fixture
def corpus_path(tmp_path):
    import json

    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in CORPUS))
    return path


def piplay_config(tiny_config, corpus_path, steps=3):
    return tiny_config("piplay", train={"steps": steps, "prompts_per_step": 2}, rollout={"max_new_tokens": 32,
                                                                                      "group_size": 2},
                       corpus={"path": str(corpus_path)},
                       piplay={"iterations": 1, "examiner_steps": 1, "student_steps": 2, "student_attempts": 2,
                               "max_turns": 2, "max_tool_tokens": 32, "distill_top_k": 8})


def test_piplay_runs_three_steps_on_cpu_with_the_in_memory_retriever(tiny_config, corpus_path, tmp_path):
    import json

    import trainer

    from trainer.tools.bm25 import InMemoryRetriever
    from trainer.tools.corpus import JsonlDocumentSource

    result = trainer.run(piplay_config(tiny_config, corpus_path), run_dir=tmp_path / "run",
                         retriever=InMemoryRetriever.from_jsonl(corpus_path),
                         documents=JsonlDocumentSource.from_jsonl(corpus_path))
    assert result.steps == 3 and len(result.step_seconds) == 3 and result.final_checkpoint
    rows = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    tasks = [r for r in rows if r["kind"] == "task"]
    assert tasks and all("qcp" in t["data"] and t["data"]["qcp"].startswith("Source passage") for t in tasks)
    assert {t["format"] for t in tasks} <= {"1-hop", "2-hop", "3-hop", "4-hop"}
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert {m["role"] for m in metrics} >= {"examiner", "student"}
    examiner = [m for m in metrics if m["role"] == "examiner"][0]
    assert examiner["hops_1"] + examiner["hops_2"] + examiner["hops_3"] + examiner["hops_4"] == 2
    student = [m for m in metrics if m["role"] == "student" and "lambda" in m]  # the Student stage's steps
    assert [m["lambda"] for m in student] == [0.03, 0.03]
    # the Student batch is filled to prompts_per_step valid questions from up to student_draw_rounds batches
    assert all(m["questions"] <= 2 and m["passages_drawn"] in (2.0, 4.0, 6.0, 8.0) for m in student)
    assert all(m["passages_drawn"] == 8.0 for m in student if m["questions"] < 2)  # 4 batches of 2, then stop
    assert all(0.0 <= m["zero_variance_groups"] <= 1.0 and 0.0 <= m["truncated_rate"] <= 1.0 for m in student)
    examiner_rows = [m for m in metrics if m["role"] == "examiner"]
    assert all("valid_hops_1" in m and "truncated_rate" in m for m in examiner_rows)  # both stages
    assert all(m["searches_refused"] >= 0 for m in student)  # searches refused to keep the answer's reserve
    assert all("zero_variance_groups" in m for m in examiner_rows if "reward_mean" in m)  # its own stage


def test_the_task_gate_refuses_examiner_questions_and_charges_a_template_family():
    from trainer.config import GateConfig
    from trainer.methods.piplay import Question, examiner_rewards, gate_questions

    passage = ("(Title: Trier)\nTrier was founded by the Romans in 16 BC under Augustus. In the 4th century it was an "
               "imperial residence of the Western Roman Empire, on the Moselle.")

    def q(i, question, answer="Augustus"):
        return Question(f"1:e{i}", "d", passage, 2, None, question, answer, 1.0, correct=[True, False, False, False, False])

    questions = [q(0, "In the 4th century, was it an imperial residence of the Western Roman Empire, on the Moselle?"),
                 q(1, "Which emperor, Augustus, founded the city?"),
                 q(2, "How many emperors ruled from the city on the Moselle?", "4"),
                 q(3, "How many emperors ruled from the city on the Danube?", "3"),
                 q(4, "Which Roman ruler's reign saw the founding of a Moselle town that later housed emperors?")]
    gate_questions(questions, GateConfig())
    assert [q.reason.split(" (")[0] for q in questions[:2]] == ["task: question copies its document",
                                                                 "task: answer in question: the solver could copy it"]
    assert [x.valid for x in questions] == [False, False, True, True, True]
    assert questions[2].cluster == questions[3].cluster != questions[4].cluster  # one template, names masked
    # r_d with 1 of 5 right: (5 - 1) / (5 - 1) = 1; + 0.5 r_fmt = 1.5; less the cluster share 2/3 -> 0.8333
    plain = examiner_rewards(questions, 5, 0.5)
    gated = examiner_rewards(questions, 5, 0.5, template_share=True)
    assert plain[2] == pytest.approx(1.5) and gated[2] == pytest.approx(1.5 - 2 / 3)
    assert gated[4] == pytest.approx(1.5 - 1 / 3) and gated[:2] == plain[:2]


def test_an_invalid_question_costs_the_gates_penalty_not_what_a_valid_unsolved_one_earns():
    """Under the paper's reward an invalid question earns 0.5 r_fmt, as much as a valid question no Student attempt
    solved (r_d = 0): on Qwen2.5-Coder-1.5B the Examiner's valid share fell 72% -> 23-41% in 7 steps, and its cut-off
    replies rose 6% -> 38% (benchmarks/RESULTS.md, 2026-11-28). The gate's penalties give the Examiner the signal."""
    from trainer.config import GateConfig, load_config
    from trainer.methods.piplay import Question, examiner_rewards, gate_questions

    passage = "(Title: Trier)\nTrier was founded by the Romans in 16 BC under Augustus, on the Moselle."

    def q(i, question, answer, correct, r_fmt=1.0):
        return Question(f"1:e{i}", "d", passage, 2, None, question, answer, r_fmt, correct=correct)

    questions = [q(0, "Which Roman ruler's reign saw the founding of a Moselle town?", "Augustus", [False] * 5),
                 q(1, "Which Roman ruler's reign saw the founding of a town on the Rhine?", "Drusus",
                   [True, False, False, False, False]),
                 q(2, "Which emperor, Augustus, founded the city?", "Augustus", [], r_fmt=1.0),  # a rule refuses it
                 q(3, None, None, [], r_fmt=2 / 3)]  # cut off before its <question>: think + search, no tags
    gate_questions(questions, GateConfig())
    assert [x.valid for x in questions] == [True, True, False, False]
    paper = examiner_rewards(questions, 5, 0.5)
    assert paper == pytest.approx([0.5, 1.5, 0.5, 1 / 3])  # the refused question earns what the unsolved valid one does
    gate = GateConfig()
    gated = examiner_rewards(questions, 5, 0.5, penalties=(gate.format_penalty, gate.rule_penalty))
    assert gated == pytest.approx([0.5, 1.5, -0.5, -1.0])
    assert (gate.format_penalty, gate.rule_penalty) == (-1.0, -0.5)
    section = load_config({"method": "piplay", "model": {"name_or_path": "x"}}).section
    assert section.invalid_reward == "gate"
