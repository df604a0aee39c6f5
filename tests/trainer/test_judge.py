"""The judge: parsers on broken output, the OpenAI-compatible client against a real local
HTTP server (timeouts, retries, failure counting, concurrency), and the frozen-base backend
on the tiny model (garbage output is counted, never a crash, never a pass)."""
from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest
import torch
from transformers import AutoModelForCausalLM

from trainer.judge import (
    EndpointClient,
    EndpointError,
    Judge,
    Rubric,
    make_judge,
    parse_rubrics,
    parse_score,
    parse_verdict,
)
from trainer.rollout import HFGenerator

# ---- parsers ----------------------------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ("Correct", True), ("Wrong", False), ("  correct.", True), ("WRONG!", False), ("Incorrect", False),
    ("<think>maybe wrong?</think>\nCorrect", True), ("The answer is correct", True),
    ("correct or wrong, hard to say", None), ("banana", None), ("", None), (None, None),
    ("It is not incorrect... wrong", False),
])
def test_parse_verdict(text, expected):
    assert parse_verdict(text) is expected


@pytest.mark.parametrize("text, expected", [
    ("<score>1</score>", 1),
    ("<think>meets it</think>\n<score>0</score>\n", 0),
    ("<think>a\nb</think><score> 1 </score>", 1),
    ("Sure! <score>1</score>", None),  # garbage before
    ("Score: 1", None),  # no tag
    ("<score>2</score>", None),  # not 0/1
    ("<score>1</score><score>0</score>", None),  # two different scores
    ("<score>1</score> then <score>", None),  # a stray tag after it
    ("<score>1</score><think>on second thought</think><score>1</score>", None),  # thinking again
    ("<think>unclosed <score>1</score>", None),
    ("", None), (None, None),
    # a different score after it, in any form: the reply changed its mind
    ("<score>1</score>\nFinal score: 0", None), ("<score>1</score>\nWait, the score is 0.", None),
    ("<score>1</score>\n<SCORE>0</SCORE>", None), ("<score>1</score> \\boxed{0}", None),
    ("<score>1</score> </score >", None),
    # text after the score that gives no other score is read (the 1.5B's greedy grades, from a GPU evaluation)
    ("<score>1</score> extra words", 1),
    ("<think>\nThe response does not explicitly state that Timbuktu is in Mali.\n</think>\n<score>0</score>\n<note>No "
     "explicit statement about Timbuktu being in Mali is provided in the response.</note>", 0),
    ("<think>\nThe response is coherent.\n</think>\n<score>1</score>\n<score>1</score>", 1),
    ("<score>1</score>\nThe score is 1, worth 10 points.", 1), ("<score>0</score>\n<Score> 0 </Score>", 0),
])
def test_parse_score(text, expected):
    assert parse_score(text) == expected


GOOD_RUBRICS = """<rubrics>
<rubric priority="critical">Identifies the 1889 completion of the Eiffel Tower.</rubric>
<rubric priority='important'>Explains why Gustave Eiffel's design was controversial.</rubric>
<rubric priority=bonus>Compares the tower with later wrought-iron structures</rubric>
</rubrics>"""


def test_parse_rubrics_reads_the_documented_format():
    rubrics, problems = parse_rubrics(GOOD_RUBRICS)
    assert rubrics == [Rubric("Identifies the 1889 completion of the Eiffel Tower.", "critical"),
                       Rubric("Explains why Gustave Eiffel's design was controversial.", "important"),
                       Rubric("Compares the tower with later wrought-iron structures", "bonus")]
    assert problems == []


