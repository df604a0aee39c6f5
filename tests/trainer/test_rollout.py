"""Generation and the multi-turn search loop.

HFGenerator runs on the tiny random-init Llama (conftest) and is checked against a plain
forward pass of the same model. The loop's bookkeeping is tested with ``ScriptedGenerator``,
a real Generator whose "model" is a fixed script of turns (a test double of the model only,
for loop mechanics), and end to end with a tiny model trained in the test to write a search
call and an answer.
"""
from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from transformers import AutoModelForCausalLM

from trainer.prompts import chat
from trainer.rollout import Completion, Generator, HFGenerator, SamplingParams, multi_turn_rollout, single_turn
from trainer.rollout.multi_turn import closing_query
from trainer.tools import InMemoryRetriever, SearchTool

CORPUS = [
    {"title": "Paris", "text": "Paris is the capital and largest city of France, on the river Seine."},
    {"title": "Berlin", "text": "Berlin is the capital of Germany and its largest city."},
    {"title": "Photosynthesis", "text": "Plants turn sunlight, water and carbon dioxide into glucose and oxygen."},
]


@pytest.fixture(scope="module")
def tok(smollm2_tokenizer):
    return smollm2_tokenizer


@pytest.fixture
def tiny(tiny_model_dir):
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


@pytest.fixture
def search_tool(tmp_path, tok):
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in CORPUS))
    return SearchTool(InMemoryRetriever.from_jsonl(path), k=2, max_tokens=500, tokenizer=tok)


def prompts_of(tok, questions):
    return [chat(tok, "You answer questions.", q) for q in questions]


def forward_logprobs(model, prompt_ids, completion_ids, temperature):
    """log_softmax(logits / T) of each completion token from one plain forward pass."""
    ids = torch.tensor([prompt_ids + completion_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt_ids) - 1 : -1].float() / temperature  # [L, V]
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(completion_ids)[:, None]).squeeze(1)


# ---- HFGenerator ------------------------------------------------------------------------------

def test_logprobs_match_a_reforward_at_the_sampling_temperature(tiny, tok):
    gen = HFGenerator(tiny, tok, seed=0)
    assert isinstance(gen, Generator)
    prompts = prompts_of(tok, ["What is two plus two?", "Name a colour.", "What is two plus two?"])
    params = SamplingParams(temperature=0.7, max_new_tokens=12)
    outs = gen.generate(prompts, params)
    assert [o.prompt_ids for o in outs] == prompts
    for o in outs:
        assert len(o.completion_ids) == len(o.logprobs) and 1 <= len(o.completion_ids) <= 12
        assert o.temperature == 0.7 and o.finish_reason in ("eos", "length", "stop")
        assert o.text == tok.decode(o.completion_ids, skip_special_tokens=True)
        ref = forward_logprobs(tiny, o.prompt_ids, o.completion_ids, 0.7)
        assert torch.allclose(torch.tensor(o.logprobs), ref, atol=1e-4), (o.logprobs, ref)
    # the repeated prompt was prefilled once but sampled independently
    assert gen.last_stats["prefill_rows"] == 2
    assert outs[0].completion_ids != outs[2].completion_ids


def test_batched_left_padded_greedy_equals_one_prompt_at_a_time(tiny, tok):
    gen = HFGenerator(tiny, tok)
    prompts = prompts_of(tok, ["Hi", "Tell me a long story about a dragon and a knight.", "Why?"])
    params = SamplingParams(temperature=0, max_new_tokens=10)
    batched = gen.generate(prompts, params)
    for p, b in zip(prompts, batched):
        [alone] = gen.generate([p], params)
        assert alone.completion_ids == b.completion_ids
        assert alone.logprobs == pytest.approx(b.logprobs, abs=1e-4)
        assert b.temperature == 1.0  # greedy reports log_softmax of the raw logits


