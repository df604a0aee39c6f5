"""SPICE's task rules beyond parsing: "answer in question", "question has no words", "question refers to the
document" and "question is not about the document", on real tasks.

The examples are tasks written on an H100 (run folders spice05 = Qwen2.5-Coder-0.5B, 35 steps, and
spice15 = Qwen2.5-Coder-1.5B, 15 steps): the 0.5B Challenger collapsed to digit strings answered by
themselves, which parsed as valid (its Reasoner learned to copy them; held-out GSM8K 28.0% -> 14.2%).
"""
import json
from pathlib import Path

import pytest

from trainer.methods.parts import answer_in_question, count_words
from trainer.methods.spice import step_metrics
from trainer.config import load_config
from trainer.methods.spice_tasks import Attempt, FormatChoice, SpiceTask, TaskError, parse_task
from trainer.methods.gate import (_NOT_CONTENT, _TASK_WORDS, content_words, grounded, mark_repeated,
                                  mark_repeated_answers, refers_to_document)
from trainer.methods.ssp_tasks import rule_filter
from trainer.tools.bm25 import STOPWORDS


def _task(kind, question, answer, document=None):
    if kind == "mcq":
        text = json.dumps({"multiple_choice_question": question, "multiple_choice_correct": answer})
        return parse_task(text, FormatChoice("mcq", None), document=document)
    text = json.dumps({"question": question, "answer": answer, "answer_type": kind.capitalize()})
    return parse_task(text, FormatChoice("free_form", kind), document=document)


# the final (step 35) 0.5B Challenger on held-out documents, and its training tasks (samples.jsonl)
COLLAPSED = [
    ("123456789012345678901234567890123456789012345678901234567890",
     "123456789012345678901234567890123456789012345678901234567890", "answer in question"),
    ("129241732386927182, 129241732386927182}, 129241732386927182, 129241732386927182", "129241732386927182",
     "answer in question"),
    ("15561507322000490000000000000000000", "15561507322000490000000000000000000", "answer in question"),
    ("99", "99", "answer in question"),
    # the question's number is longer than the answer (its first 60 digits): not the same number, no words
    ("1234567891234567891234567891234567891234567891234567891234567891234567891234567891234567891234567891234567"
     "891234567892", "123456789123456789123456789123456789123456789123456789123456", "question has no words"),
    ("1200000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000",
     "120000000000000000000000000000000000000000000000000000000000", "question has no words"),
    ("Unknown.", "-1", "question has no words"),
    ("In 2021, the student only observed the document. So, which year was the year 2021?", "2021",
     "answer in question"),
]


@pytest.mark.parametrize("question, answer, reason", COLLAPSED)
def test_the_collapsed_challengers_tasks_are_invalid_with_their_reason(question, answer, reason):
    with pytest.raises(TaskError, match=reason):
        _task("integer", question, answer)


# base Challengers' tasks that state their answer: the Reasoner could copy it
COPYABLE = [
    ("integer", "The volume of Pyrenees is approximately 5,000 cubic kilometers (103,500 km³).", "5000"),
    ("float", "The number of people in Uganda is exactly 50.2 million when referring to the official document.",
     "50.2"),
    ("integer", "The year 2022 URL for Port-au-Prince is found in IHSI in Haiti's administrative regions.", "2022"),
    ("integer", "On which date did Constantinople fall to the Ottoman Empire in 1453?", "1453"),
    ("string", "What is the name of the island Sulawesi?", "Sulawesi"),
    ("string", "What is the name of the city-state Monaco?", "Monaco"),
    ("string", "What is the common name of the sycamore fig in the United States?", "Sycamore"),
    ("expression", "The student never sees the document, so never write 'the text' or 'the document'.",
     "The student never sees the document"),
    ("integer", "How many types of question does this document describe (0 for multiple choice, 1 for free-form)?",
     "1"),
]


@pytest.mark.parametrize("kind, question, answer", COPYABLE)
def test_a_task_stating_its_answer_is_invalid(kind, question, answer):
    with pytest.raises(TaskError, match="answer in question"):
        _task(kind, question, answer)


