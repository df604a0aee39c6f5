"""Property-based tests (hypothesis) of everything that reads untrusted input:

- config loading with random overrides and random documents raises only ``ConfigError`` (with
  key paths and short messages), and every config it accepts reloads to itself;
- upload parsing and chunking never crash on arbitrary bytes or text (``IngestError`` at most);
- the reward functions stay inside their ranges;
- the answer extractors and verifiers never raise or hang on arbitrary strings;
- the task parsers of SPICE and SSP (and the tag readers of SCOPE, SCORE, pi-Play and the judge)
  turn arbitrary or broken model output into "invalid task", never an exception.

Example counts are small (the suite runs on 2 shared cores); the strategies aim at the inputs
that break parsers: near-miss JSON, broken and nested tags, deep nesting, odd numbers.
"""
from __future__ import annotations

import io
import json
import math
import time
import zipfile

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from trainer.config import Config, ConfigError, load_config, method_fields
from trainer.method_configs import SECTIONS

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SOME = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# ---------------------------------------------------------------- configs

METHODS = list(SECTIONS)
PATHS = sorted({row["path"] for m in METHODS for row in method_fields(m)})
scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True, allow_infinity=True),
                    st.text(max_size=20))
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8),
                                                                                                 inner, max_size=3),
                           max_leaves=8)
yaml_values = st.one_of(st.sampled_from(["1", "-1", "0", "1e-6", "2.0e-6", ".inf", "-.inf", ".nan", "true", "no", "null",
                                         "~", "[a, b", "[mcq]", "{a: 1}", "!!python/object:os.system", "'quoted",
                                         "&a [*a]", "[[[[[[]]]]]]", "1e400", "0x1F", "12:30:00", "2020-01-01"]),
                        st.text(max_size=30))
keys = st.one_of(st.sampled_from(PATHS), st.sampled_from(PATHS).map(lambda p: p + "x"),
                 st.sampled_from(PATHS).map(lambda p: p.rsplit(".", 1)[0]), st.text(max_size=15))
overrides = st.lists(st.one_of(st.builds(lambda k, v: f"{k}={v}", keys, yaml_values), st.text(max_size=30)), max_size=6)


def _check_error(exc: ConfigError) -> None:
    assert exc.problems
    for path, message in exc.problems:
        assert isinstance(path, str) and isinstance(message, str) and message
        assert len(message) < 2000  # the bad value is echoed briefly


@FAST
@given(method=st.sampled_from(METHODS), sets=overrides)
def test_random_overrides_give_a_config_or_a_config_error(method, sets):
    base = {"method": method, "data": {"path": "bundled:gsm8k"} if method == "grpo" else {}}
    try:
        cfg = load_config(base, sets)
    except ConfigError as exc:
        _check_error(exc)
        return
    assert isinstance(cfg, Config) and load_config(cfg.to_dict()) == cfg


@FAST
@given(doc=st.dictionaries(st.one_of(st.sampled_from(["method", "seed", "train", "rollout", "model", "spice", "ssp",
                                                      "data", "review", "eval", "watchdog", "reward"]),
                                     st.text(max_size=8)),
                           json_values, max_size=6),
       method=st.one_of(st.sampled_from(METHODS), json_values))
def test_random_documents_give_a_config_or_a_config_error(doc, method):
    try:
        cfg = load_config({**doc, "method": method})
    except ConfigError as exc:
        _check_error(exc)
        return
    assert load_config(cfg.to_dict()) == cfg


@SOME
@given(path=st.sampled_from(PATHS), value=json_values, method=st.sampled_from(METHODS))
def test_any_value_at_any_known_key(path, value, method):
    node: dict = {}
    top = node
    *parents, leaf = path.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value
    try:
        load_config({"method": method, **top})
    except ConfigError as exc:
        _check_error(exc)


# ---------------------------------------------------------------- upload parsing and chunking

from apps.corpora.chunking import chunk_text, windows  # noqa: E402
from apps.corpora.parsing import PARSERS, IngestError, check_file, parse_file  # noqa: E402