def test_seeded_sampling_is_reproducible_and_params_validate(tiny, tok):
    prompts = prompts_of(tok, ["a", "b"])
    params = SamplingParams(temperature=1.0, top_p=0.9, max_new_tokens=6)
    first = [o.completion_ids for o in HFGenerator(tiny, tok, seed=3).generate(prompts, params)]
    again = [o.completion_ids for o in HFGenerator(tiny, tok, seed=3).generate(prompts, params)]
    assert first == again
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=0)
    with pytest.raises(ValueError, match="empty"):
        HFGenerator(tiny, tok).generate([[]], params)
    with pytest.raises(ValueError, match="vocabulary"):
        HFGenerator(tiny, tok).generate([[10**7]], params)


def test_min_new_tokens_holds_back_eos(tiny, tok):
    # Make most of the vocabulary count as EOS so that sequences end almost at once...
    tiny.generation_config.eos_token_id = list(range(3, 40000))
    gen = HFGenerator(tiny, tok, seed=0)
    prompts = prompts_of(tok, ["x"] * 8)
    free = gen.generate(prompts, SamplingParams(max_new_tokens=20))
    assert sum(o.finish_reason == "eos" and len(o.completion_ids) <= 2 for o in free) >= 6
    # ...then min_new_tokens must still give every row at least 5 tokens, none of them EOS.
    forced = gen.generate(prompts, SamplingParams(max_new_tokens=20, min_new_tokens=5))
    eos = set(gen.eos_ids)
    for o in forced:
        assert len(o.completion_ids) >= 5
        assert not eos & set(o.completion_ids[:5])
        assert o.finish_reason == "eos" or len(o.completion_ids) == 20
        # the logprobs are of the unmasked distribution, as the trainer recomputes them
        ref = forward_logprobs(tiny, o.prompt_ids, o.completion_ids, 1.0)
        assert torch.allclose(torch.tensor(o.logprobs), ref, atol=1e-4)
    full = gen.generate(prompts[:2], SamplingParams(max_new_tokens=7, min_new_tokens=7))
    assert [len(o.completion_ids) for o in full] == [7, 7]


def test_stop_strings_end_generation_on_the_completing_token(tiny, tok):
    gen = HFGenerator(tiny, tok)
    prompt = prompts_of(tok, ["Say something."])
    [free] = gen.generate(prompt, SamplingParams(temperature=0, max_new_tokens=24))
    text = free.text
    assert len(text) > 12, text
    stop = text[6:10]  # a piece from the middle of the greedy text
    first_end = text.find(stop) + len(stop)
    [cut] = gen.generate(prompt, SamplingParams(temperature=0, max_new_tokens=24, stop=[stop]))
    assert cut.finish_reason == "stop" and cut.stop == stop
    assert cut.completion_ids == free.completion_ids[: len(cut.completion_ids)]
    assert stop in cut.text and len(cut.text) >= first_end
    # one token fewer would not contain the stop string: we stopped on the completing token
    assert stop not in tok.decode(cut.completion_ids[:-1], skip_special_tokens=True)
    [late] = gen.generate(prompt, SamplingParams(temperature=0, max_new_tokens=24, stop=[stop],
                                                 min_new_tokens=len(cut.completion_ids) + 1))
    assert len(late.completion_ids) > len(cut.completion_ids)  # no stop inside the forced length


def test_per_row_caps(tiny, tok):
    gen = HFGenerator(tiny, tok)
    prompts = prompts_of(tok, ["a", "b", "c"])
    outs = gen.generate(prompts, SamplingParams(max_new_tokens=9, min_new_tokens=9), max_new_tokens=[2, 0, 50])
    assert [len(o.completion_ids) for o in outs] == [2, 0, 9]
    assert [o.finish_reason for o in outs] == ["length"] * 3


