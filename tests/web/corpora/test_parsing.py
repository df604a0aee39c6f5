"""Parsers and chunking, without the database."""
import pytest

from apps.corpora.chunking import chunk_text, windows
from apps.corpora.embedder import get_embedder
from apps.corpora.parsing import MAX_LINE_BYTES, IngestError, check_file, parse_file

from .conftest import DOCS, jsonl, make_pdf, make_zip


def test_it_parses_each_format(sample_files):
    parsed = {name: parse_file(data, name) for name, data in sample_files.items()}
    assert parsed["iceland.txt"].documents[0].title == "iceland"
    assert parsed["bread.md"].documents[0].title == "Sourdough baking"
    chess = parsed["chess.html"].documents[0]
    assert chess.title == "The Sicilian Defence" and "1. e4 c5" in chess.text
    assert "scriptword" not in chess.text and "color" not in chess.text
    assert [d.title for d in parsed["rows.jsonl"].documents] == ["Photosynthesis", "Tides"]
    assert "Penguins huddle" in parsed["paper.pdf"].documents[0].text


def test_jsonl_keeps_good_lines_and_reports_broken_ones_by_number():
    data = jsonl({"title": "A", "text": "alpha"}, "{not json", {"title": "B"}, "[1, 2]", {"title": "C", "text": "gamma", "lang": "en"})
    parsed = parse_file(data, "mixed.jsonl")
    assert [d.title for d in parsed.documents] == ["A", "C"]
    assert parsed.documents[1].metadata == {"lang": "en"}
    assert [e.split(":")[0] for e in parsed.errors] == ["mixed.jsonl line 2", "mixed.jsonl line 3", "mixed.jsonl line 4"]
    assert "not valid JSON" in parsed.errors[0] and '"text"' in parsed.errors[1]


def test_it_decodes_utf16_with_bom_and_refuses_other_encodings():
    text = "Gruß aus Köln"
    assert parse_file(text.encode("utf-16"), "a.txt").documents[0].text == text
    assert parse_file(b"\xef\xbb\xbf" + text.encode(), "b.txt").documents[0].text == text
    with pytest.raises(IngestError, match=r"not valid UTF-8 text \(byte 0xdf at offset 3\); re-save the file as UTF-8"):
        parse_file(text.encode("latin-1"), "c.txt")


@pytest.mark.parametrize("name,data,needle", [
    ("empty.txt", b"", "empty"),
    ("blank.md", b"  \n\n ", "empty"),
    ("junk.txt", bytes(range(256)) * 40, "binary"),
    ("image.png", b"\x89PNG\r\n", "unsupported file type (.png)"),
    ("noext", b"hello", "unsupported file type (no extension)"),
    ("broken.pdf", b"%PDF-1.4\n1 0 obj << /Type /Catalog", "corrupt or unreadable PDF"),
    ("fake.pdf", b"hello, not a pdf", "not a PDF"),
    ("broken.zip", b"PK\x03\x04garbage", "corrupt zip"),
    ("bad.jsonl", b"{oops\n[1]\n", "no usable line"),
    ("scripts.html", b"<script>x()</script><style>a{}</style>", "no visible text"),
])
def test_it_refuses_bad_files_with_a_reason(name, data, needle):
    with pytest.raises(IngestError) as caught:
        check_file(data, name)
    assert needle in str(caught.value) and name in str(caught.value)


def test_it_refuses_a_100_mb_single_line():
    data = b"a" * (100 * 1024 * 1024)
    with pytest.raises(IngestError, match=r"line 1 is 104.9 MB long"):
        check_file(data, "huge.txt")
    with pytest.raises(IngestError, match="line 2"):
        check_file(b"ok\n" + b"x" * (MAX_LINE_BYTES + 1), "rows.jsonl")


def test_it_refuses_zip_bombs_traversal_and_nesting():
    bomb = make_zip({"zeros.txt": b"0" * (50 * 1024 * 1024)})
    assert len(bomb) < 200_000
    with pytest.raises(IngestError, match="zip bomb"):
        check_file(bomb, "bomb.zip")
    with pytest.raises(IngestError, match="unsafe path"):
        check_file(make_zip({"../../etc/evil.txt": b"hi"}), "evil.zip")
    with pytest.raises(IngestError, match="unsafe path"):
        check_file(make_zip({"/abs/evil.txt": b"hi"}), "abs.zip")
    with pytest.raises(IngestError, match="nested zip"):
        check_file(make_zip({"inner.zip": make_zip({"a.txt": b"hi"})}), "outer.zip")


def test_zip_members_are_parsed_and_bad_members_reported(sample_files):
    archive = make_zip({**{f"docs/{n}": d for n, d in sample_files.items()}, "docs/logo.png": b"\x89PNG",
                        "docs/empty.txt": b"", "__MACOSX/._iceland.txt": b"junk"})
    parsed = parse_file(archive, "all.zip")
    assert len(parsed.documents) == 6  # one each, two in the jsonl
    assert parsed.documents[0].source.startswith("all.zip/docs/")
    assert any("logo.png: unsupported" in e for e in parsed.errors)
    assert any("empty.txt: the file is empty" in e for e in parsed.errors)


def test_windows_overlap_and_cover_the_text():
    assert windows(10, 4, 1) == [(0, 4), (3, 7), (6, 10)]
    assert windows(3, 200, 40) == [(0, 3)]
    assert windows(0, 200, 40) == []
    with pytest.raises(ValueError):
        windows(10, 4, 4)


def test_chunks_are_token_windows_of_the_embedders_tokenizer():
    tokenizer = get_embedder().tokenizer
    text = " ".join(f"word{i}" for i in range(300))
    spans = chunk_text(tokenizer, text, size=50, overlap=10)
    n_tokens = len(tokenizer(text, add_special_tokens=False)["input_ids"])
    assert spans[0].token_start == 0 and spans[-1].token_end == n_tokens
    assert all(b.token_start == a.token_end - 10 for a, b in zip(spans, spans[1:]))
    assert all(s.text in text for s in spans)
    assert all(len(tokenizer(s.text, add_special_tokens=False)["input_ids"]) <= 50 for s in spans)


def test_pdf_helper_is_a_real_pdf():
    assert parse_file(make_pdf(DOCS["chess"][0]), "x.pdf").documents[0].text.startswith("The Sicilian")


def test_very_long_texts_become_several_documents():
    paragraph = ("lorem ipsum dolor sit amet " * 40).strip()
    data = "\n\n".join([paragraph] * 2000).encode()  # ~2.2 MB
    docs = parse_file(data, "long.txt").documents
    assert len(docs) == 3 and [d.title for d in docs] == ["long (part 1)", "long (part 2)", "long (part 3)"]
    assert all(len(d.text) <= 1_000_000 and d.text.startswith("lorem") and d.text.endswith("amet") for d in docs)
    assert sum(len(d.text) for d in docs) == len(data.decode()) - 2 * 2  # only the two cut separators go
