"""What human review verdicts change in a self-play recipe: the set of flagged tasks.

At each step boundary a recipe hands ``sink.control().verdicts`` to ``ReviewState.apply``.
A task flagged by a reviewer is, from then on, excluded from Solver/Reasoner training and
counts as invalid for the Challenger/Proposer reward. It is recognised by its sink key (a
replayed SSP question keeps its key) and by its question text (normalised), so the same
question written again later is caught too. A later "approve" of the same key lifts the flag.

A reviewer can also edit a task's question and gold answer (``Verdict.task_edit()``). The edit is
kept by key (``edits``) and ``apply_edits`` rewrites the recipe's stored copies of the task: SSP's
replay buffer and SCOPE's task pool, so a replayed or pooled task trains on the corrected text.
A task consumed in the step that wrote it (SPICE) has no stored copy left to change.

The flagged sets go into the checkpoint (``state_dict``) and survive resume; the key ->
question index only remembers the most recent ``memory`` tasks and is not checkpointed.
"""
from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Iterable

from trainer.sink import Verdict


def normalize_question(text: str) -> str:
    """Lower case, punctuation dropped, spaces collapsed."""
    return " ".join(re.sub(r"[^\w\s]", " ", (text or "").lower()).split())


class ReviewState:
    def __init__(self, memory: int = 50_000):
        self.flagged_keys: set[str] = set()
        self.flagged_questions: set[str] = set()
        self.edits: dict[str, dict] = {}  # task key -> {"question", "answer"} a reviewer wrote
        self._questions: OrderedDict[str, str] = OrderedDict()
        self.memory = memory

    def remember(self, key: str, question: str | None) -> None:
        """Record a task's question so a verdict on its key can also flag the text."""
        if not question:
            return
        self._questions[key] = normalize_question(question)
        self._questions.move_to_end(key)
        while len(self._questions) > self.memory:
            self._questions.popitem(last=False)

    def apply(self, verdicts: Iterable[Verdict]) -> list[str]:
        """Apply task verdicts in order; returns the keys flagged by this call."""
        newly = []
        for v in verdicts:
            if v.kind != "task":
                continue
            edit = v.task_edit()
            if edit:
                self.edits[v.key] = edit
            text = self._questions.get(v.key)
            if v.verdict == "flag":
                if v.key not in self.flagged_keys:
                    newly.append(v.key)
                self.flagged_keys.add(v.key)
                if text:
                    self.flagged_questions.add(text)
            elif v.verdict == "approve":
                self.flagged_keys.discard(v.key)
                if text:
                    self.flagged_questions.discard(text)
        return newly

    def apply_edits(self, entries: list[dict]) -> int:
        """Rewrite stored tasks (dicts with ``key``, ``question`` and maybe ``answer``) a reviewer edited,
        in place; returns how many changed."""
        changed = 0
        for entry in entries:
            edit = self.edits.get(entry.get("key"))
            if not edit:
                continue
            new = {k: v for k, v in edit.items() if k == "question" or "answer" in entry}
            if any(entry.get(k) != v for k, v in new.items()):
                entry.update(new)
                changed += 1
        return changed

    def is_flagged(self, key: str | None = None, question: str | None = None) -> bool:
        if key is not None and key in self.flagged_keys:
            return True
        return bool(question) and normalize_question(question) in self.flagged_questions

    def state_dict(self) -> dict:
        return {"flagged_keys": sorted(self.flagged_keys), "flagged_questions": sorted(self.flagged_questions),
                "edits": dict(self.edits)}

    def load_state_dict(self, state: dict) -> None:
        self.flagged_keys = set(state.get("flagged_keys", []))
        self.flagged_questions = set(state.get("flagged_questions", []))
        self.edits = dict(state.get("edits", {}))