def test_parse_rubrics_drops_broken_items_and_short_lists():
    broken = GOOD_RUBRICS.replace("</rubrics>", """<rubric priority="urgent">Identifies something.</rubric>
<rubric priority="bonus">The response is good.</rubric>
<rubric priority="bonus">Explains it. Then explains more.</rubric>
<rubric priority="bonus"></rubric>
<rubric priority="critical">Identifies the 1889 completion of the Eiffel Tower.</rubric>
<rubric priority="bonus">Provides <b>markup</b>.</rubric>
</rubrics>""")
    rubrics, problems = parse_rubrics(broken)
    assert len(rubrics) == 3
    assert len([p for p in problems if p.startswith("rubric ")]) == 6
    assert any("priority" in p for p in problems) and any("command verb" in p for p in problems)
    assert any("more than one sentence" in p for p in problems) and any("duplicate" in p for p in problems)
    # too few valid -> nothing
    two = GOOD_RUBRICS.replace('<rubric priority=bonus>Compares the tower with later wrought-iron structures</rubric>', "")
    assert parse_rubrics(two)[0] == []
    assert parse_rubrics(two, n_min=2)[0] != []
    # too many -> the first n_max
    many = "<rubrics>" + "".join(f'<rubric priority="bonus">Identifies fact {i}.</rubric>' for i in range(8)) + "</rubrics>"
    assert [r.text for r in parse_rubrics(many, n_max=5)[0]] == [f"Identifies fact {i}." for i in range(5)]
    for junk in ["", None, "no block here", "<rubrics><rubric>", "<rubrics>\x00\xff</rubrics>", GOOD_RUBRICS[:60]]:
        assert parse_rubrics(junk)[0] == []


# ---- a real OpenAI-compatible server ----------------------------------------------------------

class JudgeServer:
    """A tiny OpenAI-compatible server on 127.0.0.1. Its behaviour is chosen by the request's
    ``model``: "judge" answers sensibly, "slow-once" sleeps past the client timeout on the
    first request, "down" returns 500, "reject" returns 400, "garbage" answers nonsense,
    "sleepy" takes 0.2 s per request (to watch concurrency)."""

    def __init__(self):
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.requests.append(body)
                    server.headers.append(dict(self.headers))
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                    n = len(server.requests)
                    self.counted = True
                try:
                    server.handle(self, body, n)
                finally:
                    server.done(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def done(self, handler) -> None:
        with self.lock:
            if getattr(handler, "counted", False):
                self.in_flight -= 1
                handler.counted = False

    def reply(self, handler, status: int, content: str | None, finish: str = "stop"):
        payload = json.dumps({"choices": [{"message": {"role": "assistant", "content": content},
                                           "finish_reason": finish}]}
                             if status == 200 else {"error": "nope"}).encode()
        # no longer in flight once the answer is on its way: the client may send its next request as soon as it has
        # read this one, before this thread would get back to count it off (measured 3 in flight with 2 allowed)
        self.done(handler)
        try:
            handler.send_response(status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(payload)))
            handler.end_headers()
            handler.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def handle(self, handler, body, n):
        mode = body["model"]
        user = body["messages"][-1]["content"]
        if mode == "down":
            return self.reply(handler, 500, None)
        if mode == "reject":
            return self.reply(handler, 400, None)
        if mode == "slow-once" and n == 1:
            time.sleep(1.0)
        if mode == "sleepy":
            time.sleep(0.2)
        if mode == "garbage":
            return self.reply(handler, 200, "Hmm, let me think about it... maybe?")
        if mode == "lenient" and "Reference answer:" in user:  # says Correct to anything, as the 1.5B base often did
            return self.reply(handler, 200, "Correct")
        if mode == "noter" and "<rubric>" in user:  # a grade, then a note (the 1.5B base's greedy grades on a GPU)
            return self.reply(handler, 200, self.answer(user) + "\n<note>The response was checked.</note>")
        if mode == "thinker":  # a thinking judge cut at max_tokens before its verdict
            return self.reply(handler, 200, "<think>The reference says", finish="length")
        self.reply(handler, 200, self.answer(user))

    @staticmethod
    def answer(user: str) -> str:
        if "Reference answer:" in user:
            pred = re.search(r"Model answer: (.*)", user).group(1).strip().lower()
            gold = re.search(r"Reference answer: (.*)", user).group(1).strip().lower()
            return "Correct" if gold in pred else "Wrong"
        if "<rubric>" in user:  # grading: pass iff the response mentions the rubric's last word
            rubric = re.search(r"<rubric>(.*?)</rubric>", user, re.S).group(1)
            response = re.search(r"<response>(.*?)</response>", user, re.S).group(1)
            last = rubric.rstrip(".").split()[-1].lower()
            return f"<think>checking {last}</think>\n<score>{int(last in response.lower())}</score>"
        if "evaluation rubrics" in user:
            return GOOD_RUBRICS
        if "<source_document>" in user:
            doc = re.search(r"<source_document>(.*?)</source_document>", user, re.S).group(1)
            task = re.search(r"<task_prompt>(.*?)</task_prompt>", user, re.S).group(1)
            shared = set(re.findall(r"[a-z]{5,}", doc.lower())) & set(re.findall(r"[a-z]{5,}", task.lower()))
            return f"<think>shared words: {sorted(shared)}</think><score>{int(bool(shared))}</score>"
        if "<task_prompt>" in user:
            return "<think>names are clear</think><score>1</score>"
        return "?"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = JudgeServer()
    yield s
    s.close()