# base Challengers' valid tasks (crossplay_tasks.jsonl), free-form and MCQ: they stay valid
BASE_VALID = [
    ("integer", "How many bulbs were in the Edison's birthday light before a type of electromagnetic radiation was "
     "emitted?", "30"),
    ("integer", "How many stacked pebbles were there on the board moved during the war of Conquest in驯itat", "410"),
    ("string", "Where is Puerto Rico located?", "Monterrey, Florida"),
    ("integer", "How many islands are in Solomon Islands?", "6"),
    ("integer", "What is the total number of people in Lagos, Kano (city) and Ibadan due to changes in flow and rising "
     "pollution?", "2344000"),
    ("integer", "The sum of the integers from 1 to 100 is?", "5050"),
    ("integer", "How many people live in Latvia, the second largest in the Baltics?", "30717"),
    ("integer", "How many square kilometres does Palembang cover?", "35251"),
    ("integer", "What is the year Senegal was founded?", "1966"),
    ("integer", "Estimate the population of Timbuktu according to the given 2022 census, which states that there are "
     "around one million people.", "1000000"),
    ("string", "What is the name of the capital city of Niger?", "Niamey"),
    ("mcq", "What is the population of Prague? A) 1.6 million B) 2 million C) 2.2 million D) 2.3 million", "D"),
    ("integer", "How many years after the Treaty of San Stefano did the British establish the Mediterranean Fleet near "
     "Constantinople to enforce their demands on the Ottoman Empire?", "8"),
    ("integer", "What percentage of the world's population was colonized during the period of New Imperialism?", "33"),
    ("integer", "For how many years did King Leopold II control Congo Free State?", "23"),
    ("integer", "In which year did the five dynasties and ten kingdoms period start?", "907"),
    ("integer", "What is the approximate total area of the Solomon Islands, in square kilometers?", "28896"),
    ("integer", "In what year did the British defeat the Burmese empire for the last time?", "1885"),
    ("integer", "If the Anglo-Saxon culture started around 450 and the Norman Conquest ended in 1066, how many years "
     "was the Anglo-Saxon period?", "614"),
    ("string", "What was the official name of Nineveh Governorate before its current name?", "Nineveh Province"),
]


@pytest.mark.parametrize("kind, question, answer", BASE_VALID)
def test_real_valid_tasks_stay_valid(kind, question, answer):
    assert _task(kind, question, answer).question == question.strip()


# the 1.5B Challenger's collapse (step 15): questions about the text's form, answer 1. The paper's prompt forbids
# pointing at the document (CRITICAL: 'Never reference "the document" or "the text" in the question'); we check it.
FORM_QUESTIONS = ["How many paragraphs are there in the given text?",
                  "How many types of questions are mentioned in the given text?",
                  "How many types of falls are mentioned in the text about the Zambezi river?",
                  "Which of the following statements is false, according to the provided text? A) The Zambezi is the "
                  "fourth-longest river in Africa. B) It is the longest east-flowing river in Africa. C) It is 2,574 km "
                  "long. D) Its basin covers half of the Nile's.",
                  "Based on the text, how many square kilometres of land is Rajasthan?",
                  "As mentioned, how many people live in Riga?",
                  "Estimate the population of Timbuktu according to the given 2022 census, which states that there "
                  "are around one million people.",  # "the given 2022 census" is not the document: stays valid
                  ]
REFERS = [True, True, True, True, True, True, False]


@pytest.mark.parametrize("question, refers", list(zip(FORM_QUESTIONS, REFERS)))
def test_questions_pointing_at_the_document_are_invalid(question, refers):
    kind, answer = ("mcq", "B") if " A) " in question else ("integer", "7")
    if refers:
        with pytest.raises(TaskError, match="question refers to the document"):
            _task(kind, question, answer)
    else:
        assert _task(kind, question, answer).question == question


def test_standalone_questions_naming_texts_stay_valid():
    for q in ("How many books of the Old Testament are in the Hebrew text of the Bible?",  # "the Hebrew text"
              "Which article of the United States Constitution establishes the judiciary?",
              "How many verses does the national anthem of Latvia have?",
              "In the context of the Cold War, how many members did NATO have in 1955?",
              "How many articles does the text of the Treaty of Lisbon amend?"):
        assert _task("integer", q, "7").question == q


def test_the_1_5b_form_question_collapse_is_caught_on_the_runs_tasks():
    """spice15's final Challenger on held-out documents (crossplay_tasks.jsonl): 44 of 48 point at the text."""
    final = ["How many paragraphs are there in the given text?",
             "How many choices are available to answer the question about the Battle of Vienna?",
             "How many options are provided for the question?",
             "How many types of falls are mentioned in the text about the Zambezi river?"]
    assert [refers_to_document(q) for q in final] == [True, False, False, True]


