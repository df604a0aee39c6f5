"""Token-aware chunking: windows of `size` tokens of the embedder's tokenizer, `overlap`
tokens shared between neighbours, cut at the character offsets the tokenizer reports so a
chunk's text is an exact slice of the document."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Span:
    text: str
    token_start: int
    token_end: int


def windows(n_tokens: int, size: int, overlap: int) -> list[tuple[int, int]]:
    """[start, end) token windows covering 0..n_tokens; e.g. (10, 4, 1) -> (0,4) (3,7) (6,10)."""
    if size <= 0 or not 0 <= overlap < size:
        raise ValueError(f"chunk size must be > 0 and 0 <= overlap < size (got {size}, {overlap})")
    step = size - overlap
    out = []
    start = 0
    while start < n_tokens:
        end = min(start + size, n_tokens)
        out.append((start, end))
        if end == n_tokens:
            break
        start += step
    return out


def chunk_text(tokenizer, text: str, size: int = 200, overlap: int = 40) -> list[Span]:
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, truncation=False,
                        verbose=False)
    offsets = encoded["offset_mapping"]
    spans = []
    for start, end in windows(len(offsets), size, overlap):
        piece = text[offsets[start][0]:offsets[end - 1][1]].strip()
        if piece:
            spans.append(Span(piece, start, end))
    return spans
