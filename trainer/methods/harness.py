"""SCORE's meta-harness: the evaluator's environment, and three drivers that rewrite it.

A harness is the paper's JSON (score.txt, Listing 3)::

    {"dimension_constraints": {"k": 4, "must_include": ["factuality"], "weight_min": 0.1, "weight_max": 0.5},
     "process_constraints": {"require_gap_analysis": false, "require_verification": true,
                             "citation_cross_check": false, "min_number_of_tool_call": 1},
     "notes": "..."}

``normalize_harness(data, pool)`` checks one (from a person, an endpoint or a file) and returns
it complete, or raises ``HarnessError`` listing every problem. Every M steps the recipe asks its
driver for the next harness from recent training statistics (``HarnessStats``):

- ``RuleDriver`` (default, ours): a few readable rules, each a small function below.
- ``EndpointDriver``: any OpenAI-compatible chat endpoint, with the paper's meta-harness prompt
  (the paper uses GPT-5.2). A reply that is not a valid harness keeps the current one.
- ``HumanDriver``: keeps the harness until a person edits it on the run page; the edit arrives
  through ``sink.control().harness``.

A person's edit overrides every driver at the next refresh (the recipe hands it to ``next``).
Drivers never raise on bad input: they return the current harness and say why in ``reason``.
"""
from __future__ import annotations

import copy
import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

PROCESS_FLAGS = ("require_gap_analysis", "require_verification", "citation_cross_check")


class HarnessError(ValueError):
    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("invalid harness: " + "; ".join(problems))


def default_harness(section) -> dict:
    """The starting harness M_default from a ``ScoreSection``."""
    return {
        "dimension_constraints": {
            "k": section.dimensions, "must_include": list(section.must_include),
            "weight_min": section.weight_min, "weight_max": section.weight_max,
        },
        "process_constraints": {
            "require_gap_analysis": False, "require_verification": section.min_verification_searches > 0,
            "citation_cross_check": False, "min_number_of_tool_call": section.min_verification_searches,
        },
        "notes": "Verify key claims with the search tool by writing <search>query</search> before scoring.",
    }


def starting_harness(section, pool: list[str]) -> dict:
    """A SCORE run's harness at step 0: ``default_harness`` checked against the run's dimension pool, its evaluator's
    searches capped by the section's (``ScoreSection.evaluator_searches``)."""
    return normalize_harness(default_harness(section), pool, section.evaluator_searches())


def normalize_harness(data: Any, pool: list[str], max_tool_calls: int | None = None) -> dict:
    """A complete, checked harness from ``data`` (dict or JSON text); HarnessError lists problems."""
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as exc:
            raise HarnessError([f"not valid JSON ({exc.msg} at line {exc.lineno})"]) from None
    if not isinstance(data, dict):
        raise HarnessError([f"a harness is a JSON object, got {type(data).__name__}"])
    problems: list[str] = []
    dims = data.get("dimension_constraints") or {}
    proc = data.get("process_constraints") or {}
    if not isinstance(dims, dict) or not isinstance(proc, dict):
        raise HarnessError(["dimension_constraints and process_constraints must be objects"])
    must = dims.get("must_include", [])
    if isinstance(must, str):
        must = [must]
    if not isinstance(must, list) or not all(isinstance(m, str) for m in must):
        problems.append("dimension_constraints.must_include must be a list of dimension names")
        must = []
    unknown = [m for m in must if m not in pool]
    if unknown:
        problems.append(f"must_include names {unknown} not in the dimension pool {pool}")
    k = dims.get("k")
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= len(pool):
        problems.append(f"dimension_constraints.k must be an integer from 1 to {len(pool)} (pool size), got {k!r}")
    elif k < len(must):
        problems.append(f"k={k} is smaller than the {len(must)} mandatory dimensions")
    wmin, wmax = dims.get("weight_min"), dims.get("weight_max")
    if not all(isinstance(w, (int, float)) and not isinstance(w, bool) and w >= 0 for w in (wmin, wmax)):
        problems.append(f"weight_min and weight_max must be numbers >= 0, got {wmin!r} and {wmax!r}")
    elif wmin > wmax:
        problems.append(f"weight_min {wmin} is larger than weight_max {wmax}")
    for flag in PROCESS_FLAGS:
        if not isinstance(proc.get(flag, False), bool):
            problems.append(f"process_constraints.{flag} must be true or false")
    tools = proc.get("min_number_of_tool_call", 0)
    if not isinstance(tools, int) or isinstance(tools, bool) or tools < 0:
        problems.append(f"process_constraints.min_number_of_tool_call must be an integer >= 0, got {tools!r}")
    elif max_tool_calls is not None and tools > max_tool_calls:
        problems.append(f"min_number_of_tool_call {tools} exceeds the evaluator's tool budget of {max_tool_calls} "
                        "searches (score.evaluator_max_turns - 1: its last turn writes the scores); the depth rule "
                        "would zero every score")
    notes = data.get("notes", "")
    if not isinstance(notes, str):
        problems.append("notes must be text")
    if problems:
        raise HarnessError(problems)
    return {
        "dimension_constraints": {"k": k, "must_include": must, "weight_min": float(wmin), "weight_max": float(wmax)},
        "process_constraints": {**{f: bool(proc.get(f, False)) for f in PROCESS_FLAGS},
                                "min_number_of_tool_call": tools},
        "notes": notes,
    }


