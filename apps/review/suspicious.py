"""Detectors that send a sample to review whatever the sampling share says.

Each returns ``{(kind, key): [reason, ...]}`` for the records of one flush:

- ``near_duplicates``: a valid task whose question's character 5-grams have a Jaccard similarity of
  at least ``duplicate_similarity`` with one of the run's recent tasks or an earlier task of the
  same flush (the run page's ledger counts near duplicates the same way). Self-play Challengers that
  collapse onto one question show up here first. A task the recipe already refused (its question is
  on record, e.g. SPICE's "question is not about the document") is compared against, never queued:
  nobody trains on it.
- ``extreme_difficulty``: a valid task with pass rate 0 (nobody solved it: wrong gold answer?)
  or 1 (trivial).
- ``judge_disagreement``: a grade whose judge samples disagree (``data`` holds several votes
  under ``samples`` / ``votes`` / ``judge_samples``), or a grade of an (attempt, rubric) pair
  that another grade of the run scored on the other side of 0.5.
- ``watchdog``: a record whose ``data`` carries ``watchdog`` (text or list of texts), i.e. a
  check in the recipe or the platform marked it.
"""
from __future__ import annotations

from apps.episodes.models import Grade, Task
from apps.episodes.near_duplicates import most_similar_earlier

PASS = 0.5
VOTE_FIELDS = ("samples", "votes", "judge_samples")


def near_duplicates(run_id: int, tasks: list[dict], threshold: float, recent: int) -> dict:
    """Tasks of this flush that nearly repeat one of the run's ``recent`` tasks or an earlier one of
    the flush (apps/episodes/near_duplicates.py: the detector the run page's ledger uses)."""
    fresh = [(str(t["key"]), t["question"]) for t in tasks if t.get("question") and t.get("valid", True)]
    refused = [(str(t["key"]), t["question"]) for t in tasks if t.get("question") and not t.get("valid", True)]
    if not fresh:
        return {}
    keys = {k for k, _ in fresh + refused}
    older = list(Task.objects.filter(run_id=run_id).exclude(key__in=keys).exclude(question="")
                 .order_by("-step", "-id").values_list("key", "question")[:recent])[::-1]
    older += refused  # this flush's refused tasks: compared against, not queued
    items = older + fresh
    found = most_similar_earlier([text for _, text in items], threshold, start=len(older))
    return {("task", items[i][0]): [f"near-duplicate of task {items[j][0]} (similarity {similarity:.2f})"]
            for i, (j, similarity) in found.items()}


def extreme_difficulty(tasks: list[dict]) -> dict:
    out = {}
    for t in tasks:
        rate = _number(t.get("pass_rate"))
        if not t.get("valid", True) or rate is None:
            continue
        if rate <= 0.0:
            out[("task", str(t["key"]))] = ["pass rate 0: no solver attempt was right (check the gold answer)"]
        elif rate >= 1.0:
            out[("task", str(t["key"]))] = ["pass rate 1: every solver attempt was right (too easy?)"]
    return out


def judge_disagreement(run_id: int, grades: list[dict]) -> dict:
    out: dict = {}
    for g in grades:
        votes = _votes(g.get("data") or {})
        if votes and len({v >= PASS for v in votes}) > 1:
            passed = sum(v >= PASS for v in votes)
            out.setdefault(("grade", str(g["key"])), []).append(
                f"judge samples disagree: {passed} of {len(votes)} pass")
    pairs = {(g.get("attempt_key") or "", g.get("rubric_key") or "") for g in grades if g.get("attempt_key")}
    if not pairs:
        return out
    attempts = {a for a, _ in pairs}
    scores: dict[tuple[str, str], dict[str, float]] = {}
    for key, akey, rkey, score in (Grade.objects.filter(run_id=run_id, attempt_key__in=attempts)
                                   .exclude(score=None).values_list("key", "attempt_key", "rubric_key", "score")):
        scores.setdefault((akey, rkey), {})[key] = score
    for g in grades:
        pair = (g.get("attempt_key") or "", g.get("rubric_key") or "")
        mine = _number(g.get("score"))
        others = {k: s for k, s in scores.get(pair, {}).items() if k != str(g["key"])}
        against = [k for k, s in others.items() if mine is not None and (s >= PASS) != (mine >= PASS)]
        if against:
            out.setdefault(("grade", str(g["key"])), []).append(
                f"another judge sample ({against[0]}) of the same attempt and rubric disagrees")
    return out


def watchdog(by_kind: dict[str, list[dict]]) -> dict:
    out = {}
    for kind, records in by_kind.items():
        for r in records:
            flag = (r.get("data") or {}).get("watchdog") if isinstance(r.get("data"), dict) else None
            if flag:
                texts = flag if isinstance(flag, list) else [flag]
                out[(kind, str(r["key"]))] = [f"watchdog: {str(t)[:300]}" for t in texts]
    return out


def find(run_id: int, by_kind: dict[str, list[dict]], policy) -> dict[tuple[str, str], list[str]]:
    """Every detector the policy enables, merged: {(kind, key): [reasons]}."""
    found: list[dict] = []
    if "near_duplicate" in policy.detectors:
        found.append(near_duplicates(run_id, [t for t in by_kind["task"] if t.get("valid", True)],
                                     policy.duplicate_similarity, policy.recent_tasks))
    if "extreme_difficulty" in policy.detectors:
        found.append(extreme_difficulty(by_kind["task"]))
    if "judge_disagreement" in policy.detectors:
        found.append(judge_disagreement(run_id, by_kind["grade"]))
    if "watchdog" in policy.detectors:
        found.append(watchdog(by_kind))
    merged: dict[tuple[str, str], list[str]] = {}
    for part in found:
        for item, reasons in part.items():
            merged.setdefault(item, []).extend(reasons)
    return merged


def _votes(data: dict) -> list[float]:
    for name in VOTE_FIELDS:
        values = data.get(name)
        if isinstance(values, list) and len(values) > 1:
            numbers = [_number(v) for v in values]
            return [n for n in numbers if n is not None]
    return []


def _number(value) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None