def test_numbers_compare_by_value_and_words_as_whole_words():
    assert not answer_in_question("In which month of January 1556 did the earthquake occur?", "1")  # 1 is not 1556
    assert answer_in_question("It covers 5,000 km2.", "5000") and answer_in_question("It covers 5000.0 km2.", "5,000")
    assert answer_in_question("What happened in the 1990s?", "1990")  # the grader reads "1990s" as 1990
    assert not answer_in_question("How far is it from 3.14 to 4?", "3.1")
    assert not answer_in_question("Who wrote Romeo and Juliet?", "Rome")  # part of a word is no copy
    assert answer_in_question("Who founded The Hague?", "the hague.")
    assert answer_in_question("Is it in Hague?", "The Hague")  # articles dropped, as exact_match does
    assert not answer_in_question("Anything?", "...")  # nothing left after normalizing


def test_booleans_and_mcq_letters_are_never_copies():
    assert _task("boolean", "Is it true that Jupiter is larger than Saturn?", "true").answer == "true"
    task = _task("mcq", "Which planet is the largest? A) Mars B) Venus C) Jupiter D) Mercury", "C")
    assert task.answer == "C"
    with pytest.raises(TaskError, match="question has no words"):  # the option labels are no words
        _task("mcq", "1? A) 1 B) 2 C) 3 D) 4", "A")


def test_words_are_tokens_holding_a_letter():
    assert count_words("In 1453, how many ships?") == 4 and count_words("In 1453, how many ships?", False) == 5
    assert count_words("129241732386927182, 129241732386927182}, 129241732386927182") == 0
    with pytest.raises(TaskError, match="question has no words"):
        _task("integer", "What is 17*23?", "391")


def test_ssp_keeps_its_reference_substring_test_through_the_shared_check():
    """SSP's rule filter: the answer anywhere in the question, case-insensitive (Alibaba-Quark/SSP); shared with
    SPICE's check in substring mode, where punctuation and articles are ignored as its exact-match reward does."""
    long = "Which country house in Devon, built between 1911 and 1930 for a grocer, is"
    assert rule_filter(long + " the Castle Drogo one?", "Castle Drogo", ["a", "b"], 1).reason == "contains_answer"
    assert rule_filter(long + " a Parisian design?", "Paris", ["a", "b"], 1).reason == "contains_answer"
    assert rule_filter(long + " Castle-Drogo?", "Castle Drogo", ["a", "b"], 1).reason == "ok"  # "castledrogo"
    assert rule_filter(long + " in 19215?", "1921", ["a", "b"], 1).reason == "contains_answer"
    assert rule_filter("What year did the railroad for Chicago start in 1859?", "x", ["a", "b"], 1).ok  # 10 tokens


def test_each_rule_has_its_own_invalid_rate():
    def attempt(reason):
        return Attempt("d", "Doc", 0, "1:d:0", [1], task=SpiceTask("free_form", "integer", "q", "1"), reason=reason)

    attempts = [attempt(""), attempt("task: answer in question: the Reasoner could copy it"),
                attempt("task: question has no words (fewer than 3 words with letters)"),
                attempt("task: integer answer expected, got 'x'")]
    chal = step_metrics(attempts)["challenger"]
    assert chal["invalid_answer_in_question_rate"] == chal["invalid_no_words_rate"] == 0.25
    assert chal["invalid_copies_example_rate"] == 0.0 and chal["invalid_task_rate"] == 0.75


# Run spice15 of 2026-11-26 23:15 (H200, 33 steps, the three rules above in force): its final Challenger wrote
# only "How many correct answers? -> 1" style tasks on held-out documents (96 of 96) and its Reasoner answered 1
# (99.7%). Documents are the held-out Wikipedia summaries those tasks were written from (cut).
TIMBUKTU = ("Timbuktu\nTimbuktu is an ancient city in Mali, situated 20 kilometres north of the Niger River. It is "
            "the capital of the Tombouctou Region, one of the 19 administrative regions of Mali, having a population "
            "of around one million people in the 2022 census.")
VIENNA = ("Battle of Vienna\nThe Battle of Vienna took place at Kahlenberg Mountain near Vienna on 12 September 1683 "
          "after the city had been besieged by the Ottoman Empire for two months.")
NIGER = ("Niger\nNiger, officially the Republic of Niger, is a landlocked country in West Africa. It is a unitary "
         "state bordered by Libya to the northeast, Chad to the east, Nigeria to the south.")
SELF_REFERENTIAL = [("How many answers?", TIMBUKTU), ("How many correct answers?", VIENNA),
                    ("How many correct answers are there?", NIGER),
                    ("How many ways are there to answer this question?", VIENNA)]


