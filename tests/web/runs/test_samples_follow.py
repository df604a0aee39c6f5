"""Samples you can follow: an invalid task shows its stored reason and the document it was written
from, a task links to the attempts that answer it (and each to its trajectory), the trajectory
page shows the prompt the model was given, and an answer a verifier graded shows what it read
next to the gold answer. All of it from what the recipes already store."""
import re

import pytest

from apps.corpora.models import Corpus, Document
from apps.runs.models import Run
from apps.runs.sink import DjangoSink
from tests.web.runs.test_live_page_browser import CHROMIUM, logged_in_page, server  # noqa: F401  (fixture)
from tests.web.runs.test_run_page_extras_browser import _shot

MONA = "The Mona Lisa is a half-length portrait painting by Leonardo da Vinci, painted between 1503 and 1519."


def _spice_run(owner) -> Run:
    """A SPICE run over a one-document corpus: an invalid task (stored reason), a valid one with a
    Challenger attempt and two Reasoner answers (their boxed answers stored, as spice.records does)."""
    corpus = Corpus.objects.create(name="paintings")
    doc = Document.objects.create(corpus=corpus, title="Mona Lisa", content_hash="h1", text=MONA)
    run = Run.objects.create(method="spice", model_name="tiny", config={}, owner=owner, corpus=corpus,
                             corpus_name=corpus.name, total_steps=5)
    sink = DjangoSink(run)
    sink.samples(1, [
        {"kind": "task", "key": "1:0", "role": "challenger", "question": "", "answer": "", "valid": False,
         "document_id": str(doc.pk), "data": {"invalid_reason": "no JSON object in the output", "document_title": "Mona Lisa"}},
        {"kind": "task", "key": "1:1", "role": "challenger", "question": "Who painted the Mona Lisa?",
         "answer": "Leonardo da Vinci", "valid": True, "pass_rate": 0.5, "document_id": str(doc.pk),
         "data": {"invalid_reason": "", "document_title": "Mona Lisa"}},
        {"kind": "attempt", "key": "1:1:c", "task_key": "1:1", "role": "challenger", "text": "{\"question\": ...}",
         "reward": 0.9, "turns": [{"role": "assistant", "text": "{\"question\": ...}"}], "data": {"kept": True}},
        {"kind": "attempt", "key": "1:1:r0", "task_key": "1:1", "role": "reasoner", "reward": 1.0,
         "text": "\\boxed{Leonardo da Vinci}", "data": {"boxed": "Leonardo da Vinci"}},
        {"kind": "attempt", "key": "1:1:r1", "task_key": "1:1", "role": "reasoner", "reward": 0.0,
         "text": "It was \\boxed{Raphael}", "data": {"boxed": "Raphael"}},
    ])
    sink.close()
    return run


@pytest.mark.django_db
def test_an_invalid_task_shows_its_reason_and_source_document(client, researcher):
    run = _spice_run(researcher)
    client.force_login(researcher)
    html = client.get(f"/runs/{run.pk}/").content.decode()
    assert "invalid: no JSON object in the output" in html and "from document: Mona Lisa" in html
    page = client.get(f"/runs/{run.pk}/tasks/1:0/")
    assert page.status_code == 200
    html = page.content.decode()
    assert re.search(r'id="why-invalid">no JSON object in the output<', html)
    doc = Document.objects.get(title="Mona Lisa")
    assert f'href="/corpora/{run.corpus_id}/documents/{doc.pk}/"' in html and "half-length portrait" in html
    assert "No attempt answers this task (an invalid task goes to no solver)" in html
    assert client.get(f"/runs/{run.pk}/tasks/9:9/").status_code == 404


@pytest.mark.django_db
def test_a_shuffled_mcq_shows_the_letter_its_writer_wrote(client, researcher):
    """The gate shuffles an MCQ's options (gate.shuffle_options): the task shows them as the solvers saw them, and
    the letter of the Challenger's own JSON, so its turn's different letter reads as what it is."""
    run = Run.objects.create(method="spice", model_name="tiny", config={}, owner=researcher, total_steps=1)
    sink = DjangoSink(run)
    sink.samples(1, [
        {"kind": "task", "key": "1:2", "role": "challenger", "question": "Who painted it? A) Raphael B) Leonardo "
         "C) Titian D) Giotto", "answer": "B", "valid": True, "format": "mcq",
         "data": {"invalid_reason": "", "written_answer": "A"}},
        {"kind": "task", "key": "1:3", "role": "challenger", "question": "Who painted the Mona Lisa?",
         "answer": "Leonardo da Vinci", "valid": True, "data": {"invalid_reason": "", "written_answer": None}}])
    sink.close()
    client.force_login(researcher)
    html = client.get(f"/runs/{run.pk}/tasks/1:2/").content.decode()
    assert re.search(r'id="written-answer">Written as A by the Challenger: the gate shuffled the options', html)
    assert 'id="written-answer"' not in client.get(f"/runs/{run.pk}/tasks/1:3/").content.decode()


