"""pi-Play's prompts, parsers, QCP assembly and the teacher EMA (pure parts).

The paper's prompts were lost in extraction (piplay.txt Appendix D is empty); the examiner
prompt follows the structure of Dr.Zero's proposer that pi-Play says it reuses (a source
passage, a hop count, n-1 searches, then ``<question>`` and ``<answer>``), in our wording. The
student prompt is the Search-R1 style prompt; the teacher prompt is the student prompt plus the
question construction path (QCP) as privileged context.

``TeacherEMA`` keeps the teacher as tensors, not as a second module, updated as
theta_T <- (1 - rate) theta_T + rate theta_S and run with ``torch.func.functional_call`` so the
student's own parameters are never touched. Full fine-tune: a copy of the trainable parameters.
LoRA (``TeacherEMA.from_lora``): the EMA is of the ADAPTED weights W0 + s B A of every adapted
layer, not of the factors B and A separately (EMA(B) EMA(A) is not EMA(B A): two students with the
same B A but different factors would give different teachers); the teacher runs with each adapted
layer's base weight replaced by its EMA and the student's B zeroed. It costs one copy of the
adapted layers' weights (a 1.5B model with all-linear LoRA: ~1.3B numbers).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from trainer.algos.distill import topk_tail_divergence
from trainer.methods.parts import assistant_texts, tag_content
from trainer.rewards import think_fraction, valid_searches

EXAMINER_TEMPLATE = """You write one question that needs exactly {hops}-hop reasoning to answer, built from the \
passage below and from what you find with a search engine.
Reason inside <think> and </think> every time you receive new information. To search, write \
<search> query </search>; results come back between <information> and </information>.
How to build it: start from one entity or fact of the passage. {search_instruction} The final question must need \
every hop: someone who skipped any one of them could not answer it. The answer is a short span \
(a name, a date, a number or a few words) that your passages support.
When done, write the question inside <question> and </question> and its answer inside <answer> and </answer>.

Passage:
{document}"""

STUDENT_TEMPLATE = """Answer the given question. Reason inside <think> and </think> first every time you receive new \
information. If some knowledge is missing, call a search engine with <search> query </search>; it returns the top \
results between <information> and </information>. Search as often as you need. When no more outside knowledge is \
needed, give a short answer inside <answer> and </answer>, for example <answer> Beijing </answer>. \
Question: {question}"""

TEACHER_SUFFIX = """

Privileged context (how this question was built; do not mention it): the question construction path below shows the \
passages, searches and reasoning that lead to the answer.
<construction_path>
{qcp}
</construction_path>"""


def examiner_prompt(document: str, hops: int) -> str:
    if hops < 1:
        raise ValueError(f"hop count must be at least 1, got {hops}")
    if hops == 1:
        instruction = "A 1-hop question needs no search: ask about a fact of the passage itself."
    else:
        instruction = (f"Make exactly {hops - 1} search(es), each following an entity named in the previous "
                       "result, so the question chains the passage through every search.")
    return EXAMINER_TEMPLATE.format(hops=hops, search_instruction=instruction, document=document)


def student_prompt(question: str) -> str:
    return STUDENT_TEMPLATE.format(question=question)


def teacher_prompt(question: str, qcp: str) -> str:
    """The student's prompt plus the QCP as privileged context (the teacher never generates)."""
    return student_prompt(question) + TEACHER_SUFFIX.format(qcp=qcp)


def parse_question_answer(text: str) -> tuple[str | None, str | None]:
    """(question, answer) of the examiner's final turn; either may be None."""
    return tag_content(text, "question"), tag_content(text, "answer")