@pytest.mark.parametrize("question, document", SELF_REFERENTIAL)
def test_the_self_referential_collapse_is_not_about_the_document(question, document):
    assert not grounded(question, document)
    with pytest.raises(TaskError, match="question is not about the document"):
        _task("integer", question, "1", document=document)
    assert _task("integer", question, "1").question == question  # the rule needs the document


@pytest.mark.parametrize("kind, question, answer, document", [
    ("string", "What is the name of the capital city of Niger?", "Niamey", NIGER),
    ("integer", "For how many years did the Ottoman Empire siege Vienna?", "2", VIENNA),
    ("integer", "Estimate the population of Timbuktu according to the given 2022 census, which states that there "
     "are around one million people.", "1000000", TIMBUKTU),
    ("integer", "In what year was the battle fought near Kahlenberg?", "1683", VIENNA),  # one shared name is enough
    ("mcq", "Which country lies to the south? A) Chad B) Libya C) Nigeria D) Mali", "C", NIGER),
])
def test_the_base_challengers_grounded_tasks_stay_valid(kind, question, answer, document):
    assert _task(kind, question, answer, document=document).question == question


def test_content_words_keep_names_terms_and_numbers():
    assert content_words("How many ships did Venice send in 1453?") == {"ship", "venice", "send", "1453"}
    assert content_words("How many correct answers are there? What is the total number?") == set()
    assert content_words("It covers 5,000 km2 and 7 towns.") == {"cover", "5000", "town"}  # "7", "km": too short
    assert content_words("Mississippi glass") == {"mississippi", "glass"}  # "ss" endings are no plurals


def test_the_words_that_ground_nothing_are_the_bm25_stop_words_and_the_task_words():
    assert _NOT_CONTENT == STOPWORDS | _TASK_WORDS and not STOPWORDS & _TASK_WORDS  # each word listed once


def test_a_document_in_another_script_is_not_checked():
    doc = "尼日尔共和国是西非的一个内陆国家，首都尼亚美。"
    assert grounded("尼日尔的首都是哪里？", doc)
    assert grounded("How many correct answers?", "Le Niger est un pays.")  # too few Latin words to judge


def test_the_grounding_rule_is_a_config_switch():
    assert load_config({"method": "spice"}).spice.require_grounding is True
    assert load_config({"method": "spice", "spice": {"require_grounding": False}}).spice.require_grounding is False


def _attempt(doc_id, question, i=0, reason=""):
    return Attempt(doc_id, doc_id, i, f"1:{doc_id}:{i}", [1], task=SpiceTask("free_form", "integer", question, "1"),
                   reason=reason)


def test_one_question_for_many_documents_is_invalid():
    """spice15's step-33 Challenger: a handful of templates over 96 documents; each is marked on every document."""
    final = [_attempt(f"wiki-{3000 + i}", q, i) for i, q in enumerate(
        ["How many answers?", "How many correct answers?", "How many correct answers?", "How many correct answers are "
         "there?", "how many correct answers", "How many correct answers are there?"])]
    assert mark_repeated(final) == 5 and final[0].valid  # "How many answers?" was written once
    assert all(a.reason.startswith("task: question repeated across documents") for a in final[1:])
    assert "(3 documents)" in final[1].reason  # case and punctuation blind


def test_repeats_are_found_through_typographic_punctuation():
    """Curly quotes and a hyphen instead of a space are the same question (the graders' normalize_answer would keep
    "’" and join "1990-91")."""
    attempts = [_attempt("d1", "What’s the “best” team of 1990-91?"), _attempt("d2", "What's the \"best\" team of 1990 91?")]
    assert mark_repeated(attempts) == 2


def test_distinct_questions_and_one_documents_repeats_stay_valid():
    base = [_attempt("wiki-3001", "What is the name of the capital city of Niger?"),
            _attempt("wiki-3002", "For how many years did the Ottoman Empire siege Vienna?"),
            _attempt("wiki-3001", "What is the name of the capital city of Niger?", 1),  # drawn twice in a step
            _attempt("wiki-3003", "How many correct answers?", reason="task: question is not about the document")]
    assert mark_repeated(base) == 0 and [a.valid for a in base] == [True, True, True, False]


def test_a_repeat_found_in_a_later_round_marks_the_earlier_copy_too_and_stays_marked():
    first = [_attempt("d1", "How many correct answers?"), _attempt("d2", "What is the capital of Chad?")]
    assert mark_repeated(first) == 0
    later = first + [_attempt("d3", "How many correct answers?", 1)]
    assert mark_repeated(later) == 2 and not later[0].valid and not later[2].valid
    again = later + [_attempt("d4", "How many correct answers?", 2)]
    assert mark_repeated(again) == 1 and "(3 documents)" in again[3].reason


