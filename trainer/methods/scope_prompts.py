"""SCOPE's Challenger and Solver prompts and the task parser (pure functions).

The Judge prompts (gates, rubric writing, grading) live in ``trainer/judge.py`` and the reward
formulas (format parts, f_diff, length penalty) in ``trainer/rewards.py``; this file holds what
only SCOPE's two trained roles need. Wording is ours, structure is the paper's (scope.txt,
Appendix H, Figures 9-10).
"""
from __future__ import annotations

from trainer.methods.parts import tag_content

TASK_TYPES: dict[str, tuple[str, str]] = {
    # name -> (display name, description), paper Appendix H "Task type descriptions"
    "long_form_qa": ("Long-form QA", "One question about how, what or why something works, happened or exists. "
                     "It explains a single topic and needs no organised sections."),
    "summarisation": ("Summarisation", "Condense or transform existing content into a shorter or different form. "
                      "It needs source material to work from."),
    "planning": ("Planning", "Produce an actionable plan with concrete steps, a timeline or milestones."),
    "writing": ("Writing", "Compose a formal document with an explicit structure (introduction, body, conclusion): "
                "an essay, article or report that may need citations."),
}

CHALLENGER_TEMPLATE = """Write a demanding long-form task from the source document and the information you retrieve.

## Source Document
{document}

## Task Type
The task must be of type: **{task_type}**
{task_description}

## Instructions
Use exactly **{n_searches}** search turn(s). Each search must target ONE specific entity named in the results of \
the PREVIOUS search (for the first search: named in the source document), not the general topic of the document. \
When your searches are done, write the final task.
The final task MUST depend on facts from EVERY search turn: if the results of any one search could be dropped \
without changing the answer, the task is invalid.

## Search Turn Format
<think>What the results show ... which entity or fact to follow next ...</think>
<search>one search query</search>

## Final Task Format (after your last search)
<think>Your final reasoning.
Checklist:
- [ ] every search turn added an essential fact that is not in the source document
- [ ] the task needs ALL of these facts to be answered fully
- [ ] entities are identifiable (full names, qualifiers where needed, acronyms spelled out)
- [ ] no answer leakage (no specific facts, dates, figures or secondary names)
- [ ] it needs retrieval (the prompt alone cannot answer it)
- [ ] it states the expected output format
- [ ] English only
</think>
<task><question>The task for the solver. Withhold anything that can be searched for.</question></task>"""

SOLVER_TEMPLATE = """Answer the given question. Reason inside <think> and </think> first every time you receive new \
information. After reasoning, if some knowledge is missing, call a search engine with <search> query </search>; it \
returns the top results between <information> and </information>. You can search at most {max_searches} times, so \
plan your searches. When no more outside knowledge is needed, give the answer inside <answer> and </answer>, without \
lengthy illustrations. For example, <answer> Beijing </answer>. Question: {question}"""


def challenger_prompt(document: str, task_type: str, n_searches: int) -> str:
    if task_type not in TASK_TYPES:
        raise ValueError(f"unknown SCOPE task type {task_type!r}; choose from {', '.join(TASK_TYPES)}")
    name, description = TASK_TYPES[task_type]
    return CHALLENGER_TEMPLATE.format(document=document, task_type=name, task_description=description,
                                      n_searches=n_searches)


def solver_prompt(question: str, max_searches: int) -> str:
    return SOLVER_TEMPLATE.format(question=question, max_searches=max_searches)


def parse_task(text: str) -> str | None:
    """The question of the final ``<task><question>...</question></task>``, else None.

    A bare ``<task>...</task>`` (the paper's Figure 9 form) is accepted as the question too; the
    structure reward (``trainer.rewards.scope_format_parts``) only credits the full form.
    """
    task = tag_content(text, "task")
    if task is None:
        return None
    return tag_content(task, "question") or (task if "<" not in task else None)