def examiner_format(turns: Sequence[dict], hops: int) -> float:
    """r_fmt of the examiner (ours, after Dr.Zero's proposer format reward): the mean of
    think fraction, min(valid searches / (hops - 1), 1) (1 for a 1-hop question that does not
    search, else 0) and a final turn holding both a question and an answer.

    2 hops, turns [think+search, think+question+answer]: (1 + 1 + 1) / 3 = 1.0;
    without the think in turn 2: (0.5 + 1 + 1) / 3 = 0.833.
    """
    texts = assistant_texts(turns)
    searches = sum(valid_searches(t) for t in texts)
    if hops > 1:
        tool = min(searches / (hops - 1), 1.0)
    else:
        tool = 1.0 if searches == 0 else 0.0
    q, a = parse_question_answer(texts[-1]) if texts else (None, None)
    return (think_fraction(texts) + tool + (1.0 if q and a else 0.0)) / 3.0


def build_qcp(document: str, turns: Sequence[dict], question: str, answer: str) -> str:
    """The question construction path: the source passage, then every examiner turn (reasoning,
    searches) and tool response in order, then the final question and answer."""
    parts = [f"Source passage:\n{document.strip()}"]
    for turn in turns:
        text = (turn.get("text") or "").strip()
        if text:
            parts.append(f"[{'examiner' if turn.get('role') == 'assistant' else 'search results'}]\n{text}")
    parts.append(f"Question: {question}\nAnswer: {answer}")
    return "\n\n".join(parts)


def lambda_for_iteration(lambdas: Sequence[float], iteration: int) -> float:
    """Distillation weight of iteration ``iteration`` (0-based); the last value repeats."""
    return float(lambdas[min(iteration, len(lambdas) - 1)])