def test_the_repeated_rule_has_its_own_rate():
    attempts = [_attempt("d1", "How many correct answers?"), _attempt("d2", "How many correct answers?"),
                _attempt("d3", "What is the capital of Chad?")]
    mark_repeated(attempts)
    chal = step_metrics(attempts)["challenger"]
    assert chal["invalid_repeated_rate"] == pytest.approx(2 / 3) and chal["invalid_task_rate"] == pytest.approx(2 / 3)


def test_a_refused_task_keeps_its_question_on_record():
    """A task that parsed but broke a rule is invalid and its question stays in the run's records (the ledger's
    near-duplicate rate then sees a collapse the rules refuse); a task that did not parse has none."""
    from trainer.methods.spice import records

    with pytest.raises(TaskError) as err:
        _task("integer", "How many correct answers?", "1", document=VIENNA)
    assert err.value.task == SpiceTask("free_form", "integer", "How many correct answers?", "1")
    with pytest.raises(TaskError) as err:
        _task("mcq", "Which? A) 1 B) 2 C) 3 D) 4 according to the text", "A", document=VIENNA)
    assert err.value.task is not None and err.value.task.answer == "A"
    with pytest.raises(TaskError) as err:
        parse_task("no json here", FormatChoice("free_form", "integer"))
    assert err.value.task is None
    refused = _attempt("wiki-3621", "How many correct answers?", reason="task: question is not about the document")
    assert not refused.valid
    row = records(33, [refused])[0]
    assert (row["question"], row["valid"]) == ("How many correct answers?", False)
    assert row["data"]["invalid_reason"] == "task: question is not about the document"


# ---- "answer repeated across documents" (gate.mark_repeated_answers) ------------------------------------------

def _answered(doc_id, question, answer, kind="integer", i=0, reason=""):
    fmt = "mcq" if kind == "mcq" else "free_form"
    return Attempt(doc_id, doc_id, i, f"37:{doc_id}:{i}", [1], task=SpiceTask(fmt, kind, question, answer),
                   reason=reason)


# today's 1.5B run, step 37, on held-out documents: grounded in a name of the document, worded differently each time,
# answered 1 or 2 (94 of its 96 tasks); its Reasoner learned to guess 1 or 2
STEP_37 = [("wiki-3160", "How many continents does Niger lie on?", "1"),
           ("wiki-3237", "How many continents does Prague belong to?", "1"),
           ("wiki-3439", "How many regions make up Mali?", "1"),
           ("wiki-3507", "How many world capitals are there in Poland?", "1"),
           ("wiki-3302", "How many time zones does San Francisco have?", "1"),
           ("wiki-3621", "How many sides did the Polish-Lithuanian Commonwealth have?", "2"),
           ("wiki-3658", "How many important treaties were signed at the Congress of Berlin?", "2"),
           ("wiki-3969", "How many types of national flags are there?", "2"),
           ("wiki-3054", "How many major parts does Manchester have?", "2"),
           ("wiki-3719", "How many historical dynasties existed during the Five Dynasties and Ten Kingdoms period?",
            "5")]
# the base Challenger on held-out documents of the same run: answers mostly distinct, "1" on 4 of its 96 documents
BASE = [("wiki-3621", "What year was the Battle of Vienna fought?", "1683", "integer"),
        ("wiki-3658", "How many European powers participated at the Congress of Berlin?", "5", "integer"),
        ("wiki-3392", "What is the world's largest island in terms of area in Indonesia?", "Sulawesi", "string"),
        ("wiki-3359", "How many islands does Solomon Islands have?", "6", "integer"),
        ("wiki-3465", "How many cities does Uganda have?", "1", "integer"),
        ("wiki-3530", "What is the average discharge of the Yamuna compared to the Ganges in terms of millions of "
                      "cubic meters per second?", "24.5", "float"),
        ("wiki-3753", "For how many years did the Great Turkish War last?", "16", "float"),
        ("wiki-3098", "What official language is spoken by residents of Monaco?", "French", "string"),
        ("wiki-3484", "What is the largest city in British Columbia? A) Vancouver B) Abbotsford C) Victoria D) Kelowna",
         "A", "mcq"),
        ("wiki-3576", "What was the period from which Algeria earned its independence? A) 1947-1950 B) 1955-1958 "
                      "C) 1959-1961 D) 1962-1965", "A", "mcq"),
        ("wiki-3918", "Which historically important period was initially ruled by the Le dynasty? A) Later Le B) Mac "
                      "C) Tay Son D) Nguyen", "A", "mcq")]


