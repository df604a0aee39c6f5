"""The data the rollout layer hands around: sampling knobs, one completion, one trajectory,
and the ``Generator`` protocol every backend (transformers, vLLM) implements.

Log-probabilities: every backend reports, for each sampled token, ``log_softmax(logits / T)``
of the model's raw logits at the sampling temperature ``T`` (``T = 1`` for greedy decoding,
``temperature == 0``). It is taken *before* top-p truncation and before the
``min_new_tokens`` EOS suppression, i.e. exactly what the trainer recomputes with one forward
pass at the same temperature, so the PPO ratio of an on-policy sample starts at 1.
``Completion.temperature`` says which ``T`` was used.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from trainer.tools.retriever import Passage

FINISH_REASONS = ("eos", "stop", "length")


@dataclass
class SamplingParams:
    """Per-call sampling settings. ``temperature == 0`` means greedy decoding.

    ``stop``: strings that end a sequence once the generated text contains one; the token that
    completes the string is kept (token ids are never cut), so ``text`` may run a few
    characters past it. EOS and stop strings are both ignored before ``min_new_tokens``.

    ``logprobs=False``: the caller does not need the sampled tokens' log-probs (the trainer takes
    its own as the PPO reference, ``train.old_logprobs``); a backend that would pay for them (vLLM)
    skips them and reports nan in ``Completion.logprobs``; one that gets them for free still reports them.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    min_new_tokens: int = 0
    stop: list[str] = field(default_factory=list)
    logprobs: bool = True

    def __post_init__(self) -> None:
        problems = []
        if self.temperature < 0:
            problems.append(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if not 0 < self.top_p <= 1:
            problems.append(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_new_tokens < 0:
            problems.append(f"max_new_tokens must be >= 0, got {self.max_new_tokens}")
        if not 0 <= self.min_new_tokens:
            problems.append(f"min_new_tokens must be >= 0, got {self.min_new_tokens}")
        if any(not isinstance(s, str) or not s for s in self.stop):
            problems.append(f"stop must be a list of non-empty strings, got {self.stop!r}")
        if problems:
            raise ValueError("bad SamplingParams: " + "; ".join(problems))

    @property
    def logprob_temperature(self) -> float:
        """The temperature the reported logprobs are computed at (1.0 for greedy)."""
        return self.temperature if self.temperature > 0 else 1.0


@dataclass
class Completion:
    """One generated continuation of one prompt.

    finish_reason: "eos" (an end-of-sequence token, kept as the last id), "stop" (a stop
    string, named in ``stop``), or "length" (``max_new_tokens`` reached).
    """

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str
    stop: str | None = None
    temperature: float = 1.0  # the T of the logprobs (see module docstring)


@runtime_checkable
class Generator(Protocol):
    def generate(
        self,
        prompts: list[list[int]],
        params: SamplingParams,
        use_adapter: bool = True,
    ) -> list[Completion]:
        """One completion per prompt, in order. ``use_adapter=False``: the frozen base (LoRA)."""
        ...


@dataclass
class Trajectory:
    """A (possibly multi-turn) rollout of one prompt.

    ``completion_ids`` holds everything after the prompt: model tokens AND tool-response
    tokens. ``loss_mask``/``logprobs`` have the same length; tool tokens have mask 0 and
    logprob 0.0.
    """

    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    text: str = ""
    turns: list[dict] = field(default_factory=list)  # {"role": "assistant"|"tool", "text"}
    passages: list[Passage] = field(default_factory=list)
    queries: list[str] = field(default_factory=list)
    n_searches: int = 0  # searches run (== len(queries)); malformed ones: n_invalid_searches
    final: str | None = None
    truncated: bool = False
    n_answer_tags: int = 0
    # extensions: how it ended and what went wrong (bounded, counted, never raised)
    finish_reason: str = ""  # "final" | "eos" | "stop" | "max_turns" | "length"
    n_invalid_searches: int = 0  # closed query tag with an empty / unopened query
    n_refused_searches: int = 0  # queries not run because their result would eat the answer's reserve
    n_tool_tokens: int = 0
    temperature: float = 1.0

    @property
    def n_model_tokens(self) -> int:
        return sum(self.loss_mask)

    def to_attempt(self) -> dict:
        """The parts of a sink ``attempt`` record that come from the rollout."""
        return {
            "text": self.text,
            "turns": list(self.turns),
            "passages": [p.to_dict() for p in self.passages],
            "token_ids": list(self.completion_ids),
            "loss_mask": list(self.loss_mask),
        }
