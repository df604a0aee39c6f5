"""Rollout: generation backends behind one ``Generator`` interface (transformers now, vLLM
later), the multi-turn search loop, and the loss masks it produces."""
from trainer.rollout.hf import HFGenerator
from trainer.rollout.multi_turn import last_tag, multi_turn_rollout, single_turn, tag_contents
from trainer.rollout.types import Completion, Generator, SamplingParams, Trajectory

__all__ = [
    "Completion", "Generator", "HFGenerator", "SamplingParams", "Trajectory",
    "last_tag", "multi_turn_rollout", "single_turn", "tag_contents",
]
