"""Prompt token ids for the policy: ``chat(tokenizer, system, user)`` applies the tokenizer's
chat template (falling back to a plain transcript for tokenizers without one).

Prompts are token ids from here on: the rollout never re-tokenizes text it generated.
"""
from __future__ import annotations

FALLBACK_TEMPLATE = "{system}User: {user}\n\nAssistant:"


def chat(tokenizer, system: str | None, user: str, add_generation_prompt: bool = True) -> list[int]:
    """Token ids of a one-turn conversation (``system`` may be None or empty)."""
    messages = []
    if system:
        messages.append({"role": "system", "content": system})
    messages.append({"role": "user", "content": user})
    if getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "keys"):  # transformers 5 returns a BatchEncoding
            ids = ids["input_ids"]
        return [int(i) for i in ids]
    text = FALLBACK_TEMPLATE.format(system=f"{system}\n\n" if system else "", user=user)
    if not add_generation_prompt:
        text = text[: -len("\n\nAssistant:")]
    ids = tokenizer.encode(text, add_special_tokens=False)
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is not None and (not ids or ids[0] != bos):
        ids = [bos] + ids
    return [int(i) for i in ids]


def chat_text(tokenizer, system: str | None, user: str, add_generation_prompt: bool = True) -> str:
    """The same conversation as text (for logs and the web's sample view)."""
    return tokenizer.decode(chat(tokenizer, system, user, add_generation_prompt))