@dataclass
class TeacherEMA:
    """theta_T <- (1 - rate) theta_T + rate theta_S over the trainable parameters.

    rate 0.05 (paper, i.e. theta_T <- 0.95 theta_T + 0.05 theta_S). With teacher 1.0 and student
    3.0: 0.95 * 1 + 0.05 * 3 = 1.1; a second step with the student still 3.0: 0.95 * 1.1 + 0.15 = 1.195.
    """

    state: dict[str, torch.Tensor]
    rate: float = 0.05

    @classmethod
    def from_model(cls, model: torch.nn.Module, rate: float = 0.05) -> "TeacherEMA":
        return cls.from_parameters({n: p for n, p in model.named_parameters() if p.requires_grad}, rate)

    @classmethod
    def from_parameters(cls, named: dict[str, torch.Tensor], rate: float = 0.05) -> "TeacherEMA":
        """A teacher over these parameters (by name): with separate policies, the student's adapter."""
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"teacher EMA rate must lie in [0, 1], got {rate}")
        state = {n: p.detach().clone() for n, p in named.items()}
        if not state:
            raise ValueError("the model has no trainable parameters to copy into a teacher")
        return cls(state, rate)

    # LoRA: module name -> (adapter name), the adapted layers whose merged weights the state holds
    lora: dict[str, str] | None = None

    @classmethod
    def from_lora(cls, model: torch.nn.Module, adapter: str, rate: float = 0.05) -> "TeacherEMA":
        """A teacher over the adapted weights W0 + s B A of every layer ``adapter`` adapts; the state
        is keyed by each layer's base weight name (``<layer>.base_layer.weight``)."""
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"teacher EMA rate must lie in [0, 1], got {rate}")
        layers = {name: adapter for name, m in model.named_modules()
                  if hasattr(m, "get_delta_weight") and adapter in getattr(m, "lora_A", {})}
        if not layers:
            raise ValueError(f"the model has no layer adapted by {adapter!r} to copy into a teacher")
        teacher = cls({}, rate, layers)
        modules = dict(model.named_modules())
        with torch.no_grad():
            for name in layers:
                teacher.state[f"{name}.base_layer.weight"] = _adapted_weight(modules[name], adapter).clone()
        return teacher

    @torch.no_grad()
    def update(self, model: torch.nn.Module) -> None:
        if self.lora is not None:
            modules = dict(model.named_modules())
            for name, adapter in self.lora.items():
                t = self.state[f"{name}.base_layer.weight"]
                t.mul_(1.0 - self.rate).add_(_adapted_weight(modules[name], adapter).to(t.dtype), alpha=self.rate)
            return
        params = dict(model.named_parameters())
        for name, t in self.state.items():
            t.mul_(1.0 - self.rate).add_(params[name].detach().to(t.dtype), alpha=self.rate)

    def _substitutes(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        """Tensors that stand in for the model's own in the teacher's forward: with LoRA, the merged
        weights in place of the base weights and zeros in place of the adapter's B (so the adapter adds
        nothing on top of them)."""
        if self.lora is None:
            return self.state
        modules = dict(model.named_modules())
        zeros = {f"{name}.lora_B.{adapter}.weight": torch.zeros_like(modules[name].lora_B[adapter].weight)
                 for name, adapter in self.lora.items()}
        return {**self.state, **zeros}

    @torch.no_grad()
    def logits(self, model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
               **kwargs) -> torch.Tensor:
        """Teacher logits [B, L, V] (or at ``logits_to_keep`` positions): the model's forward with the
        teacher's tensors in place of its own, for this call only."""
        out = torch.func.functional_call(model, self._substitutes(model), args=(), strict=False,
                                         kwargs={"input_ids": input_ids, "attention_mask": attention_mask, **kwargs})
        return out.logits

    def state_dict(self) -> dict:
        return {"rate": self.rate, "lora": self.lora, "state": {n: t.cpu() for n, t in self.state.items()}}

    def load_state_dict(self, sd: dict) -> None:
        self.rate = float(sd["rate"])
        if self.lora is not None and sd.get("lora") is None:
            raise ValueError("this teacher checkpoint holds EMAs of the LoRA factors (the old teacher); the teacher is "
                             "now an EMA of the adapted weights W0 + s B A: resume from a newer checkpoint, or start "
                             "the teacher afresh by deleting 'teacher' from the recipe state")
        for name, t in sd["state"].items():
            if name not in self.state:
                raise ValueError(f"teacher checkpoint has {name!r}, which this model does not train")
            self.state[name].copy_(t)


def _adapted_weight(layer, adapter: str) -> torch.Tensor:
    """W0 + s B A of one peft LoRA layer (its delta as peft merges it, fan-in/fan-out handled)."""
    base = layer.get_base_layer().weight
    return base.detach() + layer.get_delta_weight(adapter).to(base.dtype)


def make_teacher(policy, role: str, rate: float) -> TeacherEMA:
    """pi-Play's teacher for ``role``'s weights: an EMA of the adapted weights with LoRA (the role's
    adapter with separate policies, peft's default adapter with a shared one), else of every trainable
    parameter (full fine-tune)."""
    if getattr(policy, "is_lora", False):
        adapter = role if policy.roles else policy.model.active_adapter
        return TeacherEMA.from_lora(policy.model, adapter, rate)
    return TeacherEMA.from_parameters(policy.role_parameters(role), rate)


def make_distill_loss(policy, teacher: TeacherEMA, k: int, kind: str, lam: float):
    """The update's ``extra_loss``: lambda x top-K + tail divergence to the QCP-reading teacher.

    For every sample of a micro-batch the teacher runs once over teacher_prompt + completion and
    returns logits only at the positions that predict the Student's trained tokens, in the
    same row-major order as the Student's logits [N, V].
    """

    def extra(mb, logits: torch.Tensor):
        rows = []
        for s, row_mask in zip(mb.samples, mb.mask):
            trained = torch.nonzero(row_mask[: len(s.completion_ids)]).flatten()  # [n_i]
            ids = torch.tensor([s.teacher_prompt_ids + s.completion_ids], device=logits.device)  # [1, T]
            keep = len(s.teacher_prompt_ids) - 1 + trained  # [n_i] positions predicting them
            with policy.autocast():
                t_logits = teacher.logits(policy.model, ids, torch.ones_like(ids), logits_to_keep=keep)  # [1, n_i, V]
            rows.append(t_logits[0].float())
        t_all = torch.cat(rows)  # [N, V]
        div = topk_tail_divergence(logits[None].float(), t_all[None], k=k, kind=kind)[0]  # [N]
        return lam * div, {"distill": float(div.detach().mean()) if div.numel() else 0.0}

    return extra