def test_use_adapter_false_runs_the_frozen_base(tiny, tok):
    from peft import LoraConfig, get_peft_model

    prompts = prompts_of(tok, ["base or adapter?"])
    params = SamplingParams(temperature=0, max_new_tokens=8)
    [base_out] = HFGenerator(tiny, tok).generate(prompts, params)
    with pytest.raises(ValueError, match="LoRA"):
        HFGenerator(tiny, tok).generate(prompts, params, use_adapter=False)
    peft_model = get_peft_model(tiny, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "o_proj"],
                                                 task_type="CAUSAL_LM"))
    torch.manual_seed(1)
    for name, p in peft_model.named_parameters():
        if "lora_B" in name:
            p.data.normal_(0, 0.5)  # a trained-looking adapter
    gen = HFGenerator(peft_model, tok)
    [frozen] = gen.generate(prompts, params, use_adapter=False)
    [adapted] = gen.generate(prompts, params)
    assert frozen.completion_ids == base_out.completion_ids
    assert frozen.logprobs == pytest.approx(base_out.logprobs, abs=1e-5)
    assert adapted.logprobs != pytest.approx(base_out.logprobs, abs=1e-3)


# ---- the loop, with a scripted model --------------------------------------------------------

class ScriptedGenerator:
    """A Generator whose model is a script: for conversation i it emits ``script[i][turn]``
    (tokenized once), honouring stop strings at token granularity and the token caps like a
    real backend. Logprobs are -1.0 per token."""

    def __init__(self, tokenizer, prompts, script):
        self.tokenizer = tokenizer
        self.prompts = [list(p) for p in prompts]
        self.script = [[tokenizer.encode(t, add_special_tokens=False) for t in turns] for turns in script]
        self.turn = [0] * len(prompts)
        self.calls = []

    def _which(self, ids):
        for i, p in enumerate(self.prompts):
            if ids[: len(p)] == p:
                return i
        raise AssertionError("unknown conversation")

    def generate(self, prompts, params, use_adapter=True, *, max_new_tokens=None):
        self.calls.append((len(prompts), use_adapter))
        outs = []
        for row, ids in enumerate(prompts):
            i = self._which(ids)
            script = self.script[i]
            tokens = script[self.turn[i]] if self.turn[i] < len(script) else [self.tokenizer.eos_token_id]
            self.turn[i] += 1
            cap = params.max_new_tokens if max_new_tokens is None else min(params.max_new_tokens, max_new_tokens[row])
            out, reason, hit = [], "length", None
            for t in tokens:
                if len(out) >= cap:
                    break
                out.append(t)
                if t == self.tokenizer.eos_token_id:
                    reason = "eos"
                    break
                text = self.tokenizer.decode(out, skip_special_tokens=True)
                hit = next((s for s in params.stop if s in text), None)
                if hit:
                    reason = "stop"
                    break
            else:
                reason = "length" if len(out) >= cap else "eos"
            outs.append(Completion(prompt_ids=list(ids), completion_ids=out, logprobs=[-1.0] * len(out),
                                   text=self.tokenizer.decode(out, skip_special_tokens=True),
                                   finish_reason=reason, stop=hit))
        return outs


def spans(mask):
    """[(value, start, end)] runs of a 0/1 mask."""
    out, start = [], 0
    for i in range(1, len(mask) + 1):
        if i == len(mask) or mask[i] != mask[start]:
            out.append((mask[start], start, i))
            start = i
    return out