def test_endpoint_judge_runs_every_operation(server, monkeypatch):
    monkeypatch.setenv("MY_JUDGE_KEY", "sekret")
    judge = Judge.from_endpoint(server.url, "judge", api_key_env="MY_JUDGE_KEY", timeout=5)
    assert judge.equivalent("Capital of France?", "Paris", ["It is Paris.", "Lyon", ""]) == [True, False, False]
    assert len(server.requests) == 2  # the empty prediction is Wrong without a call
    assert server.headers[0]["Authorization"] == "Bearer sekret"
    assert server.requests[0]["temperature"] == 0.0
    # the list form: (questions, golds, predictions)
    assert judge.equivalent(["q1", "q2"], ["Paris", "4"], ["paris", "five"]) == [True, False]
    assert judge.gate("entity", ["Explain the Eiffel Tower's design."]) == [1]
    doc = "The Eiffel Tower is a wrought-iron lattice tower in Paris."
    assert judge.gate("relevance", ["Describe the lattice design of the tower", "Summarise photosynthesis"],
                      [doc, doc]) == [1, 0]
    rubrics = judge.write_rubrics("Write about the Eiffel Tower.", [doc], task_type="Writing")
    assert [r.priority for r in rubrics] == ["critical", "important", "bonus"]
    assert "Writing" in server.requests[-1]["messages"][-1]["content"]
    assert judge.grade("task", "It was built for the 1889 World's Fair and completed in 1889... Tower!", rubrics[0]) == 1
    scored = judge.grade_batch([("task", "no idea", r) for r in rubrics], with_texts=True)
    assert [s for s, _ in scored] == [0, 0, 0] and all("<score>" in t for _, t in scored)
    assert server.requests[-1]["temperature"] == 0.6
    assert judge.stats["backend_failures"] == 0 and judge.stats["grade_format_failures"] == 0


def test_endpoint_retries_a_timeout_then_succeeds(server):
    client = EndpointClient(server.url, "slow-once", timeout=0.3, retries=2, backoff=0.01)
    assert client.chat([{"role": "user", "content": "Model answer: x\nReference answer: x"}]) == "Correct"
    assert client.stats["timeouts"] == 1 and client.stats["retries"] == 1 and client.stats["failures"] == 0


