"""Corpora fixtures: small files of every format built in the test, a corpus, uploads kept in a tmp dir.

The embedder (all-MiniLM-L6-v2 from its package) loads once per test session (apps.corpora.embedder
caches it per process); tests embed only a few short texts.
"""
import io
import json
import zipfile

import pytest

from apps.corpora.models import Corpus

DOCS = {
    "volcano": ("Volcanoes of Iceland", "Iceland sits on the Mid-Atlantic Ridge. Its volcanoes, such as Eyjafjallajokull and "
                "Hekla, erupt often; the 2010 eruption of Eyjafjallajokull closed European airspace for days."),
    "bread": ("Sourdough baking", "Sourdough bread rises with a starter of wild yeast and lactic acid bacteria. Bakers "
              "feed the starter with flour and water and let the dough ferment slowly overnight."),
    "chess": ("The Sicilian Defence", "The Sicilian Defence is a chess opening that begins 1. e4 c5. Black fights for the "
              "centre from the flank, leading to sharp, unbalanced positions favoured by attacking players."),
}


def make_pdf(text: str) -> bytes:
    """A minimal one-page PDF whose page shows `text` in Helvetica (byte offsets computed, so pypdf reads it)."""
    stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref))
    return out.getvalue()


def make_zip(members: dict[str, bytes], compression=zipfile.ZIP_DEFLATED) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return out.getvalue()


def jsonl(*rows) -> bytes:
    return "\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows).encode()


@pytest.fixture
def sample_files():
    """name -> bytes, one per supported format, each holding one distinct document."""
    title, text = DOCS["volcano"]
    return {
        "iceland.txt": text.encode(),
        "bread.md": f"# {DOCS['bread'][0]}\n\n{DOCS['bread'][1]}".encode(),
        "chess.html": (f"<html><head><title>{DOCS['chess'][0]}</title><style>p {{color: red}}</style></head>"
                       f"<body><script>var secret = 'scriptword';</script><p>{DOCS['chess'][1]}</p></body></html>").encode(),
        "rows.jsonl": jsonl({"title": "Photosynthesis", "text": "Plants turn light, water and carbon dioxide into sugar and oxygen."},
                            {"title": "Tides", "text": "The Moon's gravity raises two bulges of ocean water, giving two high tides a day."}),
        "paper.pdf": make_pdf("Penguins huddle together to survive the Antarctic winter"),
    }


@pytest.fixture
def corpus(db):
    return Corpus.objects.create(name="testcorpus", description="for tests")


@pytest.fixture(autouse=True)
def media_root(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"
    return settings.MEDIA_ROOT