@dataclass
class HarnessStats:
    """What the drivers see of the last M steps (means over those steps)."""

    steps: list[int] = field(default_factory=list)
    solver_reward: float = 0.0  # mean R_s
    consistency: float = 0.0  # mean C over queries
    valid_report_rate: float = 0.0  # fraction of reports with a(r) = 1
    evaluator_searches: float = 0.0  # mean evaluator searches per evaluation
    depth_zeroed_rate: float = 0.0  # fraction of all reports whose score the depth rule zeroed
    depth_zeroed_of_valid: float = 0.0  # the same among valid reports (the only ones a score could count for)
    eval_format_failures: float = 0.0  # fraction of evaluations whose output broke format
    evaluator_truncated_rate: float = 0.0  # fraction of evaluations cut at their token budget (no scores)
    dimension_means: dict[str, float] = field(default_factory=dict)  # mean normalised score per dimension
    dimension_counts: dict[str, int] = field(default_factory=dict)  # times each dimension was chosen

    def to_dict(self) -> dict:
        return asdict(self)


def summarize(window: list[dict]) -> HarnessStats:
    """Average the per-step records the recipe keeps (keys as in HarnessStats) into stats. The share of
    valid reports zeroed is pooled over the window's reports (its steps write the same number of
    reports), not a mean of per-step shares: a step without a valid report would count as one where
    none was zeroed, and with few valid reports (the 1.5B's control: 0-7% of them) such steps would
    keep the depth rule's ratchet from firing."""
    if not window:
        return HarnessStats()
    keys = ("solver_reward", "consistency", "valid_report_rate", "evaluator_searches",
            "depth_zeroed_rate", "eval_format_failures", "evaluator_truncated_rate")
    means = {k: sum(r.get(k, 0.0) for r in window) / len(window) for k in keys}
    valid = means["valid_report_rate"]
    means["depth_zeroed_of_valid"] = min(1.0, means["depth_zeroed_rate"] / valid) if valid > 0 else 0.0
    totals: dict[str, list[float]] = {}
    counts: dict[str, int] = {}
    for record in window:
        for dim, value in record.get("dimension_means", {}).items():
            totals.setdefault(dim, []).append(value)
            counts[dim] = counts.get(dim, 0) + 1
    return HarnessStats(steps=[r.get("step", 0) for r in window], dimension_means={
        d: sum(v) / len(v) for d, v in totals.items()}, dimension_counts=counts, **means)


@dataclass
class HarnessUpdate:
    harness: dict
    changed: bool
    reason: str
    driver: str


# --- the rule-based driver ------------------------------------------------------------------

