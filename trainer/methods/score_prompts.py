"""SCORE's prompts and parsers, and its pure reward parts.

Wording ours, structure the paper's (score.txt Appendix H: Listing 4 evaluator, Listing 5
solver). The paper's evaluator does rubric choice, verification and scoring of all K reports in
one trajectory; we split it in two prompts (ours, a visible choice in the recipe):

1. ``rubric_prompt``: the evaluator picks k-1 extra dimensions and weights under the harness,
   answering ``<dimensions><dim name=".." weight=".."/></dimensions>``; these tokens get the
   REINFORCE update. ``parse_rubric`` + ``constrain_rubric`` turn any output into a rubric that
   satisfies the harness (and report whether the model's own output already did).
2. ``evaluation_prompt``: verify with search, then score one report per dimension in
   ``<scores><score dim=".." value=".."/></scores>``. ``parse_scores`` reads each score strictly (a
   missing or unreadable score is 0 and counted), inside ``<scores>`` or, without that block, anywhere
   in the reply.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

from trainer.methods.parts import tag_content

SOLVER_SYSTEM = """You are a professional deep researcher. Solve the user's request by searching iteratively and \
synthesising the evidence.
## Rules:
1. Think inside <think> and </think> before every action and after every new search result.
2. When you need outside evidence, write exactly one standalone query as <search>your query</search>.
3. Put only the query text inside <search>: no JSON, tool names, XML attributes, lists or several queries.
4. Prefer natural search queries: start broad, then narrow to verification, entity-specific facts or missing views.
5. Prefer several sequential searches over one overloaded query.
6. Use search to verify important claims and close gaps; stop once you can answer with confidence.
7. Results come back between <information> and </information>.
8. When you have enough evidence, write the final report only inside <answer> and </answer>.
9. In the report, synthesise the evidence, note uncertainty where needed, cite sources, and end with a \
paragraph that starts with "Conclusion:"."""

RUBRIC_SYSTEM = """You are a professional evaluator of deep research reports. Choose the rubric that the reports \
for the queries below will be judged by.
1. {must} {must_verb} always required as the primary dimension(s).
2. Choose exactly {extra} more dimension(s) from this pool: {pool}.
3. Give each chosen dimension a weight attribute, a number within [{wmin}, {wmax}].
4. Write {k} <dim> lines in all: the required one(s) first, then your {extra} chosen one(s). Nothing after \
</dimensions>.
{notes}
Answer ONLY in this format:
<dimensions>
{lines}
</dimensions>"""

EVALUATION_SYSTEM = """You are a professional evaluator of deep research reports. Evaluate the report with a \
search-assisted review.
1. The rubric dimensions are: {dims}.
2. {verify}
3. {gaps}
4. Score the report on every dimension from 0 to {scale} using the evidence you found.
{how}
{notes}
When you score, answer ONLY in this format, one <score> line per dimension:
<verification>what you checked and what the search showed</verification>
<gap_analysis>what the report misses</gap_analysis>
<scores>
{score_lines}
</scores>"""

QUERY_FROM_DOCUMENT = """Read the document below and write one open research question that a person might ask and \
that needs a long, well-sourced report to answer (not a single fact). Write it inside <query> and </query>.