EXTENSIONS = sorted(PARSERS)
byte_blobs = st.one_of(st.binary(max_size=400), st.text(max_size=300).map(str.encode),
                       st.lists(st.sampled_from([b"{", b"}", b'"text"', b'"title"', b":", b",", b"\n", b"[", b"]",
                                                 b"<p>", b"<script>", b"</", b"<![", b"<!", b"<?", b"&#", b"]>", b"%PDF-", b"\xff", b"\x00", b"PK\x03\x04",
                                                 b"word ", b"null", b"1e999"]), max_size=80).map(b"".join))


def _parse_or_refuse(data: bytes, name: str) -> None:
    try:
        warnings = check_file(data, name)
        parsed = parse_file(data, name)
    except IngestError as exc:
        assert str(exc).startswith(name.split("/")[0])
        return
    assert isinstance(warnings, list)
    assert parsed.documents and all(d.text.strip() and d.title for d in parsed.documents)


@FAST
@given(data=byte_blobs, ext=st.sampled_from(EXTENSIONS))
def test_parsing_arbitrary_bytes_never_crashes(data, ext):
    _parse_or_refuse(data, "upload" + ext)


# Member names a zip can store: zipfile cuts a name at NUL ("\x00" alone fails inside zipfile's own writer).
zip_member_names = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"),
                           min_size=1, max_size=20)


@FAST
@given(name=zip_member_names)
def test_every_drawn_member_name_is_one_a_zip_can_store(name):
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr(name, b"x")
    assert zipfile.ZipFile(io.BytesIO(out.getvalue())).namelist() == [name]


@SOME
@given(members=st.dictionaries(zip_member_names, byte_blobs, min_size=1, max_size=4))
def test_parsing_arbitrary_zips_never_crashes(members):
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    _parse_or_refuse(out.getvalue(), "bundle.zip")


@FAST
@given(edits=st.lists(st.tuples(st.integers(0, 4000), st.integers(0, 40), st.sampled_from(
           [b"", b"9", b"999999999", b"-1", b"<<", b">>", b"0 0 R", b"/Length 99999", b"[", b"(", b"\\", b"\xff"])),
           min_size=1, max_size=6),
       encrypted=st.booleans(), cut=st.integers(0, 4000))
def test_damaged_pdfs_are_refused_or_read(edits, encrypted, cut):
    from tests.web.corpora.conftest import make_pdf

    from .files import encrypted_pdf

    data = bytearray(encrypted_pdf() if encrypted else make_pdf("Lichens grow slowly on granite"))
    for at, length, insert in edits:
        at %= len(data) or 1
        data[at:at + length] = insert
    _parse_or_refuse(bytes(data[:max(cut, 200)]), "scan.pdf")