def test_endpoint_failures_are_counted_never_passes(server):
    down = Judge.from_endpoint(server.url, "down", retries=2, timeout=2)
    down.backend.client.backoff = 0.01
    assert down.equivalent("q", "Paris", ["Paris", "Paris"]) == [None, None]
    assert down.gate("entity", ["t"]) == [0]
    assert down.grade("t", "r", "Identifies x.") == 0
    assert down.write_rubrics("t", ["d"]) == []
    assert down.stats["backend_failures"] == 5
    assert down.backend.client.stats["failures"] == 5
    assert down.backend.client.stats["requests"] == 15  # 1 try + 2 retries each
    assert down.failure_rate() == 1.0
    reject = EndpointClient(server.url, "reject", retries=3, backoff=0.01)
    with pytest.raises(EndpointError, match="HTTP 400"):
        reject.chat([{"role": "user", "content": "x"}])
    assert reject.stats["requests"] == 1  # a 4xx is not retried
    nowhere = EndpointClient("http://127.0.0.1:9/v1", "x", retries=1, backoff=0.01, timeout=1)
    with pytest.raises(EndpointError, match="cannot reach"):
        nowhere.chat([{"role": "user", "content": "x"}])
    with pytest.raises(ValueError, match="http"):
        EndpointClient("localhost:8000", "x")


def test_garbage_from_the_endpoint_is_a_counted_format_failure(server):
    judge = Judge.from_endpoint(server.url, "garbage")
    assert judge.equivalent("q", "a", ["a"]) == [None]
    assert judge.gate("relevance", ["t"], ["d"]) == [0]
    assert judge.grade("t", "r", "Identifies x.") == 0
    assert judge.write_rubrics("t", "d") == []
    assert judge.stats == {**judge.stats, "equivalent_unparsed": 1, "gate_format_failures": 1,
                           "grade_format_failures": 1, "rubric_lists_failed": 1, "backend_failures": 0}


def test_a_note_after_the_score_is_read_and_counted_not_a_failure(server):
    judge = Judge.from_endpoint(server.url, "noter", timeout=5)
    assert judge.grade_batch([("t", "it names Paris", "Names Paris."), ("t", "no", "Names Paris.")]) == [1, 0]
    assert judge.stats["grade_trailing_text"] == 2 and judge.stats["grade_format_failures"] == 0
    assert judge.failure_rate() == 0.0
    strict = Judge.from_endpoint(server.url, "judge", timeout=5)
    assert strict.grade("t", "it names Paris", "Names Paris.") == 1 and strict.stats["grade_trailing_text"] == 0


def test_endpoint_concurrency_is_limited(server):
    client = EndpointClient(server.url, "sleepy", concurrency=2)
    start = time.perf_counter()
    outs = client.chat_many([[{"role": "user", "content": f"<task_prompt>{i}</task_prompt>"}] for i in range(6)])
    assert len(outs) == 6 and all(o.endswith("<score>1</score>") for o in outs)
    assert server.max_in_flight == 2
    assert time.perf_counter() - start >= 0.55  # 3 waves of 0.2 s


# ---- the frozen base as judge ------------------------------------------------------------------

class CountingGenerator(HFGenerator):
    calls: list

    def generate(self, prompts, params, use_adapter=True, **kw):
        self.calls.append((len(prompts), params.temperature, use_adapter))
        return super().generate(prompts, params, use_adapter=use_adapter, **kw)