def test_a_collapsed_challengers_guessable_answers_are_invalid_and_the_rest_stay_valid():
    """Ten of step 37's tasks as one step: 1 (5 documents) and 2 (4 documents) are over a quarter of the 10
    documents; the single 5 is not, nor is anything of the base Challenger's."""
    step = [_answered(d, q, a, i=i) for i, (d, q, a) in enumerate(STEP_37)]
    assert mark_repeated_answers(step) == 9
    assert [a.valid for a in step] == [False] * 9 + [True]
    assert step[0].reason == "task: answer repeated across documents (5 documents, 50% of the step's 10)"
    assert step[5].reason == "task: answer repeated across documents (4 documents, 40% of the step's 10)"
    base = [_answered(d, q, a, kind, i) for i, (d, q, a, kind) in enumerate(BASE)]
    assert mark_repeated_answers(base) == 0 and all(a.valid for a in base)


def test_mcq_letters_are_exempt():
    """Three of the base Challenger's MCQs answer A: a letter is one of four by design, never 'repeated'."""
    mcqs = [_answered(d, q, a, kind, i) for i, (d, q, a, kind) in enumerate(BASE) if kind == "mcq"]
    assert len(mcqs) == 3 and mark_repeated_answers(mcqs) == 0 and all(a.valid for a in mcqs)


def test_one_documents_repeated_answer_is_one_document():
    """A document's 8 attempts may all answer 1: it counts once (split over its tasks), so with 6 other documents
    answering otherwise nothing is marked."""
    niger = [_answered("wiki-3160", "How many continents does Niger lie on?", "1", i=i) for i in range(8)]
    others = [_answered(d, q, a, kind, 8 + i) for i, (d, q, a, kind) in enumerate(BASE[:7]) if a != "1"]
    assert mark_repeated_answers(niger + others) == 0 and all(a.valid for a in niger + others)


def test_two_documents_sharing_an_answer_is_fine_even_over_the_share():
    """Answer 1 on 2 of 4 documents is half the step, but 3 documents at least make a repeat."""
    step = [_answered(d, q, a, i=i) for i, (d, q, a) in enumerate(STEP_37[:2] + STEP_37[5:7])]
    assert mark_repeated_answers(step) == 0 and all(a.valid for a in step)
    step.append(_answered(*STEP_37[2], i=9))  # a third document answers 1
    assert mark_repeated_answers(step) == 3 and sum(a.valid for a in step) == 2


def test_answers_are_equal_as_numbers_and_as_normalized_text():
    """The graders' equality: "1" = "1.0" = "01"; "1,000" = "1000"; "The Danube" = "danube." (the answers' spelling is
    varied here; the questions are step 37's)."""
    ones = [_answered("wiki-3160", STEP_37[0][1], "1"), _answered("wiki-3237", STEP_37[1][1], "1.0", "float"),
            _answered("wiki-3439", STEP_37[2][1], "01"), _answered("wiki-3621", STEP_37[5][1], "2")]
    assert mark_repeated_answers(ones) == 3 and ones[3].valid
    thousands = [_answered(f"d{i}", f"How many soldiers did army {i} have?", a, kind)
                 for i, (a, kind) in enumerate([("1,000", "integer"), ("1000", "integer"), ("1000.0", "float"),
                                                ("999", "integer")])]
    assert mark_repeated_answers(thousands) == 3 and thousands[3].valid
    rivers = [_answered(f"d{i}", f"Which river flows through city {i}?", a, "string")
              for i, a in enumerate(["The Danube", "danube.", "DANUBE", "Rhine"])]
    assert mark_repeated_answers(rivers) == 3 and rivers[3].valid
    near = [_answered(f"d{i}", f"What is ratio {i}?", a, "float") for i, a in enumerate(["0.5", "0.50", "0.4999999"])]
    assert mark_repeated_answers(near + [_answered("d9", "What is ratio 9?", "0.7", "float")]) == 3  # 1e-6: equal


def test_a_document_weighs_its_share_of_its_answers():
    """Three documents each answering 1 in one of their 4 attempts weigh 3/4 of a document: not over a quarter of 3
    documents... until a fourth document answers 1 in every attempt (1.75 of 4 documents)."""
    step = [_answered(f"d{d}", f"How many {w} does place {d} have?", "1" if i == 0 else str(10 + 4 * d + i), i=i)
            for d in range(3) for i, w in enumerate(["rivers", "lakes", "hills", "towns"])]
    assert mark_repeated_answers(step) == 0
    step += [_answered("d3", "How many continents does Niger lie on?", "1", i=i) for i in range(4)]
    assert mark_repeated_answers(step) == 7  # 3 + 4 tasks answering 1


