"""Malformed upload files, built in the test (no fixtures on disk): name -> bytes, and the words
the refusal must contain. Each case is refused at upload time, by the API and by the page form.

The zips are written with the standard library; the few that need hand-set header fields (a
symbolic link, an encrypted member) set them on a ``ZipInfo`` the way real archivers do.
"""
from __future__ import annotations

import codecs
import io
import json
import stat
import zipfile

from tests.web.corpora.conftest import make_pdf, make_zip

GOOD_TEXT = b"Lichens are partnerships of a fungus and an alga that colonise bare rock."


def zip_with(infos: list[tuple[zipfile.ZipInfo | str, bytes]], compression=zipfile.ZIP_DEFLATED) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression) as archive:
        for info, data in infos:
            archive.writestr(info, data)
    return out.getvalue()


def symlink_zip() -> bytes:
    """A zip whose member is a symbolic link to /etc/passwd (unix mode S_IFLNK in external_attr)."""
    link = zipfile.ZipInfo("passwd.txt")
    link.create_system = 3  # unix
    link.external_attr = (stat.S_IFLNK | 0o777) << 16
    return zip_with([(link, b"/etc/passwd"), ("notes.txt", GOOD_TEXT)])


def encrypted_zip() -> bytes:
    """A zip whose member is marked encrypted (general purpose flag bit 0, as ``zip -e`` sets it) in
    its local header and central directory entry; zipfile cannot write one, so the bit is set here."""
    data = bytearray(zip_with([("secret.txt", b"\x00" * 12 + GOOD_TEXT)], compression=zipfile.ZIP_STORED))
    for signature, flag_offset in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        at = data.find(signature) + flag_offset
        data[at] |= 0x1
    return bytes(data)


def damaged_member_zip() -> bytes:
    """A zip whose first member's deflate stream is damaged (the directory is intact) and whose second is fine."""
    data = bytearray(make_zip({"damaged.txt": GOOD_TEXT * 40, "fine.txt": b"Tardigrades survive the vacuum of space."}))
    start = 30 + len("damaged.txt")  # local file header, then the member's compressed bytes
    data[start + 4:start + 12] = b"\xff" * 8
    return bytes(data)


def many_members_zip(n: int) -> bytes:
    return zip_with([(f"d/{i}.txt", b"x") for i in range(n)], compression=zipfile.ZIP_STORED)


def empty_zip() -> bytes:
    return zip_with([])