@FAST
@given(edits=st.lists(st.tuples(st.integers(0, 2000), st.integers(0, 8), st.sampled_from(
           [b"", b"\x00", b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff", b"\x01\x00\x00\x00", b"PK\x01\x02", b"\x0e"])),
           min_size=1, max_size=4),
       method=st.sampled_from([zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA]))
def test_damaged_zips_are_refused_or_read(edits, method):
    from tests.web.corpora.conftest import make_zip

    data = bytearray(make_zip({"a.txt": b"Lichens grow slowly on granite. " * 20, "b.md": b"# Moss\n\nMoss is green."},
                              method))
    for at, length, insert in edits:
        at %= len(data)
        data[at:at + length] = insert
    _parse_or_refuse(bytes(data), "bundle.zip")


@pytest.fixture(scope="module")
def minilm_tokenizer():
    from transformers import AutoTokenizer

    from apps.corpora.embedder import resolve_path

    return AutoTokenizer.from_pretrained(str(resolve_path("all-MiniLM-L6-v2")))


@FAST
@given(n=st.integers(0, 2000), size=st.integers(1, 300), overlap=st.integers(0, 299))
def test_windows_cover_every_token_with_the_given_overlap(n, size, overlap):
    assume(overlap < size)
    spans = windows(n, size, overlap)
    assert (spans == []) == (n == 0)
    if spans:
        assert spans[0][0] == 0 and spans[-1][1] == n
        assert all(0 < e - s <= size for s, e in spans)
        assert all(b[0] == a[1] - overlap for a, b in zip(spans, spans[1:]))


@SOME
@given(text=st.text(max_size=600), size=st.integers(16, 60))
def test_chunks_are_exact_slices_of_arbitrary_text(minilm_tokenizer, text, size):
    spans = chunk_text(minilm_tokenizer, text, size=size, overlap=size // 4)
    assert all(s.text and s.text in text and s.text == s.text.strip() for s in spans)
    assert all(0 <= s.token_start < s.token_end and s.token_end - s.token_start <= size for s in spans)


# ---------------------------------------------------------------- rewards stay in range

from trainer import rewards as R  # noqa: E402

unit = st.floats(0, 1)
outcomes = st.lists(st.booleans(), min_size=1, max_size=32)
turn_text = st.lists(st.sampled_from(["<think>", "</think>", "<search>", "</search>", "<task>", "</task>", "<question>",
                                      "</question>", "<answer>", "</answer>", "q", " ", "\n", "<", ">"]),
                     max_size=30).map("".join) | st.text(max_size=60)


@FAST
@given(correct=st.one_of(st.none(), outcomes), tau=st.floats(1e-4, 1.0))
def test_spice_challenger_rewards_stay_in_range(correct, tau):
    if correct is None:
        assert all(R.spice_reward_fn(n)(None) == -0.1 for n in R.SPICE_CHALLENGER_REWARDS)
        return
    assert 0.0 < R.spice_challenger(correct, tau=tau) <= 1.0
    assert 0.0 <= R.spice_absolute_zero(correct) < 1.0
    assert R.spice_threshold(correct) in (0.0, 1.0)
    assert 0.0 <= R.spice_rzero_tent(correct) <= 1.0


@FAST
@given(solver=st.lists(unit, min_size=1, max_size=16), correct=st.booleans(), tags=st.integers(0, 50))
def test_ssp_rewards_stay_in_range(solver, correct, tags):
    assert -1e-9 <= R.ssp_proposer(solver) <= 1.0 + 1e-9 and R.ssp_proposer(None) == 0.0
    assert R.ssp_solver(correct, tags) in (0.0, 0.25, 1.0)


@FAST
@given(g=unit, tau=st.floats(0.01, 0.99), n=st.integers(0, 10_000), m=st.integers(0, 10_000), r_fmt=unit,
       gate=st.booleans(), searches=st.integers(0, 50), passed=st.lists(st.booleans(), min_size=1, max_size=10))
def test_scope_rewards_stay_in_range(g, tau, n, m, r_fmt, gate, searches, passed):
    assert 0.0 <= R.scope_f_diff(g, tau) <= 1.0
    assert 0.05 <= R.scope_length_penalty(n) <= 1.0
    assert (R.scope_length_penalty(min(n, m)) >= R.scope_length_penalty(max(n, m)))  # longer never scores more
    assert 0.0 <= R.scope_search_reward(searches) <= 1.0
    assert 0.0 <= R.scope_rubric_score(passed) <= 1.0
    assert 0.0 <= R.scope_challenger_reward(r_fmt, gate, g, tau=tau) <= 1.5 + 1e-9
    assert 0.0 <= R.scope_solver_reward(g, n, r_fmt, searches) <= 1.6 + 1e-9


@FAST
@given(turns=st.lists(turn_text, max_size=5), role=st.sampled_from(["challenger", "solver"]), expected=st.integers(1, 5))
def test_scope_format_reward_of_arbitrary_turns_is_in_unit_range(turns, role, expected):
    assume(turns or role == "solver")
    parts = R.scope_format_parts(turns, role, expected)
    assert all(0.0 <= v <= 1.0 for v in parts.values())
    assert 0.0 <= R.scope_format_reward(turns, role, expected) <= 1.0
    assert 0.0 <= R.think_fraction(turns) <= 1.0


@FAST
@given(conclusions=st.lists(st.text(max_size=80), min_size=2, max_size=6), k=st.integers(0, 16), n=st.integers(1, 16),
       r_fmt=unit, well_formed=st.booleans(), scores=st.lists(unit, min_size=1, max_size=6))
def test_score_and_piplay_rewards_stay_in_range(conclusions, k, n, r_fmt, well_formed, scores):
    assert 0.0 <= R.score_consistency(conclusions) <= 1.0
    weights = [1 / len(scores)] * len(scores)
    reward = R.score_solver_reward(well_formed, weights, scores)
    assert (1.0 <= reward <= 2.0 + 1e-9) if well_formed else reward == 0.0
    assume(k <= n)
    assert 0.0 <= R.piplay_difficulty(k, n) <= 1.0
    assert 0.0 <= R.piplay_examiner_reward(k, n, r_fmt) <= 1.5


# ---------------------------------------------------------------- answer extraction and verification

from trainer import verify as V  # noqa: E402

answer_text = st.lists(st.sampled_from(["\\boxed{", "\\fbox{", "{", "}", "\\boxed", "$", "\\frac{1}{2}", "x^2", "(B)",
                                        "Answer: C", "<answer>", "</answer>", "< answer >", "</ answer>", "42", " ",
                                        "the", "\\", "\n"]), max_size=40).map("".join) | st.text(max_size=120)


@FAST
@given(text=answer_text, other=answer_text)
def test_extractors_never_raise_and_return_substrings(text, other):
    boxed = V.extract_boxed(text)
    assert boxed is None or boxed in text
    tag = V.extract_tag(text, "answer")
    assert tag is None or tag in text
    # a count, not just a non-negative number: one more pair of tags counts one more
    assert V.count_tags(text + " <answer>x</answer>", "answer") == V.count_tags(text, "answer") + 1
    assert V.mcq_letter(text) in (None, *"ABCDEFGHIJ")
    assert isinstance(V.exact_match(text, other), bool) and isinstance(V.mcq_match(text, other), bool)
    assert 0.0 <= V.f1(text, [other, text]) <= 1.0


def _extract_all(text: str) -> None:
    V.extract_boxed(text), V.extract_tag(text, "answer"), V.count_tags(text, "answer"), V.mcq_letter(text)
    V.f1(text, text[:100]), V.exact_match(text, "B")


def _best_of(runs: int, work) -> float:
    """The fastest of ``runs`` timings of ``work()`` (the least disturbed by other load on the machine)."""
    best = math.inf
    for _ in range(runs):
        start = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - start)
    return best


@pytest.mark.parametrize("make", [
    lambda n: "\\boxed{" * n, lambda n: "{" * n + "}" * (n - 1), lambda n: "<answer>" * n + "</answer" * n,
    lambda n: "< " * n + "answer", lambda n: "Answer: " * n, lambda n: "(" * n + "B" + ")" * n,
], ids=["open-boxes", "braces", "tags", "lt-spaces", "answer-colons", "parens"])
def test_extractors_stay_linear_on_adversarial_strings(make):
    """Ten times the text costs about ten times the time (a backtracking or quadratic scan costs a
    hundred times or more): a ratio measured here, so a loaded machine slows both sides alike."""
    small, large = make(3_000), make(30_000)
    _extract_all(small)  # regexes compiled, caches warm
    ratio = _best_of(5, lambda: _extract_all(large)) / _best_of(5, lambda: _extract_all(small))
    assert ratio < 30, f"10x the text took {ratio:.0f}x the time"


MATH_TIMEOUT = 3.0


def _helper_running() -> None:
    """A math-verify helper is running, so its start-up (seconds of sympy import) is not timed. It is
    asked directly: math_equal would answer a pair of numbers (or a remembered pair) without it."""
    assert V._WORKER.equal("x+1", "1+x", 120.0) is True


@settings(max_examples=15, deadline=None)
@given(pred=answer_text, gold=st.sampled_from(["42", "\\frac{1}{2}", "x^2+1", "0.5", "true", "\\sqrt{2}"]))
def test_math_equal_on_arbitrary_predictions_is_a_bool_within_its_timeout(pred, gold):
    _helper_running()
    helper = V._WORKER._proc
    start = time.perf_counter()
    assert isinstance(V.math_equal(pred, gold, timeout=MATH_TIMEOUT), bool)
    took = time.perf_counter() - start
    # answered (the same helper) or gave up at the timeout (the hung helper killed), never waited on past it
    assert V._WORKER._proc is helper or (V._WORKER._proc is None and helper.poll() is not None)
    assert took < 2 * MATH_TIMEOUT


def test_math_equal_gives_up_on_a_hanging_expression(monkeypatch):
    _helper_running()
    hung = V._WORKER._proc
    start = time.perf_counter()
    assert V.math_equal("9^{9^{9^{9^{9^{9}}}}}", "2", timeout=1.0) is False
    assert time.perf_counter() - start < 5 * 1.0  # the timeout, not sympy's (endless) evaluation
    assert hung.poll() is not None and V._WORKER._proc is None  # the hung helper was killed
    monkeypatch.setattr(V, "_VERDICTS", {})  # so the next check is asked, not remembered
    assert V.math_equal("x+1", "1+x", timeout=120.0) is True  # a fresh helper answers
    assert V._WORKER._proc is not None and V._WORKER._proc.pid != hung.pid


# ---------------------------------------------------------------- task parsers of model output

from trainer.methods import spice_tasks as S  # noqa: E402
from trainer.methods import ssp_tasks as P  # noqa: E402
from trainer.rollout.multi_turn import closing_query, last_tag  # noqa: E402

FORMAT_KEYS = ["suitable_for_mcq", "suitable_for_free_form", "best_answer_type", "reason"]
TASK_KEYS = ["question", "answer", "answer_type", "multiple_choice_question", "multiple_choice_correct"]
odd_values = st.one_of(json_values, st.sampled_from(["A", "e", "B)", "Integer", "integer", "string", "1,000", "3.0",
                                                     "A) x B) y C) z D) w", "true", ""]))


@st.composite
def model_json(draw, keys):
    """Near-miss Challenger output: a JSON object with some expected keys and odd values, possibly cut,
    wrapped in prose or code fences, duplicated, or nested in junk."""
    obj = draw(st.dictionaries(st.sampled_from(keys + ["extra"]), odd_values, max_size=len(keys) + 1))
    text = json.dumps(obj)
    cut = draw(st.integers(0, len(text)))
    text = draw(st.sampled_from([text, text[:cut], text[cut:], text + text, "```json\n" + text + "\n```",
                                 "Let me think {" + text, text.replace('"', "'"), "{" * 40 + text + "}" * 3]))
    return draw(st.text(max_size=20)) + text + draw(st.text(max_size=20))


@FAST
@given(text=model_json(FORMAT_KEYS) | st.text(max_size=200),
       formats=st.sampled_from([["mcq"], ["free_form"], ["mcq", "free_form"]]))
def test_spice_format_choice_of_broken_output_is_a_choice_or_invalid(text, formats):
    try:
        choice = S.parse_format_choice(text, formats, list(S.ANSWER_TYPES))
    except S.TaskError as err:
        assert str(err)
        return
    assert choice.format in formats and (choice.answer_type in S.ANSWER_TYPES) == (choice.format == "free_form")


@FAST
@given(text=model_json(TASK_KEYS) | st.text(max_size=200),
       choice=st.sampled_from([S.FormatChoice("mcq", None)] + [S.FormatChoice("free_form", t) for t in S.ANSWER_TYPES]))
def test_spice_task_of_broken_output_is_a_task_or_invalid(text, choice):
    try:
        task = S.parse_task(text, choice)
    except S.TaskError as err:
        assert str(err)
        return
    assert task.question.strip() and task.answer
    assert task.answer in S.MCQ_LETTERS if choice.format == "mcq" else task.answer_type == choice.answer_type
    if task.answer_type in ("integer", "float"):
        assert math.isfinite(float(task.answer))


@pytest.mark.parametrize("answer", ["nan", "inf", "-Infinity", "1e999", "1_000"])
def test_a_float_task_with_a_non_finite_or_odd_answer_is_invalid(answer):
    with pytest.raises(S.TaskError, match="finite decimal number"):
        S.parse_task(json.dumps({"question": "How far is it, in km?", "answer": answer}), S.FormatChoice("free_form", "float"))


@pytest.mark.parametrize("text", ['{"a":' * 3000, "[" * 3000, '{"question": ' + "[" * 3000, '{"suitable_for_mcq": ' * 2000])
def test_spice_parsers_refuse_deeply_nested_json(text):
    for parse in (lambda t: S.parse_format_choice(t, ["mcq", "free_form"], list(S.ANSWER_TYPES)),
                  lambda t: S.parse_task(t, S.FormatChoice("free_form", "integer"))):
        with pytest.raises(S.TaskError):
            parse(text)


tagged = st.lists(st.sampled_from(["<question>", "</question>", "<question", "question>", "</ question>", "<search>",
                                   "</search>", "<answer>", "</answer>", "<think>", "Answer:", "Answer：", "who", " ",
                                   "\n", "<", ">", "/"]), max_size=40).map("".join) | st.text(max_size=150)


@FAST
@given(text=tagged, answer=st.text(max_size=20), queries=st.lists(st.text(max_size=10), max_size=4),
       n=st.integers(0, 5))
def test_ssp_broken_tags_give_a_filtered_question_never_an_exception(text, answer, queries, n):
    question = last_tag(text, "question")
    assert question is None or question in text
    result = P.rule_filter(question, answer, queries, n)
    assert result.ok == (result.reason == "ok") and (result.ok or result.reason in P.FILTER_REASONS)
    if question is None:
        assert result.reason == "no_question"
    rag = P.parse_rag_answer(text)
    assert rag is None or rag in text
    query = closing_query(text, "search")
    assert query is None or query in text


@FAST
@given(text=tagged | model_json(["dimensions", "scores", "rubrics"]))
def test_other_tag_readers_never_raise(text):
    from trainer.judge import parse_rubrics, parse_score, parse_verdict
    from trainer.methods.piplay_parts import parse_question_answer
    from trainer.methods.scope_prompts import parse_task as scope_task
    from trainer.methods.score_prompts import extract_conclusion, parse_rubric, parse_scores

    assert scope_task(text) is None or isinstance(scope_task(text), str)
    assert all(x is None or isinstance(x, str) for x in parse_question_answer(text))
    parse_rubric(text), extract_conclusion(text), parse_verdict(text), parse_score(text), parse_rubrics(text)
    scores = parse_scores(text, ["accuracy", "clarity"], 10.0)
    assert all(0.0 <= v <= 1.0 and not math.isnan(v) for v in scores.values.values())


# ---------------------------------------------------------------- the web's launch validation (every door's first step)

@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(method=st.one_of(st.sampled_from(METHODS), st.text(max_size=6)),
       model=st.one_of(st.none(), st.sampled_from(["smollm2-135m-instruct", "/etc", "../x", "", "no-such"]),
                       st.text(max_size=12)),
       corpus=st.one_of(st.none(), st.sampled_from(["kept", "nope", ""]), st.text(max_size=6)),
       config=st.one_of(st.none(), st.dictionaries(st.one_of(st.sampled_from(PATHS), keys), json_values, max_size=4)),
       sets=overrides, queue=st.one_of(st.none(), st.sampled_from(["gpu", "cpu", "tpu", ""])))
@pytest.mark.django_db
def test_launch_validation_gives_a_config_or_a_launch_error(researcher, kept_corpus, method, model, corpus, config,
                                                            sets, queue):
    from apps.runs.services.launch import LaunchError, validate

    try:
        cfg, corpus_obj, queue_name = validate(method, model, corpus, config, sets, user=researcher, web=True,
                                               queue=queue)
    except LaunchError as exc:
        assert exc.problems and all(isinstance(p, str) and m for p, m in exc.problems)
        assert all(len(m) < 2000 for _, m in exc.problems)
        return
    assert cfg.method == method and queue_name in ("gpu", "cpu")
    assert corpus_obj is not None or method == "grpo"