def test_booleans_count_like_any_answer():
    step = [_answered(f"d{i}", f"Was treaty {i} signed before 1900?", "true", "boolean") for i in range(3)]
    assert mark_repeated_answers(step + [_answered("d9", "How many?", "4")]) == 3


def test_a_share_of_one_turns_the_rule_off_and_a_repeat_stays_marked_in_later_rounds():
    step = [_answered(d, q, a, i=i) for i, (d, q, a) in enumerate(STEP_37)]
    assert mark_repeated_answers(step, max_share=1.0) == 0 and all(a.valid for a in step)
    first = [_answered(d, q, a, i=i) for i, (d, q, a) in enumerate(STEP_37[:2] + STEP_37[5:7])]
    assert mark_repeated_answers(first) == 0
    later = first + [_answered(*STEP_37[2], i=9)]
    assert mark_repeated_answers(later) == 3 and not first[0].valid
    again = later + [_answered(f"wiki-{4000 + i}", f"How many capitals does place {i} have?", str(30 + i), i=i)
                     for i in range(8)]  # more documents: 1 is now 3 of 13, but the marks stay
    assert mark_repeated_answers(again) == 0 and sum(not a.valid for a in again) == 3


def test_a_question_already_repeated_does_not_count_for_the_answer_rule():
    """The recipe marks repeated questions first; the answer rule counts the tasks still valid."""
    step = [_answered(f"wiki-{3000 + i}", "How many correct answers?", "1", i=i) for i in range(4)]
    assert mark_repeated(step) == 4 and mark_repeated_answers(step) == 0
    assert all(a.reason.startswith("task: question repeated across documents") for a in step)


def test_the_answer_rule_has_its_own_rate_and_refused_tasks_keep_their_question():
    from trainer.methods.spice import records

    step = [_answered(d, q, a, i=i) for i, (d, q, a) in enumerate(STEP_37)]
    mark_repeated_answers(step)
    chal = step_metrics(step)["challenger"]
    assert chal["invalid_repeated_answer_rate"] == pytest.approx(0.9)
    assert chal["invalid_task_rate"] == pytest.approx(0.9)
    assert chal["invalid_repeated_rate"] == 0
    row = records(37, step[:1])[0]
    assert (row["question"], row["answer"], row["valid"]) == ("How many continents does Niger lie on?", "1", False)
    assert row["data"]["invalid_reason"].startswith("task: answer repeated across documents")


def test_max_answer_share_is_a_checked_config_key():
    from trainer.config import ConfigError

    assert load_config({"method": "spice"}).spice.max_answer_share == 0.25
    assert load_config({"method": "spice", "spice": {"max_answer_share": 1}}).spice.max_answer_share == 1.0
    for bad, says in ((0, "greater than 0"), (1.5, "less than or equal to 1"), ("most", "valid number")):
        with pytest.raises(ConfigError, match=f"spice.max_answer_share: .*{says}"):
            load_config({"method": "spice", "spice": {"max_answer_share": bad}})


HELD_OUT = Path(__file__).resolve().parents[2] / "examples" / "runs"


@pytest.mark.parametrize("run, marked", [
    ("spice-wiki-qwen15-lr2e-6-rules2", {"base": 0, "step 33": 96}),  # "How many correct answers? -> 1"
    ("spice-wiki-qwen15-lr2e-6", {"base": 0, "step 15": 43}),  # "How many paragraphs ... -> 1" (43 of 48)
    ("spice-wiki-qwen05-lr2e-6", {"base": 0, "step 35": 0}),  # digit strings, each its own (other rules catch them)
    ("spice-gsm8kdocs-qwen15-lr2e-6", {"base": 0, "step 10": 0}),  # math tasks: "50" on 4 of 64 documents
])
def test_the_runs_held_out_tasks_as_one_step_per_challenger(run, marked):
    rows = [json.loads(line) for line in (HELD_OUT / run / "crossplay_tasks.jsonl").read_text().splitlines()]
    for challenger, want in marked.items():
        step = [_answered(r["document_id"], r["question"], r["answer"], r["answer_type"], i)
                for i, r in enumerate(rows) if r["challenger"] == challenger]
        assert mark_repeated_answers(step) == want, challenger