def encrypted_pdf() -> bytes:
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(make_pdf("A secret page about lichens"))))
    writer.encrypt(user_password="pw", owner_password="owner", algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def pdf_without_pages() -> bytes:
    from pypdf import PdfWriter

    out = io.BytesIO()
    PdfWriter().write(out)
    return out.getvalue()


def _jsonl(*rows) -> bytes:
    return "\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows).encode()


PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x10\x00\x00\x00\x10\x08\x06\x00\x00\x00" + bytes(range(256)) * 4
GARBAGE = bytes((i * 7919 + 13) % 256 for i in range(20_000))

# (upload name, bytes, words the error must contain). Every one is refused at upload time.
MALFORMED: list[tuple[str, bytes, str]] = [
    # emptiness
    ("empty.txt", b"", "the file is empty"),
    ("blank.md", b"   \n\n\t  \r\n", "the file is empty"),
    ("bom-only.txt", codecs.BOM_UTF8, "the file is empty"),
    ("empty.jsonl", b"\n\n\n", "the file is empty"),
    # binary and encodings
    ("garbage.txt", GARBAGE, "looks like binary data"),
    ("picture-named.txt", PNG, "looks like binary data"),
    ("nul-bytes.md", b"hello\x00world\x00" * 100, "looks like binary data"),
    ("latin1.txt", "Crème brûlée à la française, déjà vu".encode("latin-1"), "not valid UTF-8"),
    ("cp1252.md", "“smart quotes” – dash".encode("cp1252"), "not valid UTF-8"),
    ("surrogate.txt", b"half a pair: \xed\xa0\x80 here", "not valid UTF-8"),
    ("truncated-utf8.txt", "naïve café".encode()[:-1], "not valid UTF-8"),
    ("odd-utf16.txt", codecs.BOM_UTF16_LE + "text".encode("utf-16-le") + b"\x00\xd8", "not valid UTF-16"),
    # wrong or missing extension, unsupported formats
    ("photo.png", PNG, "unsupported file type (.png)"),
    ("table.csv", b"title,text\nA,B\n", "unsupported file type (.csv)"),
    ("report.docx", b"PK\x03\x04 not really a docx", "unsupported file type (.docx)"),
    ("setup.exe", b"MZ\x90\x00", "unsupported file type (.exe)"),
    ("README", GOOD_TEXT, "unsupported file type (no extension)"),
    ("archive.tar.gz", b"\x1f\x8b\x08\x00", "unsupported file type (.gz)"),
    # a line that is not prose
    ("one-line.txt", b"a" * (2 * 1024 * 1024), "line 1 is 2.1 MB long"),
    # PDF
    ("not-a.pdf", GOOD_TEXT, "not a PDF"),
    ("truncated.pdf", make_pdf("Lichens grow slowly on granite")[:120], "corrupt or unreadable PDF"),
    ("no-pages.pdf", pdf_without_pages(), "the PDF has no pages"),
    ("locked.pdf", encrypted_pdf(), "the PDF is encrypted"),
    ("certificate-locked.pdf", encrypted_pdf().replace(b"/Standard", b"/PubSecXX"), "only Standard PDF encryption"),
    # HTML
    ("scripts-only.html", b"<html><head><style>p{}</style></head><body><script>alert('x')</script>"
                          b"<noscript>enable js</noscript></body></html>", "no visible text"),
    ("binary.htm", GARBAGE, "looks like binary data"),
    ("marked-section.html", b"<p>Moss</p><![ if !supportLists ]>1.<![endif]>", "the HTML cannot be read"),
    # JSONL
    ("broken.jsonl", b'{"title": "a", "text": "b"\n{not json}\n[1, 2', "no usable line"),
    ("missing-text.jsonl", _jsonl({"title": "only a title"}, {"body": "wrong key"}), "missing a non-empty \"text\" string"),
    ("wrong-types.jsonl", _jsonl({"title": "n", "text": 42}, {"title": "l", "text": ["a", "b"]}, {"title": 3, "text": "x"}),
     "no usable line"),
    ("not-objects.jsonl", _jsonl("[1, 2, 3]", '"a string"', "null", "17"), "expected an object"),
    ("huge-line.jsonl", json.dumps({"title": "big", "text": "w " * 700_000}).encode(), "line 1 is 1.4 MB long"),
    ("deep.jsonl", b"[" * 50_000 + b"]" * 50_000, "no usable line"),
    ("deep-object.jsonl", b'{"text": ' * 30_000 + b"1" + b"}" * 30_000, "no usable line"),
    # zip
    ("zero-byte.zip", b"", "the file is empty"),
    ("empty.zip", empty_zip(), "the zip is empty"),
    ("not-a.zip", GOOD_TEXT, "corrupt zip file"),
    ("truncated.zip", make_zip({"a.txt": GOOD_TEXT * 50})[:60], "corrupt zip file"),
    ("bomb.zip", make_zip({"zeros.txt": b"\0" * (20 * 1024 * 1024)}), "zip bomb"),
    ("traversal.zip", make_zip({"../../etc/cron.d/evil.txt": GOOD_TEXT}), "unsafe path"),
    ("absolute.zip", make_zip({"/etc/evil.txt": GOOD_TEXT}), "unsafe path"),
    ("drive.zip", make_zip({"C:/Windows/evil.txt": GOOD_TEXT}), "unsafe path"),
    ("nested.zip", make_zip({"inner.zip": make_zip({"a.txt": GOOD_TEXT})}), "nested zip"),
    ("symlink.zip", symlink_zip(), "symbolic link"),
    ("encrypted.zip", encrypted_zip(), "encrypted"),
    ("macos-junk.zip", make_zip({"__MACOSX/._a.txt": b"\x00\x05\x16\x07"}), "the zip is empty"),
    ("unsupported-members.zip", make_zip({"a.csv": b"x,y", "b.exe": b"MZ"}), "no file of a supported type"),
    ("many.zip", many_members_zip(10_001), "10001 files in the zip (limit 10000)"),
]


def blank_page_pdf() -> bytes:
    """A well-formed PDF with one page and no text on it (what a scanned document without OCR gives)."""
    from pypdf import PdfWriter

    writer = PdfWriter()
    writer.add_blank_page(width=612, height=792)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()
