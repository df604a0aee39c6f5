"""``SearchTool``: runs a batch of queries through a ``Retriever`` and formats each result
list as the tool response the model reads (Search-R1 format, as the papers use):

    <information>Doc 1 (Title: ...) passage text
    Doc 2 (Title: ...) passage text
    </information>

The passage block is cut to ``max_tokens`` tokens (500 in the papers) with the policy's
tokenizer, so a long corpus cannot blow up the context.
"""
from __future__ import annotations

from trainer.tools.corpus import truncate_to_tokens
from trainer.tools.retriever import Passage, Retriever

NO_RESULTS = "No results found."


class SearchTool:
    def __init__(self, retriever: Retriever, k: int = 3, max_tokens: int = 500, tokenizer=None,
                 info_tag: str = "information"):
        if k < 1:
            raise ValueError(f"search top-k must be >= 1, got {k}")
        if max_tokens < 1:
            raise ValueError(f"tool response max_tokens must be >= 1, got {max_tokens}")
        self.retriever = retriever
        self.k = k
        self.max_tokens = max_tokens
        self.tokenizer = tokenizer
        self.info_tag = info_tag
        self.calls = 0  # retriever calls (one per rollout step with pending queries)
        self.queries = 0

    def search(self, queries: list[str]) -> list[list[Passage]]:
        """Top-k passages for every query, in ONE retriever call."""
        if not queries:
            return []
        self.calls += 1
        self.queries += len(queries)
        results = self.retriever.search(list(queries), self.k)
        if len(results) != len(queries):
            raise RuntimeError(f"retriever returned {len(results)} result lists for {len(queries)} queries")
        return [list(r)[: self.k] for r in results]

    def format(self, passages: list[Passage], max_tokens: int | None = None) -> str:
        """The tool response text for one query's passages, within the token budget (``max_tokens``
        when smaller: the room a rollout has left for this result)."""
        body = "".join(f"Doc {i} (Title: {p.title}) {p.text}\n" for i, p in enumerate(passages, start=1))
        cap = self.max_tokens if max_tokens is None else max(0, min(self.max_tokens, max_tokens))
        body = truncate_to_tokens(body, self.tokenizer, cap) if body else NO_RESULTS
        return f"<{self.info_tag}>{body}</{self.info_tag}>"

    def message(self, text: str) -> str:
        """A tool response that carries a note instead of passages (e.g. an empty query)."""
        return f"<{self.info_tag}>{text}</{self.info_tag}>"