def test_the_recipes_challenger_rounds_mark_repeated_answers(monkeypatch):
    """Through ``spice.challenge_until_valid`` (the recipe's Challenger loop, generation replaced by step 37's tasks):
    round 0 gives answer 1 on 2 of 7 documents (fine), a retry round gives it on a third, so all three tasks become
    invalid, the round-0 ones included; the document whose retry answered 1 has no valid task left."""
    from types import SimpleNamespace

    from trainer.methods import spice
    from trainer.methods.review import ReviewState
    from trainer.tools.corpus import Document

    titles = ["Niger", "Prague", "Battle of Vienna", "Congress of Berlin", "Five Dynasties", "Vancouver", "Mali"]
    docs = [Document(f"wiki-{3000 + i}", t, t) for i, t in enumerate(titles)]
    script = {  # (document, round) -> (question, answer, answer type) of its 2 attempts; None: an attempt that failed
        ("Niger", 0): [(STEP_37[0][1], "1", "integer"), None],
        ("Prague", 0): [(STEP_37[1][1], "1", "integer"), None],
        ("Battle of Vienna", 0): [(STEP_37[5][1], "2", "integer"), None],
        ("Congress of Berlin", 0): [(STEP_37[6][1], "2", "integer"), None],
        ("Five Dynasties", 0): [(STEP_37[9][1], "5", "integer"), None],
        ("Vancouver", 0): [(BASE[8][1], "A", "mcq"), None],
        ("Mali", 0): [None, None],
        ("Mali", 1): [(STEP_37[2][1], "1.0", "float"), None],
    }
    rounds = []

    def challenge(ctx, batch, step, draws):
        round_ = draws[0] % 2  # draws[d] * rounds + round_, 2 rounds
        rounds.append((round_, [d.title for d in batch]))
        out = []
        for g, doc in enumerate(batch):
            for i, spec in enumerate(script[(doc.title, round_)]):
                a = Attempt(str(doc.id), doc.title, 2 * round_ + i, f"{step}:{doc.id}:{2 * round_ + i}", [1], group=g,
                            loss_mask=[1])
                if spec is None:
                    a.reason = "task: no parsable JSON"
                else:
                    q, ans, kind = spec
                    a.task = SpiceTask("mcq" if kind == "mcq" else "free_form", kind, q, ans)
                out.append(a)
        return out

    monkeypatch.setattr(spice, "challenge", challenge)
    cfg = load_config({"method": "spice", "spice": {"challenger_attempts": 2, "max_challenger_attempts": 4,
                                                     "challenger_token_budget": 10**6}})
    ctx = SimpleNamespace(config=cfg, policy=SimpleNamespace(device=SimpleNamespace(type="cpu")))
    by_doc, report = spice.challenge_until_valid(ctx, docs, 37, [0] * len(docs), ReviewState())
    assert rounds == [(0, titles), (1, ["Mali"])]
    reasons = {a.task.answer: a.reason for row in by_doc for a in row if a.task}
    assert all(reasons[x].startswith("task: answer repeated across documents (3 documents") for x in ("1", "1.0"))
    assert not reasons["2"] and not reasons["5"] and not reasons["A"]  # 2 documents each; an MCQ letter
    assert [any(a.valid for a in row) for row in by_doc] == [False, False, True, True, True, True, False]
    attempts = [a for row in by_doc for a in row]
    assert step_metrics(attempts)["challenger"]["invalid_repeated_answer_rate"] == pytest.approx(3 / 16)

    off = load_config({"method": "spice", "spice": {"challenger_attempts": 2, "max_challenger_attempts": 4,
                                                     "challenger_token_budget": 10**6, "max_answer_share": 1.0}})
    rounds.clear()
    by_doc, _ = spice.challenge_until_valid(SimpleNamespace(config=off, policy=ctx.policy), docs, 37, [0] * len(docs),
                                            ReviewState())
    assert all(a.valid for row in by_doc for a in row if a.task)


def test_a_step_without_a_valid_task_logs_no_reasoner_accuracy():
    """The demo's SmolLM2 SPICE run wrote no valid task in 30 steps; its run page drew a flat 'reasoner accuracy 0'
    line that looked measured. A step whose tasks all failed logs tasks = 0 and no accuracy, boxed rate, length or
    Challenger pass rate."""
    def attempt(reason):
        return Attempt("d", "Doc", 0, "1:d:0", [1], task=SpiceTask("free_form", "integer", "q", "1"), reason=reason)

    metrics = step_metrics([attempt("format: no JSON object"), attempt("task: integer answer expected, got 'x'")])
    assert metrics["reasoner"] == {"tasks": 0.0}
    assert "pass_rate_mean" not in metrics["challenger"] and metrics["challenger"]["valid_rate"] == 0.0