TRUNCATION_HIGH = 0.3  # above: every search eats budget the scores need, lower the minimum
TRUNCATION_LOW = 0.1  # at or above: never raise the minimum


def rule_depth(h: dict, s: HarnessStats, max_tools: int) -> str | None:
    """Most valid reports' scores zeroed by the depth rule, or many evaluations cut at their token
    budget (a cut evaluation has no scores, so every report of its group gets the same reward) -> ask
    for one search less; evaluator searching comfortably above the minimum with few cuts -> ask for
    one more (verification deepens as it can). The zeroed share is taken among valid reports: with
    most reports invalid (truncated), a share of all reports stays low while every score that could
    count is zeroed (Qwen2.5-Coder-1.5B, 13% valid reports, all zeroed, for 14 steps: RESULTS.md)."""
    proc = h["process_constraints"]
    need = proc["min_number_of_tool_call"]
    zeroed = s.depth_zeroed_of_valid
    if need > 0 and (zeroed > 0.5 or s.evaluator_truncated_rate > TRUNCATION_HIGH):
        proc["min_number_of_tool_call"] = need - 1
        proc["require_verification"] = need - 1 > 0
        why = (f"{zeroed:.0%} of valid reports' scores fell to the depth rule" if zeroed > 0.5
               else f"{s.evaluator_truncated_rate:.0%} of evaluations were cut at their token budget")
        return f"{why}: minimum searches {need} -> {need - 1}"
    if (zeroed < 0.1 and s.evaluator_truncated_rate < TRUNCATION_LOW
            and s.evaluator_searches >= need + 1 and need < max_tools):
        proc["min_number_of_tool_call"] = need + 1
        proc["require_verification"] = True
        return f"evaluator searches {s.evaluator_searches:.1f} per report: minimum searches {need} -> {need + 1}"
    return None


def rule_focus_weakest(h: dict, s: HarnessStats, pool: list[str]) -> str | None:
    """Solver saturating (mean normalised reward part high) -> make the weakest dimension
    mandatory, so the evaluator keeps probing where reports are worst."""
    dims = h["dimension_constraints"]
    scored = {d: v for d, v in s.dimension_means.items() if d in pool}
    if not scored or s.valid_report_rate < 0.5:
        return None
    weakest = min(scored, key=lambda d: (scored[d], d))
    if weakest in dims["must_include"] or max(scored.values()) < 0.7:
        return None
    dims["must_include"] = (dims["must_include"] + [weakest])[-max(1, dims["k"] - 1):]
    return f"dimension scores saturating (max {max(scored.values()):.2f}); weakest {weakest!r} made mandatory"


def rule_consistency(h: dict, s: HarnessStats, pool: list[str]) -> str | None:
    """Very high consistency with low rewards is the paper's hacking sign (superficial rubrics
    that make any report look alike): require gap analysis and widen the rubric by one."""
    dims = h["dimension_constraints"]
    proc = h["process_constraints"]
    if s.consistency > 0.9 and s.solver_reward < 1.5:
        changes = []
        if not proc["require_gap_analysis"]:
            proc["require_gap_analysis"] = True
            changes.append("gap analysis required")
        if dims["k"] < len(pool):
            dims["k"] += 1
            changes.append(f"k -> {dims['k']}")
        if changes:
            return f"consistency {s.consistency:.2f} with low reward {s.solver_reward:.2f}: " + ", ".join(changes)
    return None


def rule_format(h: dict, s: HarnessStats) -> str | None:
    """Evaluator output breaking format often -> say so in the notes (the only lever on it)."""
    if s.eval_format_failures > 0.3:
        note = ("Your last evaluations often broke the output format: give every selected dimension one "
                "<score dim=... value=.../> line inside <scores>.")
        if note not in h["notes"]:
            h["notes"] = (h["notes"] + " " + note).strip()
            return f"{s.eval_format_failures:.0%} of evaluations broke format: notes reminded"
    return None


