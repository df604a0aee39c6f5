"""The multi-turn search loop (Search-R1 style) and its single-turn special case.

Each round generates for every unfinished trajectory until ``</search>`` (the query tag),
the final tag (``</answer>``), EOS or the token budget. All queries closed in that round
are sent to the retriever as ONE batch; each response ``\\n\\n<information>...</information>
\\n\\n`` is tokenized by us and appended with loss mask 0 and logprob 0.0, and the next
round continues from the exact token ids so far (model tokens are never re-tokenized).

Limits keep every rollout bounded whatever the model writes:
- ``max_turns`` assistant turns (a query written in the last turn is not run: truncated). The result of
  a search in the turn before the last is followed by a note that it was the last search and asks the
  model to finish (``LAST_TURN``, ~30 tokens; with a reserve, the result is cut by that much more; an
  invalid search there gets the note instead of the invalid-query one):
  without it, Qwen2.5-Coder-1.5B as SCORE's evaluator searched again in its last turn in 4 of 16
  evaluations and ended with no scores (benchmarks/score_rubric_probe.py, RESULTS.md);
- ``max_total_tokens`` completion tokens (model + tool; default ``params.max_new_tokens``,
  the "max response length" of the papers); a tool response that does not fit is cut;
- an empty query or a ``</search>`` without its opening tag gets a short corrective tool
  message instead of results and is counted in ``n_invalid_searches``;
- ``answer_reserve`` (default 0, off; the recipes pass ``rollout.answer_reserve_tokens``, where None
  is a quarter of the budget; ``reserve_for``): this many tokens of the budget are kept for the answer.
  A search result is cut so that they remain; a search with room for fewer than
  ``MIN_RESULT_TOKENS`` of result is not run, and a short tool message says the search budget
  is spent and asks for the final answer (counted in ``n_refused_searches``). Search results then
  never eat the reserve (the model's own text, its search calls and the refusal note itself, ~35
  tokens, still draw on it): with a 512-token trajectory and none, Qwen2.5-Coder-1.5B's SCORE
  reports were cut before their ``<answer>`` 59-96% of the time, nearly every one that searched
  (RESULTS.md).
"""
from __future__ import annotations

import re
from dataclasses import replace

from trainer.rollout.types import Completion, Generator, SamplingParams, Trajectory
from trainer.tools.search import SearchTool

INVALID_QUERY = ("Invalid search: write a non-empty query between <{q}> and </{q}>, "
                 "or give the final answer between <{f}> and </{f}>.")
BUDGET_SPENT = ("Search budget spent: no more searches. Write your final answer now, between <{f}> and </{f}>, "
                "from what you have found.")
LAST_TURN = ("That was your last search: no more searches will run. Finish your reply now, as instructed, ending "
             "with </{f}>, from what you have found.")  # "ending with": a reply may hold more than its final tag
TOOL_WRAPPER_TOKENS = 16  # the "\n\n<information>...</information>\n\n" around a result, generously
MIN_RESULT_TOKENS = 32  # with an answer reserve: a search with room for less result than this is not run
SEARCH_CALL_TOKENS = 8  # the shortest search the model can write, "<search>x</search>" (6-7 tokens on Qwen2.5, SmolLM2)
SEARCH_ROOM = SEARCH_CALL_TOKENS + MIN_RESULT_TOKENS + TOOL_WRAPPER_TOKENS  # what one search needs beside a reserve


def reserve_for(setting: int | None, budget: int) -> int:
    """The answer reserve of a trajectory of ``budget`` tokens under ``rollout.answer_reserve_tokens``:
    None = a quarter of the budget, 0 = none; either at most what leaves room for one search call and
    its result (none at all under 74 tokens).

    >>> reserve_for(None, 512), reserve_for(256, 768), reserve_for(None, 60), reserve_for(300, 320), reserve_for(0, 512)
    (128, 256, 0, 264, 0)
    """
    room = budget - SEARCH_ROOM  # the most a reserve may keep
    if setting is None:
        return budget // 4 if budget // 4 <= room else 0
    return max(0, min(setting, room))


def tag_contents(text: str, tag: str) -> list[str]:
    """Contents of every closed ``<tag>...</tag>`` in ``text`` (non-greedy, in order)."""
    return re.findall(rf"<{re.escape(tag)}>(.*?)</{re.escape(tag)}>", text, flags=re.DOTALL)


def last_tag(text: str, tag: str) -> str | None:
    """Stripped content of the last closed ``<tag>...</tag>``, or None."""
    found = tag_contents(text, tag)
    return found[-1].strip() if found else None


