"""The turn-by-turn view of one attempt: turns, retrieved passages, tokens coloured by loss mask."""
import re
from pathlib import Path

import pytest
from django.contrib.staticfiles import finders

from apps.episodes.models import Attempt, Task
from apps.runs import trajectory
from apps.runs.models import Run
from apps.runs.sink import DjangoSink

pytestmark = pytest.mark.django_db


def test_mask_segments_group_tokens_by_mask():
    segs = trajectory.mask_segments([1, 2, 3, 4, 5], [0, 0, 1, 1, 0], decode=lambda ids: f"<{ids[0]}>")
    assert [(s["trained"], [t["text"] for t in s["tokens"]]) for s in segs] == [
        (False, ["<1>", "<2>"]), (True, ["<3>", "<4>"]), (False, ["<5>"])]
    assert trajectory.mask_segments([1, 2, 3], [1, 1, 1], limit=2)[0]["tokens"][-1]["id"] == 2


def _ssp_attempt(run, tok):
    """A two-turn SSP-style solver attempt stored the way the DjangoSink stores it."""
    prompt = tok.encode("Who wrote Hamlet?", add_special_tokens=False)
    query = tok.encode("<search>Hamlet author</search>", add_special_tokens=False)
    tool = tok.encode("<information>Hamlet is a play by William Shakespeare.</information>", add_special_tokens=False)
    answer = tok.encode("<answer>Shakespeare</answer>", add_special_tokens=False)
    sink = DjangoSink(run)
    sink.samples(3, [
        {"kind": "task", "key": "3:0", "role": "proposer", "question": "Who wrote <Hamlet>?", "answer": "Shakespeare",
         "valid": True, "pass_rate": 0.5},
        {"kind": "attempt", "key": "3:0:s0", "task_key": "3:0", "role": "solver", "reward": 1.0,
         "text": "<search>Hamlet author</search><answer>Shakespeare</answer>",
         "turns": [{"role": "assistant", "text": "<search>Hamlet author</search>"},
                   {"role": "tool", "text": "<information>Hamlet is a play by William Shakespeare.</information>"},
                   {"role": "assistant", "text": "<answer>Shakespeare</answer>"}],
         "passages": [{"document_id": "d7", "chunk_id": "c3", "title": "Hamlet", "score": 0.83,
                       "text": "Hamlet is a play by William Shakespeare."}],
         "token_ids": prompt + query + tool + answer,
         "loss_mask": [0] * len(prompt) + [1] * len(query) + [0] * len(tool) + [1] * len(answer)},
    ])
    sink.close()
    return Attempt.objects.get(run=run, key="3:0:s0"), len(query) + len(answer), len(prompt) + len(tool)


def test_the_trajectory_page_shows_turns_passages_and_the_mask(client, researcher, run_env, smollm2_tokenizer):
    run = Run.objects.create(method="ssp", model_name="tiny", config={}, owner=researcher)  # tiny: run_env's models dir
    attempt, trained, masked = _ssp_attempt(run, smollm2_tokenizer)
    client.force_login(researcher)
    response = client.get(f"/runs/{run.pk}/attempts/{attempt.key}/")
    assert response.status_code == 200
    html = response.content.decode()
    turns = re.findall(r'<div class="turn (\w+)" data-role', html)
    assert turns == ["assistant", "tool", "assistant"]
    assert "&lt;information&gt;Hamlet is a play by William Shakespeare.&lt;/information&gt;" in html
    assert "<information>" not in html and "Who wrote &lt;Hamlet&gt;?" in html  # model text stays text
    assert "document d7" in html and "chunk c3" in html and "score 0.830" in html
    assert f'id="tokens-trained">{trained}<' in html and f'id="tokens-masked">{masked}<' in html
    assert "decoded with the tokenizer of tiny" in html
    # the trained segments, decoded, are exactly the model's own turns; the masked ones are prompt + tool
    segs = re.findall(r'<span class="seg (trained|masked)">(.*?)</span></span>', html, re.S)
    def text_of(body):
        return "".join(re.findall(r'<span class="tok" title="id \d+">([^<]*)', body))

    kinds = [k for k, _ in segs]
    assert kinds == ["masked", "trained", "masked", "trained"]
    assert text_of(segs[1][1]) == "&lt;search&gt;Hamlet author&lt;/search&gt;"
    assert text_of(segs[3][1]) == "&lt;answer&gt;Shakespeare&lt;/answer&gt;"


def test_the_samples_block_links_attempts_to_their_trajectory(client, researcher, run_env, smollm2_tokenizer):
    run = Run.objects.create(method="ssp", model_name="tiny", config={}, owner=researcher)
    attempt, _, _ = _ssp_attempt(run, smollm2_tokenizer)
    client.force_login(researcher)
    html = client.get(f"/runs/{run.pk}/").content.decode()
    assert f'href="/runs/{run.pk}/attempts/{attempt.key}/"' in html
    # rows that arrive live get the link too (attempts to their trajectory, tasks to the task page)
    # (the live script is a static file since the CSP refuses inline scripts: the page loads it, it builds the link)
    assert "js/run_live.js" in html
    assert ('${msg.kind === "attempt" ? "attempts" : "tasks"}/${encodeURIComponent(msg.key)}/'
            in Path(finders.find("js/run_live.js")).read_text())


def test_without_a_tokenizer_tokens_show_as_ids(client, researcher, run_env):
    run = Run.objects.create(method="grpo", model_name="no-such-model", config={}, owner=researcher)
    Attempt.objects.create(run=run, key="1:0", step=1, role="policy", text="hi", token_ids=[11, 12, 13],
                           loss_mask=[0, 1])
    client.force_login(researcher)
    html = client.get(f"/runs/{run.pk}/attempts/1:0/").content.decode()
    assert "tokens are shown as ids" in html and "\u203912\u203a" in html
    assert "the loss mask has 2 entries for 3 tokens" in html
    assert 'class="seg unknown"' in html  # the token without a mask entry
    assert '<div class="turn assistant"' in html and ">hi</pre>" in html  # no turns stored: the text is the turn


def test_a_missing_attempt_is_a_404_not_a_500(client, researcher):
    run = Run.objects.create(method="grpo", model_name="tiny", config={}, owner=researcher)
    client.force_login(researcher)
    assert client.get(f"/runs/{run.pk}/attempts/nope/").status_code == 404
    assert client.get("/runs/999999/attempts/1:0/").status_code == 404