@pytest.mark.django_db
def test_a_task_links_to_its_attempts_with_each_answer_next_to_the_gold(client, researcher):
    run = _spice_run(researcher)
    client.force_login(researcher)
    html = client.get(f"/runs/{run.pk}/").content.decode()
    assert f'href="/runs/{run.pk}/tasks/1:1/"' in html and "3 attempts" in html
    assert re.search(r'answered <code class="extracted">Raphael</code> · gold <code class="gold">Leonardo da Vinci</code>', html)
    html = client.get(f"/runs/{run.pk}/tasks/1:1/").content.decode()
    links = re.findall(rf'href="/runs/{run.pk}/attempts/([^/"]+)/"', html)
    assert links == ["1:1:c", "1:1:r0", "1:1:r1"]
    trajectory = client.get(f"/runs/{run.pk}/attempts/1:1:r1/").content.decode()
    assert f'href="/runs/{run.pk}/tasks/1:1/"' in trajectory and 'id="source-document"' in trajectory
    assert "answered <code class=\"extracted\">Raphael</code>" in trajectory


@pytest.mark.django_db
def test_a_grpo_attempt_shows_its_prompt_and_the_number_it_was_graded_on(client, researcher, run_env, smollm2_tokenizer):
    tok = smollm2_tokenizer
    run = Run.objects.create(method="grpo", model_name="tiny", config={"reward": "math"}, owner=researcher)
    prompt = tok.encode(tok.apply_chat_template([{"role": "user", "content": "Tom has 3 apples and buys 4. How many?"}],
                                                tokenize=False, add_generation_prompt=True), add_special_tokens=False)
    answer = tok.encode("He has 3 + 4 = 8 apples.", add_special_tokens=False)
    sink = DjangoSink(run)
    sink.samples(1, [
        {"kind": "task", "key": "1:t0", "role": "dataset", "question": "Tom has 3 apples and buys 4. How many?",
         "answer": "7", "valid": True, "pass_rate": 0.0},
        {"kind": "attempt", "key": "1:0", "task_key": "1:t0", "role": "solver", "text": "He has 3 + 4 = 8 apples.",
         "reward": 0.0, "turns": [{"role": "assistant", "text": "He has 3 + 4 = 8 apples."}],
         "token_ids": prompt + answer, "loss_mask": [0] * len(prompt) + [1] * len(answer), "data": {}},
    ])
    sink.close()
    client.force_login(researcher)
    html = client.get(f"/runs/{run.pk}/").content.decode()
    assert 'answered <code class="extracted">8</code> · gold <code class="gold">7</code>' in html  # the last number read
    html = client.get(f"/runs/{run.pk}/attempts/1:0/").content.decode()
    shown = re.search(r'<section class="card" id="prompt">.*?<pre>(.*?)</pre>', html, re.S).group(1)
    assert "Tom has 3 apples and buys 4. How many?" in shown and "<|im_start|>assistant" in shown.replace("&lt;", "<").replace("&gt;", ">")


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make test installs it)")
def test_following_a_sample_in_a_browser(roles, researcher, server, monkeypatch, tmp_path):  # noqa: F811
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    run = _spice_run(researcher)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser, page, errors = logged_in_page(p, server, f"/runs/{run.pk}/", {"width": 1280, "height": 900})
        invalid = page.locator('#samples tr[data-key="task:1:0"]')
        assert "invalid: no JSON object in the output" in invalid.inner_text()
        page.locator('#samples tr[data-key="task:1:1"] a.task-link').click()
        page.wait_for_url(f"{server}/runs/{run.pk}/tasks/1:1/")
        assert "Mona Lisa" in page.locator("#source-document").inner_text()
        _shot(page, "task-page.png", tmp_path)
        page.locator('#task-attempts a[href$="/attempts/1:1:r1/"]').click()
        page.wait_for_url(f"{server}/runs/{run.pk}/attempts/1:1:r1/")
        facts = page.locator("#attempt-facts").inner_text()
        assert "answered Raphael · gold Leonardo da Vinci" in facts
        _shot(page, "trajectory-page.png", tmp_path)
        assert not errors, errors
        browser.close()
