"""One attempt turn by turn: its turns, the passages it retrieved, and its tokens by loss mask.

An ``Attempt`` stores ``token_ids`` and ``loss_mask`` side by side (1 = trained, 0 = masked:
the prompt, a user turn, tool output). To show them as text the run's tokenizer decodes each
token; it is loaded once per model (``tokenizer_for``) from the model folder the web allows
and never downloaded. Without a tokenizer the tokens are
shown as ids, still coloured by mask.
"""
from __future__ import annotations

import functools
import logging
from pathlib import Path

from django.conf import settings

log = logging.getLogger("selfplay.runs")

MAX_TOKENS = 4096  # tokens drawn on the page; the counts always cover all of them


@functools.lru_cache(maxsize=4)
def _load_tokenizer(folder: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder)


def tokenizer_for(model_name: str):
    """(tokenizer or None, a note saying where it came from or why there is none).

    Only a model folder inside the models directory with a saved tokenizer is used (a bundled
    model is imported there by its first run); parsing a bundled GGUF takes ~30 s, too slow
    for a page.
    """
    name = (model_name or "").strip()
    models_dir = Path(settings.MODELS_DIR)
    folder = None
    if name and "/" not in name and (models_dir / name / "tokenizer_config.json").is_file():
        folder = models_dir / name
    elif name.startswith("/") and (Path(name) / "tokenizer_config.json").is_file():
        real = Path(name).resolve()
        if real == models_dir.resolve() or models_dir.resolve() in real.parents:
            folder = real
    if folder is None:
        return None, (f"no tokenizer for model {name!r} in {models_dir} (a bundled model gets one with its "
                      "first run): tokens are shown as ids")
    try:
        return _load_tokenizer(str(folder)), f"decoded with the tokenizer of {name}"
    except Exception as exc:  # a broken model folder must not break the page
        log.warning("tokenizer of %s could not be loaded: %s", name, exc)
        return None, f"the tokenizer of {name!r} could not be loaded ({type(exc).__name__}): tokens are shown as ids"


def mask_segments(token_ids: list[int], loss_mask: list[int], decode=None, limit: int = MAX_TOKENS) -> list[dict]:
    """Consecutive tokens with the same mask as segments: {"trained", "tokens": [{"id", "text"}]}.

    A mask shorter than the tokens leaves the rest unknown (``trained`` None).

    >>> [(s["trained"], [t["id"] for t in s["tokens"]]) for s in mask_segments([5, 6, 7, 8], [0, 1, 1])]
    [(False, [5]), (True, [6, 7]), (None, [8])]

    A character whose UTF-8 bytes are split over tokens decodes to U+FFFD token by token; it is shown whole on the
    token that completes it (``joins``: the ids before it), the tokens before it empty (``part_of``):

    >>> utf8 = {1: b"a", 2: b"\\xc3", 3: b"\\xa9", 4: b"b"}  # "\\xc3\\xa9" is "\u00e9"
    >>> decode = lambda ids: b"".join(utf8[i] for i in ids).decode("utf-8", errors="replace")
    >>> [(t["text"], t.get("joins")) for t in mask_segments([1, 2, 3, 4], [1, 1, 1, 1], decode)[0]["tokens"]]
    [('a', None), ('', None), ('\u00e9', [2]), ('b', None)]
    """
    segments: list[dict] = []
    pending: list[dict] = []  # tokens holding the first bytes of a character a later token completes
    for i, token in enumerate(token_ids[:limit]):
        trained = bool(loss_mask[i]) if i < len(loss_mask) else None
        text = decode([token]) if decode else f"\u2039{token}\u203a"
        entry = {"id": token, "text": text}
        if decode and "\ufffd" in text:  # part of a UTF-8 character split over tokens (byte-level BPE)
            joined = decode([t["id"] for t in pending] + [token])
            if joined.endswith("\ufffd") and len(pending) < 3:  # still incomplete (a character has at most 4 bytes)
                pending.append(entry)
            else:
                if "\ufffd" not in joined:  # the character is whole: shown on the token that completes it
                    for part in pending:
                        part.update(text="", part_of=token)
                    entry.update(text=joined, joins=[t["id"] for t in pending])
                pending = []
        else:
            pending = []
        if not segments or segments[-1]["trained"] is not trained:
            segments.append({"trained": trained, "tokens": []})
        segments[-1]["tokens"].append(entry)
    return segments


def token_view(attempt, model_name: str) -> dict:
    """What the trajectory page shows of an attempt's tokens."""
    ids, mask = list(attempt.token_ids or []), list(attempt.loss_mask or [])
    tokenizer, note = tokenizer_for(model_name) if ids else (None, "")
    decode = (lambda t: tokenizer.decode(t, skip_special_tokens=False)) if tokenizer is not None else None
    trained = sum(1 for m in mask[:len(ids)] if m)
    problems = []
    if len(mask) != len(ids):
        problems.append(f"the loss mask has {len(mask)} entries for {len(ids)} tokens")
    return {"segments": mask_segments(ids, mask, decode), "total": len(ids), "trained": trained,
            "masked": min(len(ids), len(mask)) - trained, "shown": min(len(ids), MAX_TOKENS),
            "note": note, "problems": problems}


def prompt_text(attempt, model_name: str) -> str:
    """The prompt the model saw, decoded from the masked tokens before the first trained one
    (recipes that store the prompt's ids with the completion, as GRPO does); "" when the attempt
    stored none or no tokenizer is at hand (the page then shows the task's question)."""
    ids, mask = list(attempt.token_ids or []), list(attempt.loss_mask or [])
    prefix = []
    for token, trained in zip(ids, mask):
        if trained:
            break
        prefix.append(token)
    if not prefix or len(prefix) == len(ids):
        return ""
    tokenizer, _ = tokenizer_for(model_name)
    return tokenizer.decode(prefix, skip_special_tokens=False) if tokenizer is not None else ""


def passages(attempt) -> list[dict]:
    """The retrieved passages (Passage dicts), tolerant of older rows that stored other shapes."""
    out = []
    for p in attempt.passages or []:
        if isinstance(p, dict):
            out.append({"title": p.get("title") or "", "text": p.get("text") or "",
                        "document_id": p.get("document_id") or "", "chunk_id": p.get("chunk_id") or "",
                        "score": p.get("score")})
        else:
            out.append({"title": "", "text": str(p), "document_id": "", "chunk_id": "", "score": None})
    return out


def turns(attempt) -> list[dict]:
    """Turns as {"role", "text"}; an attempt without turns shows its text as one assistant turn."""
    found = [{"role": str(t.get("role") or "assistant"), "text": str(t.get("text") or "")}
             for t in (attempt.turns or []) if isinstance(t, dict)]
    return found or ([{"role": "assistant", "text": attempt.text}] if attempt.text else [])