def closing_query(turn_text: str, query_tag: str) -> str | None:
    """The query closed by the first ``</query_tag>`` of a turn: the text after the last
    ``<query_tag>`` before it; None when the tag was never opened."""
    close = turn_text.find(f"</{query_tag}>")
    if close < 0:
        return None
    head = turn_text[:close]
    start = head.rfind(f"<{query_tag}>")
    if start < 0:
        return None
    return head[start + len(query_tag) + 2 :].strip()


def _first_close(text: str, tags: list[str]) -> str | None:
    """Which of ``</tag>`` appears first in ``text``."""
    best, where = None, len(text) + 1
    for tag in tags:
        i = text.find(f"</{tag}>")
        if 0 <= i < where:
            best, where = tag, i
    return best


def single_turn(generator: Generator, prompts: list[list[int]], params: SamplingParams,
                use_adapter: bool = True, final_tag: str | None = None) -> list[Trajectory]:
    """One generation per prompt, no tool: every completion token is trained."""
    outs = generator.generate(prompts, params, use_adapter=use_adapter)
    trajs = []
    for c in outs:
        t = Trajectory(prompt_ids=list(c.prompt_ids), completion_ids=list(c.completion_ids),
                       loss_mask=[1] * len(c.completion_ids), logprobs=list(c.logprobs), text=c.text,
                       turns=[{"role": "assistant", "text": c.text}], finish_reason=c.finish_reason,
                       truncated=c.finish_reason == "length", temperature=c.temperature)
        if final_tag:
            t.final = last_tag(c.text, final_tag)
            t.n_answer_tags = c.text.count(f"<{final_tag}>")
        trajs.append(t)
    return trajs


def multi_turn_rollout(
    generator: Generator,
    tokenizer,
    prompts: list[list[int]],
    params: SamplingParams,
    search_tool: SearchTool | None,
    max_turns: int = 4,
    query_tag: str = "search",
    final_tag: str = "answer",
    use_adapter: bool = True,
    *,
    max_total_tokens: int | None = None,
    answer_reserve: int | None = 0,
) -> list[Trajectory]:
    """Roll out every prompt with the search tool; see the module docstring."""
    if max_turns < 1:
        raise ValueError(f"max_turns must be >= 1, got {max_turns}")
    if answer_reserve is not None and answer_reserve < 0:
        raise ValueError(f"answer_reserve must be >= 0 tokens, got {answer_reserve}")
    budget = max_total_tokens if max_total_tokens is not None else params.max_new_tokens
    answer_reserve = reserve_for(answer_reserve, budget)
    stops = list(dict.fromkeys([*params.stop, f"</{final_tag}>"] + ([f"</{query_tag}>"] if search_tool else [])))
    turn_params = replace(params, stop=stops)
    trajs = [Trajectory(prompt_ids=list(p), temperature=params.logprob_temperature) for p in prompts]
    live = list(range(len(prompts)))
    for turn in range(max_turns):
        if not live:
            break
        room = [budget - len(trajs[i].completion_ids) for i in live]
        outs = _generate(generator, [trajs[i].prompt_ids + trajs[i].completion_ids for i in live],
                         turn_params, use_adapter, room)
        pending: list[tuple[int, str]] = []  # (trajectory index, query)
        still: list[int] = []
        for i, out in zip(live, outs):
            t = trajs[i]
            _append_model(t, out)
            verdict = _after_turn(t, out, query_tag, final_tag, search_tool is not None)
            if verdict == "search":
                if turn == max_turns - 1:
                    t.finish_reason, t.truncated = "max_turns", True
                    continue
                query = closing_query(out.text, query_tag)
                if not query:
                    t.n_invalid_searches += 1
                    invalid = INVALID_QUERY if turn < max_turns - 2 else LAST_TURN  # no turn left for a retry
                    _append_tool(t, tokenizer, search_tool.message(invalid.format(q=query_tag, f=final_tag)), budget)
                elif answer_reserve and _result_room(t, budget, answer_reserve) < MIN_RESULT_TOKENS:
                    t.n_refused_searches += 1
                    _append_tool(t, tokenizer, search_tool.message(BUDGET_SPENT.format(f=final_tag)), budget)
                else:
                    t.queries.append(query)
                    t.n_searches += 1
                    pending.append((i, query))
                    continue
            elif verdict is not None:
                t.finish_reason = verdict
                t.truncated = verdict == "length"
                continue
            if not _finished(t, budget):
                still.append(i)
        if pending:
            results = search_tool.search([q for _, q in pending])
            # the next turn is the last: a search written there would not run, so each result says so; the note
            # is paid for by the result, not by the answer's reserve
            note = "\n\n" + search_tool.message(LAST_TURN.format(f=final_tag)) if turn == max_turns - 2 else ""
            note_tokens = len(tokenizer.encode(note, add_special_tokens=False)) if note else 0
            for (i, _), passages in zip(pending, results):
                t = trajs[i]
                t.passages.extend(passages)
                cap = _result_room(t, budget, answer_reserve) - note_tokens if answer_reserve else None
                _append_tool(t, tokenizer, search_tool.format(passages, max_tokens=cap) + note, budget)
                if not _finished(t, budget):
                    still.append(i)
        live = sorted(still)
    for t in trajs:
        _finalize(t, tokenizer, final_tag)
    return trajs