def test_tool_tokens_are_masked_and_queries_are_batched(tok, search_tool):
    prompts = prompts_of(tok, ["capital of France?", "capital of Germany?", "what do plants make?"])
    script = [
        ["<think>look it up</think><search>capital of France</search>", "<answer>Paris</answer>"],
        ["<search> Germany capital city </search>", "<search>Berlin</search>", "I think <answer>Berlin</answer>"],
        ["<answer>glucose</answer>"],
    ]
    gen = ScriptedGenerator(tok, prompts, script)
    calls = []
    real_search = search_tool.retriever.search
    search_tool.retriever.search = lambda qs, k: calls.append(list(qs)) or real_search(qs, k)
    trajs = multi_turn_rollout(gen, tok, prompts, SamplingParams(max_new_tokens=400), search_tool, max_turns=4)
    assert calls == [["capital of France", "Germany capital city"], ["Berlin"]]  # one call per round
    assert [len(c) for c, _ in [(gen.calls[0], 0)]] and gen.calls[0][0] == 3 and gen.calls[1][0] == 2

    a, b, c = trajs
    assert [t.final for t in trajs] == ["Paris", "Berlin", "glucose"]
    assert [t.n_searches for t in trajs] == [1, 2, 0]
    assert a.queries == ["capital of France"] and b.queries == ["Germany capital city", "Berlin"]
    assert a.passages[0].title == "Paris" and b.passages[-1].title == "Berlin"
    assert [t.finish_reason for t in trajs] == ["final"] * 3 and not any(t.truncated for t in trajs)
    assert [turn["role"] for turn in b.turns] == ["assistant", "tool", "assistant", "tool", "assistant"]
    for t in trajs:
        assert len(t.completion_ids) == len(t.loss_mask) == len(t.logprobs)
        for value, start, end in spans(t.loss_mask):
            piece = tok.decode(t.completion_ids[start:end])
            if value == 0:  # exactly the tool response, logprob 0
                assert piece.strip().startswith("<information>") and piece.strip().endswith("</information>")
                assert all(lp == 0.0 for lp in t.logprobs[start:end])
            else:  # exactly what the model emitted, untouched
                assert all(lp == -1.0 for lp in t.logprobs[start:end])
        model_ids = [i for i, m in zip(t.completion_ids, t.loss_mask) if m]
        assert model_ids == [i for turn in gen.script[trajs.index(t)][: len(t.turns) // 2 + 1] for i in turn]
        assert t.text == tok.decode(t.completion_ids, skip_special_tokens=True)
    assert spans(c.loss_mask) == [(1, 0, len(c.completion_ids))]


def test_malformed_outputs_are_bounded_and_counted(tok, search_tool):
    prompts = prompts_of(tok, ["empty", "unopened", "endless", "unclosed", "huge", "two answers"])
    script = [
        ["<search>   </search>", "<answer>x</answer>"],                   # empty query
        ["just text </search> more", "<answer>y</answer>"],             # closing tag never opened
        ["<search>paris</search>"] * 10,                                  # never stops searching
        ["<answer>never closed" + tok.eos_token],                        # EOS inside an open answer
        ["word " * 1000],                                                 # runs past every budget
        ["<answer>a</answer><answer>b</answer>"],                        # stops at the first close
    ]
    gen = ScriptedGenerator(tok, prompts, script)
    trajs = multi_turn_rollout(gen, tok, prompts, SamplingParams(max_new_tokens=300), search_tool, max_turns=3)
    empty, unopened, endless, unclosed, huge, two = trajs
    assert empty.n_invalid_searches == 1 and empty.n_searches == 0 and empty.final == "x"
    assert "Invalid search" in empty.turns[1]["text"] and empty.loss_mask.count(0) > 0
    assert unopened.n_invalid_searches == 1 and unopened.final == "y"
    assert endless.n_searches == 2 == len(endless.queries)  # the 3rd query (last turn) is not run
    assert endless.truncated and endless.finish_reason == "max_turns" and endless.final is None
    # the result of the search before the last turn says so, and asks for the answer (only that one)
    tool_turns = [turn["text"] for turn in endless.turns if turn["role"] == "tool"]
    assert ["That was your last search" in text for text in tool_turns] == [False, True]
    assert "no more searches will run" in tool_turns[1] and "ending with </answer>" in tool_turns[1]
    assert unclosed.final is None and unclosed.finish_reason == "eos" and unclosed.n_answer_tags == 1
    assert huge.truncated and huge.finish_reason == "length" and len(huge.completion_ids) == 300
    assert two.final == "a" and two.n_answer_tags == 1
    for t in trajs:
        assert len(t.completion_ids) <= 300 and len(t.loss_mask) == len(t.completion_ids)


def test_an_invalid_search_before_the_last_turn_gets_the_last_search_note(tok, search_tool):
    """A retry would land in the last turn, where a search does not run: the note asks to finish instead."""
    prompts = prompts_of(tok, ["q"])
    gen = ScriptedGenerator(tok, prompts, [["<search>  </search>", "<answer>x</answer>"]])
    [t] = multi_turn_rollout(gen, tok, prompts, SamplingParams(max_new_tokens=200), search_tool, max_turns=2)
    assert t.n_invalid_searches == 1 and t.final == "x"
    assert "no more searches will run" in t.turns[1]["text"] and "Invalid search" not in t.turns[1]["text"]


def test_a_tool_response_that_does_not_fit_is_cut_and_ends_the_rollout(tok, search_tool):
    prompts = prompts_of(tok, ["q"])
    gen = ScriptedGenerator(tok, prompts, [["<search>paris capital france</search>", "<answer>z</answer>"]])
    first_turn = len(tok.encode("<search>paris capital france</search>", add_special_tokens=False))
    [t] = multi_turn_rollout(gen, tok, prompts, SamplingParams(max_new_tokens=first_turn + 5), search_tool)
    assert len(t.completion_ids) == first_turn + 5
    assert t.loss_mask == [1] * first_turn + [0] * 5
    assert t.truncated and t.finish_reason == "length" and t.final is None


def test_an_answer_reserve_keeps_room_for_the_answer(tok, tmp_path):
    """The GPU failure (RESULTS.md, SCORE on Qwen2.5-Coder-1.5B, 512-token trajectories): a writer that searches
    three times fills its budget with passages and is cut before its <answer>. With a reserve, results are cut so
    that the reserve stays, a search with no room left is refused with a note, and the answer fits."""
    path = tmp_path / "long.jsonl"
    path.write_text("".join(json.dumps({"id": str(i), "title": t, "text": f"{t} is a city in France. " * 30}) + "\n"
                            for i, t in enumerate(["Paris", "Lyon", "Nice"])))
    search_tool = SearchTool(InMemoryRetriever.from_jsonl(path), k=2, max_tokens=150, tokenizer=tok)
    prompts = prompts_of(tok, ["report on Paris"])
    answer = "<answer>" + "Paris is the capital of France. " * 12 + "</answer>"
    script = [["<search>paris</search>", "<search>france capital</search>", "<search>paris history</search>",
               answer]]
    answer_tokens = len(tok.encode(answer, add_special_tokens=False))
    budget, reserve = 400, answer_tokens + 40
    params = SamplingParams(max_new_tokens=budget)
    [cut] = multi_turn_rollout(ScriptedGenerator(tok, prompts, script), tok, prompts, params, search_tool, max_turns=5)
    assert cut.truncated and cut.final is None and cut.n_refused_searches == 0  # no reserve: the passages win

    [t] = multi_turn_rollout(ScriptedGenerator(tok, prompts, script), tok, prompts, params, search_tool, max_turns=5,
                             answer_reserve=reserve)
    assert t.final is not None and t.final.startswith("Paris is the capital") and not t.truncated
    assert t.n_refused_searches >= 1 and t.n_searches + t.n_refused_searches == 3
    assert any("Search budget spent" in turn["text"] for turn in t.turns if turn["role"] == "tool")
    assert len(t.completion_ids) <= budget and len(t.loss_mask) == len(t.completion_ids)
    # the last-search note (a search in the turn before the last) is paid for by the result, not by the reserve
    script = [["<search>paris</search>", "<search>france capital</search>", answer]]
    [last] = multi_turn_rollout(ScriptedGenerator(tok, prompts, script), tok, prompts,
                                SamplingParams(max_new_tokens=budget), search_tool, max_turns=3, answer_reserve=reserve)
    assert "That was your last search" in last.turns[3]["text"] and last.n_searches == 2
    assert last.final is not None and not last.truncated and len(last.completion_ids) <= budget
    assert budget - sum(len(tok.encode(turn["text"], add_special_tokens=False)) for turn in last.turns[:4]) >= reserve - 8
    with pytest.raises(ValueError, match="answer_reserve must be >= 0 tokens, got -1"):
        multi_turn_rollout(ScriptedGenerator(tok, prompts, script), tok, prompts, params, search_tool,
                           answer_reserve=-1)


def test_the_answer_reserve_setting_defaults_to_a_quarter_and_must_leave_room_for_a_search():
    from trainer.config import ConfigError, load_config
    from trainer.rollout.multi_turn import reserve_for

    for method in ("score", "ssp", "scope", "piplay"):
        cfg = load_config({"method": method})
        assert cfg.rollout.answer_reserve_tokens is None
        assert reserve_for(None, cfg.rollout.max_new_tokens) == cfg.rollout.max_new_tokens // 4
    assert (reserve_for(None, 128), reserve_for(None, 32), reserve_for(0, 4096), reserve_for(256, 768)) == (32, 0, 0, 256)
    assert reserve_for(256, 200) == 144  # a role with a smaller budget keeps room for one search and its result
    with pytest.raises(ConfigError) as err:
        load_config({"method": "ssp", "rollout": {"max_new_tokens": 128, "answer_reserve_tokens": 100}})
    assert "raise rollout.max_new_tokens to at least 156" in str(err.value)
    assert load_config({"method": "ssp", "rollout": {"max_new_tokens": 156, "answer_reserve_tokens": 100}})
    # a method's own searching budget is checked the same way (pi-Play's Examiner and Student budgets)
    with pytest.raises(ConfigError) as err:
        load_config({"method": "piplay", "rollout": {"max_new_tokens": 768, "answer_reserve_tokens": 256},
                     "piplay": {"examiner_max_new_tokens": 300, "student_max_new_tokens": 768}})
    assert "256 of piplay.examiner_max_new_tokens 300 leaves no room" in str(err.value)
    assert "raise piplay.examiner_max_new_tokens to at least 312" in str(err.value)
    assert "student" not in str(err.value)
    assert load_config({"method": "piplay", "rollout": {"max_new_tokens": 768, "answer_reserve_tokens": 256},
                        "piplay": {"examiner_max_new_tokens": 312}})


def test_the_largest_reserve_still_lets_a_short_search_run(tok, search_tool):
    """The reserve's bound (and the config's) counts the search call itself: at the most a reserve may keep, a
    short search ("<search>paris</search>", 8 SmolLM2 tokens) still gets its minimum result, cut so that the reserve
    stays. Without the call counted, a reserve of budget - 48 passed the config check and refused every search."""
    from trainer.rollout.multi_turn import MIN_RESULT_TOKENS, TOOL_WRAPPER_TOKENS, reserve_for

    prompts = prompts_of(tok, ["q"])
    search = "<search>paris</search>"
    budget = 200
    [t] = multi_turn_rollout(ScriptedGenerator(tok, prompts, [[search, "<answer>Paris</answer>"]]), tok, prompts,
                             SamplingParams(max_new_tokens=budget), search_tool, answer_reserve=10**6)
    assert t.n_searches == 1 and t.n_refused_searches == 0 and t.final == "Paris" and not t.truncated
    assert MIN_RESULT_TOKENS <= t.n_tool_tokens <= MIN_RESULT_TOKENS + TOOL_WRAPPER_TOKENS  # the passages were cut
    before_answer = len(tok.encode(search, add_special_tokens=False)) + t.n_tool_tokens
    assert budget - before_answer >= reserve_for(10**6, budget) and len(t.completion_ids) <= budget


def test_without_a_tool_search_tags_are_plain_text(tok):
    prompts = prompts_of(tok, ["q"])
    gen = ScriptedGenerator(tok, prompts, [["<search>x</search> so <answer>7</answer>"]])
    [t] = multi_turn_rollout(gen, tok, prompts, SamplingParams(max_new_tokens=100), None)
    assert t.final == "7" and t.n_searches == 0 and all(t.loss_mask)
    [s] = single_turn(ScriptedGenerator(tok, prompts, [["<answer>7</answer>"]]), prompts,
                      SamplingParams(max_new_tokens=50), final_tag="answer")
    assert s.final == "7" and s.loss_mask == [1] * len(s.completion_ids)


def test_closing_query_parsing():
    assert closing_query("<think>a</think><search> q1 </search>", "search") == "q1"
    assert closing_query("<search>old</search><search>new</search>", "search") == "old"
    assert closing_query("text </search>", "search") is None
    assert closing_query("<search>open", "search") is None


# ---- end to end with a real (tiny, trained-in-test) model -----------------------------------

def test_a_tiny_model_that_learned_to_search_runs_the_loop_end_to_end(tiny, tok, search_tool):
    """Teach the tiny model one conversation (search, read, answer), then roll it out: the
    tool response comes from the real retriever and the model tokens from real sampling."""
    prompt = prompts_of(tok, ["What is the capital of France?"])[0]
    call = tok.encode("<search>capital of France</search>", add_special_tokens=False)
    [passages] = search_tool.search(["capital of France"])
    tool_ids = tok.encode(f"\n\n{search_tool.format(passages)}\n\n", add_special_tokens=False)
    answer = tok.encode("<answer>Paris</answer>", add_special_tokens=False) + [tok.eos_token_id]
    seq = torch.tensor([prompt + call + tool_ids + answer])
    labels = seq.clone()
    labels[0, : len(prompt)] = -100
    labels[0, len(prompt) + len(call) : len(prompt) + len(call) + len(tool_ids)] = -100
    torch.manual_seed(0)
    opt = torch.optim.Adam(tiny.parameters(), lr=1e-2)
    tiny.train()
    for _ in range(300):
        loss = tiny(input_ids=seq, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        if loss.item() < 0.01:
            break
    tiny.eval()
    gen = HFGenerator(tiny, tok, seed=0)
    [t] = multi_turn_rollout(gen, tok, [prompt], SamplingParams(temperature=0.5, max_new_tokens=400), search_tool)
    assert t.queries == ["capital of France"] and t.final == "Paris" and t.finish_reason == "final"
    assert t.completion_ids == call + tool_ids + answer[:-1] or t.completion_ids == call + tool_ids + answer
    assert t.loss_mask == [1] * len(call) + [0] * len(tool_ids) + [1] * (len(t.completion_ids) - len(call) - len(tool_ids))
    # the model-token logprobs equal a re-forward of the whole trajectory at T = 0.5
    ref = forward_logprobs(tiny, prompt, t.completion_ids, 0.5)
    mask = torch.tensor(t.loss_mask, dtype=torch.bool)
    assert torch.allclose(torch.tensor(t.logprobs)[mask], ref[mask], atol=1e-4)
    assert all(lp == 0.0 for lp, m in zip(t.logprobs, t.loss_mask) if not m)


def test_autocast_generation_matches_an_autocast_reforward(tiny, tok):
    from types import SimpleNamespace

    policy = SimpleNamespace(model=tiny, tokenizer=tok, autocast_dtype=torch.bfloat16)
    gen = HFGenerator.from_policy(policy, seed=0)
    [out] = gen.generate(prompts_of(tok, ["bf16?"]), SamplingParams(max_new_tokens=6, min_new_tokens=6))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref = forward_logprobs(tiny, out.prompt_ids, out.completion_ids, 1.0)
    assert torch.allclose(torch.tensor(out.logprobs), ref, atol=5e-2)
