"""Draw in rounds until each item has enough: the mechanics of a retry loop.

SPICE's Challenger retries a document until it writes a valid task (paper: up to 1,024
attempts). ``draw_until`` runs such a loop for any recipe: each round draws ``per_round``
attempts for every item still short, until the item is done, its attempts reach ``cap``, or
the call's token budget is spent. The budget is checked at the worst case before a round
starts (``worst_tokens`` per attempt), so the loop never generates more than ``token_budget``
tokens; the first round always runs. When the budget cannot pay a round for every item still
short, the first items in order get it.

Several ranks: every rank runs the same number of rounds (an idle rank draws nothing), since
a rollout under ZeRO-3 is collective.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from trainer import distributed as dist


@dataclass(frozen=True)
class RetryLimits:
    per_round: int  # attempts drawn per item in one round
    cap: int  # most attempts per item (whole rounds: cap // per_round of them)
    token_budget: int  # most tokens the whole loop may generate
    worst_tokens: int  # most tokens one attempt can generate


@dataclass
class RetryReport:
    attempts: list[int]  # per item
    tokens: int = 0  # generated, all rounds
    rounds: int = 0
    short: list[int] = field(default_factory=list)  # items not done when the loop ended
    stopped_by: str = "done"  # "done" | "cap" | "budget"

    def metrics(self, valid: int) -> dict[str, float]:
        """Attempts per item and per valid result (``valid`` of them), rounds, items short."""
        total = sum(self.attempts)
        out = {"attempts": float(total), "attempts_per_document": total / max(len(self.attempts), 1),
               "retry_rounds": float(self.rounds), "retry_tokens": float(self.tokens),
               "documents_short": float(len(self.short)), "budget_stop": float(self.stopped_by == "budget")}
        if valid:
            out["attempts_per_valid_task"] = total / valid
        return out


def any_rank(flag: bool) -> bool:
    """True when ``flag`` holds on any rank (the flag itself when alone). Collective."""
    return dist.all_reduce([float(flag)], "max")[0] > 0 if dist.active() else flag


def draw_until(n_items: int, draw: Callable[[list[int], int], int], done: Callable[[int], bool],
               limits: RetryLimits) -> RetryReport:
    """Rounds of ``draw(items, round) -> tokens generated`` (``per_round`` attempts for each of
    ``items``) until ``done(item)`` holds for every item, or the cap or the budget stops it.

    4 items, per_round 8, cap 1024, worst 100 tokens, budget 3200: round 0 draws 8 for all 4
    (worst 3200, always runs); if it generated 1500 tokens and items 1 and 3 are still short, a
    second round costs at most 2 x 800 = 1600 <= 1700 left, so both get one."""
    if limits.per_round < 1 or limits.cap < limits.per_round:
        raise ValueError(f"a retry loop needs 1 <= per_round <= cap, got per_round {limits.per_round}, "
                         f"cap {limits.cap}")
    report = RetryReport(attempts=[0] * n_items)
    short = [i for i in range(n_items) if not done(i)]
    round_cost = limits.per_round * limits.worst_tokens
    while True:
        take = [i for i in short if report.attempts[i] + limits.per_round <= limits.cap]
        if report.rounds and take:  # the first round always runs
            fits = (limits.token_budget - report.tokens) // max(round_cost, 1)
            if fits < len(take):
                report.stopped_by = "budget"
            take = take[:max(fits, 0)]
        elif short and not take:
            report.stopped_by = "cap"
        if not any_rank(bool(take)):
            break
        report.tokens += draw(take, report.rounds)
        report.rounds += 1
        for i in take:
            report.attempts[i] += limits.per_round
        short = [i for i in short if not done(i)]
    report.short = short
    if not short:
        report.stopped_by = "done"
    return report