def _result_room(t: Trajectory, budget: int, reserve: int) -> int:
    """Tokens of search result that fit while ``reserve`` tokens of the budget stay for the answer."""
    return budget - len(t.completion_ids) - reserve - TOOL_WRAPPER_TOKENS


def _generate(generator, prompts, params, use_adapter, room) -> list[Completion]:
    """Generate with a per-row token cap where the backend supports it."""
    if len(set(room)) == 1:
        return generator.generate(prompts, replace(params, max_new_tokens=min(params.max_new_tokens, room[0])),
                                  use_adapter=use_adapter)
    try:
        return generator.generate(prompts, params, use_adapter=use_adapter, max_new_tokens=room)
    except TypeError:  # a backend without per-row caps: cap at the largest, cut the rest
        outs = generator.generate(prompts, replace(params, max_new_tokens=min(params.max_new_tokens, max(room))),
                                  use_adapter=use_adapter)
        return [_cut(o, r, generator) for o, r in zip(outs, room)]


def _cut(out: Completion, limit: int, generator) -> Completion:
    if len(out.completion_ids) <= limit:
        return out
    ids = out.completion_ids[:limit]
    text = generator.tokenizer.decode(ids, skip_special_tokens=True) if hasattr(generator, "tokenizer") else out.text
    return replace(out, completion_ids=ids, logprobs=out.logprobs[:limit], text=text, finish_reason="length", stop=None)


def _append_model(t: Trajectory, out: Completion) -> None:
    t.completion_ids.extend(out.completion_ids)
    t.loss_mask.extend([1] * len(out.completion_ids))
    t.logprobs.extend(out.logprobs)
    t.turns.append({"role": "assistant", "text": out.text})


def _append_tool(t: Trajectory, tokenizer, response: str, budget: int) -> None:
    """Append a tool response (masked). Cut to the remaining budget; then the rollout ends."""
    ids = tokenizer.encode(f"\n\n{response}\n\n", add_special_tokens=False)
    room = budget - len(t.completion_ids)
    if len(ids) > room:
        ids = ids[: max(room, 0)]
        t.truncated, t.finish_reason = True, "length"
    t.completion_ids.extend(ids)
    t.loss_mask.extend([0] * len(ids))
    t.logprobs.extend([0.0] * len(ids))
    t.n_tool_tokens += len(ids)
    t.turns.append({"role": "tool", "text": tokenizer.decode(ids, skip_special_tokens=True) if ids else ""})


def _after_turn(t: Trajectory, out: Completion, query_tag: str, final_tag: str, has_tool: bool) -> str | None:
    """What ends this turn: "search", a finish reason, or None (keep generating)."""
    closed = _first_close(out.text, [final_tag] + ([query_tag] if has_tool else []))
    if closed == final_tag:
        return "final"
    if closed == query_tag:
        return "search"
    if out.finish_reason == "eos":
        return "eos"
    if out.finish_reason == "stop":
        return "stop"
    if out.finish_reason == "length":
        return "length"
    return None


def _finished(t: Trajectory, budget: int) -> bool:
    if t.finish_reason:
        return True
    if len(t.completion_ids) >= budget:
        t.finish_reason, t.truncated = "length", True
        return True
    return False


def _finalize(t: Trajectory, tokenizer, final_tag: str) -> None:
    model_text = "".join(turn["text"] for turn in t.turns if turn["role"] == "assistant")
    t.final = last_tag(model_text, final_tag)
    t.n_answer_tags = model_text.count(f"<{final_tag}>")
    t.text = tokenizer.decode(t.completion_ids, skip_special_tokens=True)
    if not t.finish_reason:  # every turn used on searches
        t.finish_reason, t.truncated = "max_turns", True