Document (title: {title}):
{text}"""

_DIM = re.compile(r"<dim\s+([^>]*?)/?>", re.DOTALL)
_SCORE = re.compile(r"<score\s+([^>]*?)/?>", re.DOTALL)
_ATTR = re.compile(r'(\w+)\s*=\s*"([^"]*)"')


def rubric_messages(harness: dict, pool: list[str], queries: list[str]) -> list[dict]:
    dims = harness["dimension_constraints"]
    must = dims["must_include"]
    extra = max(dims["k"] - len(must), 0)
    system = RUBRIC_SYSTEM.format(
        must=", ".join(must) or "(none)", must_verb="is" if len(must) == 1 else "are", extra=extra,
        pool=", ".join(d for d in pool if d not in must), wmin=dims["weight_min"], wmax=dims["weight_max"],
        notes=harness.get("notes", ""), k=len(must) + extra,
        lines=rubric_format_lines(must, extra, dims["weight_min"], dims["weight_max"]))
    user = "Queries:\n" + "\n".join(f"- {q}" for q in queries)
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def rubric_format_lines(must: list[str], extra: int, wmin: float, wmax: float) -> str:
    """The answer format's lines: each mandatory dimension as it is to be written, then one placeholder line per
    dimension still to choose, each with its weight attribute. A single placeholder line was read as "list
    dimensions like this": Qwen2.5-Coder-1.5B listed the whole pool, or dropped the weights, in most replies
    (benchmarks/score_rubric_probe.py)."""
    return "\n".join([f'<dim name="{m}"/>' for m in must]
                     + [f'<dim name="[{_ordinal(i)} chosen dimension]" weight="[a number from {wmin:g} to {wmax:g}]"/>'
                        for i in range(1, extra + 1)])


def _ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, ... 11th, 12th, 13th, ... 21st."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


HOW_TO_SEARCH = """## How to reply:
- First pick a key claim of the report and check it: write <search>your query</search> and stop there. Only the \
query text goes inside.
- The results come back between <information> and </information>. Then search for another claim, or score.
- {min_rule}"""


def min_search_rule(n: int) -> str:
    """The harness's least searches as the evaluator reads it: with none required, the shown reply shape (search
    first) still asks for one; "at least 0 time(s)" read as "no need" (benchmarks/score_rubric_probe.py)."""
    if n <= 0:
        return "Score once your searches have checked the claims that matter most."
    return f"You must search at least {n} time(s) before you score: scores given after fewer searches count for nothing."


def evaluation_messages(harness: dict, rubric: list[tuple[str, float]], query: str, report: str,
                        scale: float, can_search: bool = True) -> list[dict]:
    """The evaluator's prompt for one report; ``can_search`` False (one evaluator turn: no search can run) leaves
    out how to search."""
    proc = harness["process_constraints"]
    system = EVALUATION_SYSTEM.format(
        dims=", ".join(f"{d} (weight {w:g})" for d, w in rubric),
        verify=("Verify the key claims and citations of the report with the search tool."
                + (" Cross-check each citation against what you retrieve." if proc["citation_cross_check"] else ""))
        if proc["require_verification"] else "Verify key claims where you doubt them.",
        gaps="Research the original query yourself to find important gaps the report does not cover."
        if proc["require_gap_analysis"] else "Note any important gaps you see.",
        scale=f"{scale:g}", notes=harness.get("notes", ""),
        how=HOW_TO_SEARCH.format(min_rule=min_search_rule(proc["min_number_of_tool_call"])) if can_search else "",
        score_lines="\n".join(f'<score dim="{d}" value="[0-{scale:g}]"/>' for d, _ in rubric))
    user = f"<query>{query}</query>\n<report>{report}</report>"
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def parse_rubric(text: str) -> list[tuple[str, float | None]]:
    """(name, weight or None) for each ``<dim .../>`` inside ``<dimensions>`` (order kept)."""
    body = tag_content(text, "dimensions") or ""
    out = []
    for attrs in _DIM.findall(body):
        a = dict(_ATTR.findall(attrs))
        name = a.get("name", "").strip().lower()
        try:
            weight = float(a["weight"]) if "weight" in a else None
        except ValueError:
            weight = None
        if name:
            out.append((name, weight))
    return out


@dataclass
class Rubric:
    dims: list[tuple[str, float]]  # (dimension, weight); mandatory ones first
    followed: bool  # the model's own output already satisfied the harness
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"dimensions": [{"name": d, "weight": w} for d, w in self.dims], "followed": self.followed,
                "problems": self.problems}


def constrain_rubric(parsed: list[tuple[str, float | None]], harness: dict, pool: list[str],
                     rng: random.Random, must_weight: float | None = None) -> Rubric:
    """A rubric that satisfies the harness, built from the model's choice where it can be.

    Mandatory dimensions come first with weight ``must_weight`` (default weight_max: the paper's
    base dimension carries no weight; ours). Then the model's pool dimensions in its order,
    deduplicated, weights clamped into [weight_min, weight_max] (a missing weight is drawn
    uniformly there); if fewer than k remain, the rest is drawn from the unused pool. Anything
    repaired is listed in ``problems`` and makes ``followed`` False.
    """
    dc = harness["dimension_constraints"]
    k, wmin, wmax = dc["k"], dc["weight_min"], dc["weight_max"]
    must = list(dc["must_include"])
    mw = wmax if must_weight is None else must_weight
    dims: list[tuple[str, float]] = [(m, mw) for m in must]
    problems: list[str] = []
    seen = set(must)
    for name, weight in parsed:
        if name in seen:
            continue
        if name not in pool:
            problems.append(f"{name!r} is not in the pool")
            continue
        if len(dims) >= k:
            problems.append(f"more than k={k} dimensions")
            break
        if weight is None:
            problems.append(f"{name!r} has no weight")
            weight = rng.uniform(wmin, wmax)
        elif not wmin <= weight <= wmax:
            problems.append(f"{name!r} weight {weight} outside [{wmin}, {wmax}]")
            weight = min(max(weight, wmin), wmax)
        dims.append((name, weight))
        seen.add(name)
    if len(dims) < k:
        rest = [d for d in pool if d not in seen]
        rng.shuffle(rest)
        problems.append(f"{k - len(dims)} dimension(s) missing, drawn from the pool")
        dims += [(d, rng.uniform(wmin, wmax)) for d in rest[: k - len(dims)]]
    return Rubric(dims, not problems, problems)


def render_rubric(dims: list[tuple[str, float]], must: list[str]) -> str:
    """The rubric as the evaluator's answer format writes it (RUBRIC_SYSTEM): the mandatory
    dimensions without a weight, the others with theirs. A repaired rubric is re-tokenised from this
    text so the evaluator's update reinforces the rubric that was executed."""
    lines = [f'<dim name="{d}"/>' if d in must else f'<dim name="{d}" weight="{w:.2f}"/>' for d, w in dims]
    return "<dimensions>\n" + "\n".join(lines) + "\n</dimensions>"