def test_frozen_base_judge_batches_and_counts_garbage(tiny_model_dir, smollm2_tokenizer):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    gen = CountingGenerator(model, smollm2_tokenizer, seed=0)
    gen.calls = []
    ctx = SimpleNamespace(policy=SimpleNamespace(is_lora=False, ref_model=None, tokenizer=smollm2_tokenizer),
                          generator=gen)
    with pytest.raises(RuntimeError, match="frozen"):
        make_judge(ctx, "frozen_base")
    assert make_judge(ctx, "exact") is None
    judge = Judge.from_generator(gen, smollm2_tokenizer, use_adapter=True, max_tokens=6)
    verdicts = judge.equivalent("q?", "gold", ["a", "b", "c"])
    gates = judge.gate("entity", ["t1", "t2"])
    rubrics = judge.write_rubrics_batch([("task", ["doc"]), ("task2", "doc2", "Planning")])
    grades = judge.grade_batch([("t", "r", "Identifies x.")] * 4)
    assert gen.calls == [(3, 0.0, True), (2, 0.0, True), (2, 0.0, True), (4, 0.6, True)]  # one call per op
    assert set(verdicts) <= {True, False, None} and gates == [0, 0] and rubrics == [[], []]
    assert grades == [0, 0, 0, 0]  # random weights never write the strict format
    assert judge.stats["calls"] == 11 and judge.stats["backend_failures"] == 0
    assert judge.stats["gate_format_failures"] == 2 and judge.stats["grade_format_failures"] == 4
    assert judge.stats["rubric_lists_failed"] == 2
    # 6 tokens: random weights never end a reply before the budget; role "judge" metrics per step
    assert judge.step_metrics() == {"calls": 11.0, "truncated_rate": judge.stats["truncated"] / 11}
    assert judge.stats["truncated"] >= 9 and judge.step_metrics() == {"calls": 0.0, "truncated_rate": 0.0}
    assert judge.failure_rate() == (2 + 4 + 2 + judge.stats["equivalent_unparsed"]) / 11  # a cut is not a failure
    # LoRA policy: the judge runs the policy's generator with the adapter off
    lora_ctx = SimpleNamespace(policy=SimpleNamespace(is_lora=True, tokenizer=smollm2_tokenizer), generator=gen)
    lora_judge = make_judge(lora_ctx, "frozen_base")
    assert lora_judge.backend.use_adapter is False and lora_judge.backend.generator is gen
    # full fine-tune with a frozen copy: a generator over the copy
    ref_ctx = SimpleNamespace(policy=SimpleNamespace(is_lora=False, ref_model=model, tokenizer=smollm2_tokenizer),
                              generator=gen)
    ref_judge = make_judge(ref_ctx, "frozen_base")
    assert ref_judge.backend.generator.model is model and ref_judge.backend.use_adapter is True
    with pytest.raises(ValueError, match="base URL"):
        make_judge(ctx, "endpoint")


def test_a_thinking_judge_cut_at_its_budget_is_counted_as_truncated(server):
    """Issue 18: a verdict budget too small for a thinking judge shows as the judge role's truncation rate."""
    judge = Judge.from_endpoint(server.url, "thinker", timeout=5)
    assert judge.max_tokens["equivalent"] == 1024  # room to think before "Correct"/"Wrong" (was 16 / 64)
    assert judge.equivalent("q?", "Paris", ["Paris, France", "Lyon"]) == [None, None]
    assert server.requests[-1]["max_tokens"] == 1024
    assert judge.step_metrics() == {"calls": 2.0, "truncated_rate": 1.0}


def test_ssp_asks_the_judge_only_about_answers_sharing_a_word_with_the_gold(server):
    """SSP's RAG check and Solver rewards (run sg, 2026-11-28): a lenient judge accepted answers sharing no word with
    their gold. With ``ssp.judge_needs_shared_word`` (default) such an answer is Wrong without a call; an answer
    sharing a word, and any answer to a gold without content words ("1"), still goes to the judge."""
    from trainer.methods.ssp import judged, shares_a_word

    judge = Judge.from_endpoint(server.url, "lenient", timeout=5)
    items = [("Which river flows through the city where Mozart composed his Requiem?",
              "The Dnieper River flows through the city where Mozart composed his Requiem Mass.", "Semen"),
             ("Which organ system distributes water and nutrients?",
              "The lymphatic system is known for it.", "Lymphatic system"),
             ("How many moons?", "one", "1"),
             ("Which country?", "Cabo Verde", "Cape Verde")]
    assert judged(judge, items) == [True, True, True, True]  # the lenient judge alone accepts all four
    asked = len(server.requests)
    assert judged(judge, items, needs_shared_word=True) == [False, True, True, True]
    assert len(server.requests) - asked == 3  # the Dnieper answer never reached the judge
    assert not shares_a_word("Vienna", "Documentary film") and shares_a_word("the Danube", "Danube")