class RuleDriver:
    name = "rules"

    def __init__(self, pool: list[str], max_tool_calls: int):
        self.pool = pool
        self.max_tool_calls = max_tool_calls

    def next(self, current: dict, stats: HarnessStats) -> HarnessUpdate:
        h = copy.deepcopy(current)
        reasons = [r for r in (rule_depth(h, stats, self.max_tool_calls), rule_focus_weakest(h, stats, self.pool),
                               rule_consistency(h, stats, self.pool), rule_format(h, stats)) if r]
        return HarnessUpdate(h, h != current, "; ".join(reasons) or "no rule fired", self.name)


class HumanDriver:
    """Changes nothing by itself; a person's edit (handed in by the recipe) is the update."""

    name = "human"

    def next(self, current: dict, stats: HarnessStats) -> HarnessUpdate:
        return HarnessUpdate(copy.deepcopy(current), False, "waiting for a person to edit the harness", self.name)


META_SYSTEM = ("You are an outside researcher. Adjust the evaluator harness from recent training statistics. Do not "
               "pick the evaluator's final dimensions or weights yourself. To make the evaluator search, set "
               "require_verification=true in process_constraints and say in notes that the evaluator must use the "
               "search tool by writing <search>query</search> tags.")

META_USER = """Task: write the next evaluator harness H_t.
Goal: update the evaluator's constraints without choosing concrete dimensions or weights for it. You may change \
dimension_constraints and process_constraints. Dimensions must come from this pool: {pool}

## Current harness:
{current}

## Statistics:
{stats}

## Output format (JSON only):
{{
  "dimension_constraints": {{"k": number of dimensions, "must_include": [required dimension names],
                            "weight_min": smallest weight of a dimension, "weight_max": largest weight}},
  "process_constraints": {{"require_gap_analysis": true/false, "require_verification": true/false,
                          "citation_cross_check": true/false, "min_number_of_tool_call": n}},
  "notes": "extra process instructions"
}}"""


def meta_messages(current: dict, stats: HarnessStats, pool: list[str]) -> list[dict]:
    user = META_USER.format(pool=", ".join(pool), current=json.dumps(current, indent=1),
                            stats=json.dumps(stats.to_dict(), indent=1))
    return [{"role": "system", "content": META_SYSTEM}, {"role": "user", "content": user}]


def extract_json_object(text: str) -> str | None:
    """The outermost ``{...}`` of a reply (models wrap JSON in prose or code fences)."""
    text = re.sub(r"```(?:json)?", "", text or "")
    start, end = text.find("{"), text.rfind("}")
    return text[start:end + 1] if 0 <= start < end else None


class EndpointDriver:
    """Asks an OpenAI-compatible endpoint; ``chat(messages) -> str`` is judge.py's HTTP client."""

    name = "endpoint"

    def __init__(self, chat, pool: list[str], max_tool_calls: int):
        self.chat = chat
        self.pool = pool
        self.max_tool_calls = max_tool_calls

    def next(self, current: dict, stats: HarnessStats) -> HarnessUpdate:
        try:
            reply = self.chat(meta_messages(current, stats, self.pool))
        except Exception as exc:  # network trouble must not end the run
            return HarnessUpdate(copy.deepcopy(current), False, f"endpoint failed ({exc}); harness kept", self.name)
        body = extract_json_object(reply)
        try:
            h = normalize_harness(body if body is not None else reply, self.pool, self.max_tool_calls)
        except HarnessError as exc:
            return HarnessUpdate(copy.deepcopy(current), False, f"endpoint reply rejected: {exc}; harness kept",
                                 self.name)
        return HarnessUpdate(h, h != current, "endpoint proposal", self.name)


def apply_human_edit(current: dict, edit: Any, pool: list[str], max_tool_calls: int) -> HarnessUpdate:
    """A person's harness from the run page; a bad one keeps the current harness and says why."""
    try:
        h = normalize_harness(edit, pool, max_tool_calls)
    except HarnessError as exc:
        return HarnessUpdate(copy.deepcopy(current), False, f"edited harness rejected: {exc}", "human")
    return HarnessUpdate(h, h != current, "edited by a person on the run page", "human")