@dataclass
class Scores:
    values: dict[str, float]  # dimension -> score normalised to [0, 1]
    missing: list[str]  # dimensions without a readable score (scored 0)

    @property
    def well_formed(self) -> bool:
        return not self.missing


def parse_scores(text: str, dims: list[str], scale: float) -> Scores:
    """Strict reading of the ``<score>`` elements: each dimension's value / scale in [0, 1]; a dimension
    with no ``<score>``, a non-number or a value outside [0, scale] scores 0 and is listed missing. They
    are read inside ``<scores>``, or from the whole reply when it never opens a ``<scores>`` block: the
    scoring tokens get no update (only the rubric's do), so a dropped wrapper would never be trained away,
    and Qwen2.5-Coder-1.5B dropped it in 2 of 16 evaluations (benchmarks/score_rubric_probe.py)."""
    body = tag_content(text, "scores") or ""
    if "<scores>" not in text:  # the wrapper dropped (a block opened and then cut stays unread: scores 0)
        body = text
    found: dict[str, float] = {}
    for attrs in _SCORE.findall(body):
        a = dict(_ATTR.findall(attrs))
        name = a.get("dim", "").strip().lower()
        try:
            value = float(a.get("value", ""))
        except ValueError:
            continue
        if name in dims and name not in found and 0 <= value <= scale:
            found[name] = value / scale
    missing = [d for d in dims if d not in found]
    return Scores({d: found.get(d, 0.0) for d in dims}, missing)


def report_is_valid(final: str | None, truncated: bool) -> bool:
    """a(r) (ours): a non-empty ``<answer>`` that ended by itself (not cut by length or turns)."""
    return bool(final and final.strip()) and not truncated


def depth_rule(reward: float, evaluator_searches: int, min_searches: int) -> float:
    """A score whose evaluator searched fewer than the harness minimum is set to 0 (Algorithm 1)."""
    return 0.0 if evaluator_searches < min_searches else reward


def extract_conclusion(report: str) -> str:
    """The report's conclusion for the consistency reward (ours, the paper does not say how):
    the text after the last "Conclusion" heading or label, else the last paragraph."""
    text = (report or "").strip()
    match = None
    for match in re.finditer(r"(?im)^\W*(?:#+\s*)?conclusions?\b\W*", text):
        pass
    if match is not None and text[match.end():].strip():
        return text[match.end():].strip()
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
    return paragraphs[-1] if paragraphs else ""
