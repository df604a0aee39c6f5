"""Turn an uploaded file into documents: .txt .md .html .jsonl .pdf, and .zip of those.

`check_file(data, name)` is the quick check run at upload time (a bad file is refused with a
4xx / form error before any job starts); `parse_file(data, name)` does the full extraction
in the ingest job. Both raise `IngestError` with a message that says what is wrong and how
to fix it. Problems confined to part of a file (a broken JSONL line, an unreadable zip member)
do not sink the file: they come back in `Parsed.errors` and the rest is kept.

Text encoding: UTF-8 (with or without BOM), or UTF-16/32 when the file starts with a BOM.
Anything else is refused with the byte offset of the first bad byte: there is no latin-1
fallback, because latin-1 decodes every byte sequence and would silently store mojibake.
"""
from __future__ import annotations

import codecs
import io
import json
import posixpath
import stat
import zipfile
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import PurePosixPath

TEXT_TYPES = {".txt", ".md", ".html", ".htm", ".jsonl"}
SUPPORTED = TEXT_TYPES | {".pdf", ".zip"}
MAX_LINE_BYTES = 1024 * 1024           # a "line" longer than 1 MiB is not prose
MAX_HTML_BYTES = 20 * 1024 * 1024      # per HTML file (minified HTML has long lines)
MAX_ZIP_MEMBERS = 10_000
MAX_ZIP_TOTAL = 1024 * 1024 * 1024     # declared uncompressed bytes of all members
MAX_ZIP_RATIO = 100                    # uncompressed / compressed, per member and overall
SKIPPED_ZIP_PREFIXES = ("__MACOSX/",)
MAX_DOC_CHARS = 1_000_000              # longer texts become several documents ("title (part 2)")


class IngestError(ValueError):
    """The whole file cannot be ingested; the message says why and what to do."""


@dataclass
class ParsedDoc:
    title: str
    text: str
    source: str
    metadata: dict = field(default_factory=dict)


@dataclass
class Parsed:
    documents: list[ParsedDoc] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def extension(name: str) -> str:
    return PurePosixPath(name.lower()).suffix


def _stem(name: str) -> str:
    return PurePosixPath(name).stem[:200] or "untitled"


def check_type(name: str) -> str:
    ext = extension(name)
    if ext not in SUPPORTED:
        shown = ext or "no extension"
        raise IngestError(f"{name}: unsupported file type ({shown}); upload .txt, .md, .html, .jsonl, .pdf or a .zip of those.")
    return ext


# ---------------------------------------------------------------- text decoding

_BOMS = [(codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF8, "utf-8-sig"),
         (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16")]


def decode_text(data: bytes, name: str) -> str:
    if not data.strip():
        raise IngestError(f"{name}: the file is empty; upload a file with some text in it.")
    encoding = next((enc for bom, enc in _BOMS if data.startswith(bom)), None)
    if encoding is None:
        head = data[:8192]
        controls = sum(1 for b in head if b < 32 and b not in (9, 10, 12, 13))
        if b"\x00" in head or controls > len(head) // 10:
            raise IngestError(f"{name}: this looks like binary data, not text; upload a text file saved as UTF-8.")
        encoding = "utf-8"
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise IngestError(
            f"{name}: not valid {encoding.upper().replace('-SIG', '')} text (byte 0x{data[exc.start]:02x} at offset "
            f"{exc.start}); re-save the file as UTF-8."
        ) from None
    if not text.strip():
        raise IngestError(f"{name}: the file is empty; upload a file with some text in it.")
    return text


def _check_lines(data: bytes, name: str) -> None:
    start = 0
    line = 1
    while start < len(data):
        end = data.find(b"\n", start)
        end = len(data) if end < 0 else end
        if end - start > MAX_LINE_BYTES:
            raise IngestError(
                f"{name}: line {line} is {(end - start) / 1e6:.1f} MB long (the limit is {MAX_LINE_BYTES // 1024} KiB a line); "
                "this does not look like a text document — split it into lines or several files."
            )
        start = end + 1
        line += 1


# ---------------------------------------------------------------- formats

def parse_plain(data: bytes, name: str) -> Parsed:
    _check_lines(data, name)
    text = decode_text(data, name).strip()
    title = _stem(name)
    if extension(name) == ".md":
        first = next((ln for ln in text.splitlines() if ln.strip()), "")
        if first.lstrip().startswith("#"):
            title = first.lstrip("# ").strip()[:200] or title
    return Parsed([ParsedDoc(title, text, name)])


class _HTMLText(HTMLParser):
    SKIP = {"script", "style", "noscript", "template", "head"}
    BLOCK = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section", "article", "pre", "table",
             "blockquote", "ul", "ol", "hr", "header", "footer", "title"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title_parts: list[str] = []
        self._skip = 0
        self._in_title = False

    def handle_starttag(self, tag, attrs):
        if tag == "title":
            self._in_title = True
        elif tag in self.SKIP:
            self._skip += 1
        if tag in self.BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag):
        if tag == "title":
            self._in_title = False
        elif tag in self.SKIP and self._skip:
            self._skip -= 1
        if tag in self.BLOCK:
            self.parts.append("\n")

    def handle_data(self, data):
        if self._in_title:
            self.title_parts.append(data)
        elif not self._skip:
            self.parts.append(data)


def parse_html(data: bytes, name: str) -> Parsed:
    if len(data) > MAX_HTML_BYTES:
        raise IngestError(f"{name}: {len(data) / 1e6:.0f} MB is too large for one HTML page (limit {MAX_HTML_BYTES // 2**20} MiB); split it.")
    parser = _HTMLText()
    text = decode_text(data, name)
    try:
        parser.feed(text)
        parser.close()
    except AssertionError as exc:  # html.parser asserts on some malformed declarations, e.g. "<![ x ]>"
        raise IngestError(f"{name}: the HTML cannot be read ({exc}); fix that markup or upload the text as .txt.") from None
    lines = [" ".join(ln.split()) for ln in "".join(parser.parts).splitlines()]
    text = "\n".join(ln for ln in lines if ln)
    if not text:
        raise IngestError(f"{name}: the page has no visible text (only markup, scripts or styles).")
    title = " ".join("".join(parser.title_parts).split())[:200] or _stem(name)
    return Parsed([ParsedDoc(title, text, name)])


def parse_jsonl(data: bytes, name: str) -> Parsed:
    _check_lines(data, name)
    text = decode_text(data, name)
    parsed = Parsed()
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        problem = None
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            row, problem = None, f"not valid JSON ({exc.msg} at column {exc.colno})"
        except RecursionError:
            row, problem = None, "JSON nested too deeply to read; flatten it to {\"title\": ..., \"text\": ...}"
        if problem is None and not isinstance(row, dict):
            problem = "expected an object like {\"title\": ..., \"text\": ...}"
        elif problem is None and not (isinstance(row.get("text"), str) and row["text"].strip()):
            problem = "missing a non-empty \"text\" string"
        elif problem is None and not isinstance(row.get("title", ""), str):
            problem = "\"title\" must be a string"
        if problem:
            parsed.errors.append(f"{name} line {number}: {problem}")
            continue
        title = (row.get("title") or "").strip()[:500] or f"{_stem(name)} line {number}"
        meta = {k: v for k, v in row.items() if k not in ("title", "text")}
        parsed.documents.append(ParsedDoc(title, row["text"].strip(), f"{name}:{number}", meta))
    if not parsed.documents:
        shown = "; ".join(parsed.errors[:5]) or "no lines"
        raise IngestError(f"{name}: no usable line ({shown}); each line must be a JSON object with \"title\" and \"text\".")
    return parsed


def _pdf_reader(data: bytes, name: str):
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    if not data.lstrip()[:5] == b"%PDF-":
        raise IngestError(f"{name}: not a PDF (it does not start with %PDF-); check the file.")
    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        if reader.is_encrypted:
            raise IngestError(f"{name}: the PDF is encrypted; upload an unencrypted copy.")
        if len(reader.pages) == 0:
            raise IngestError(f"{name}: the PDF has no pages.")
    except IngestError:
        raise
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, OSError, RecursionError, IndexError,
            NotImplementedError, AssertionError, ArithmeticError) as exc:  # damaged files raise many kinds
        raise IngestError(f"{name}: corrupt or unreadable PDF ({type(exc).__name__}: {exc}); re-export it.") from None
    return reader


def parse_pdf(data: bytes, name: str) -> Parsed:
    reader = _pdf_reader(data, name)
    pages, errors = [], []
    for number, page in enumerate(reader.pages, start=1):
        try:
            pages.append(page.extract_text() or "")
        except Exception as exc:  # noqa: BLE001 - pypdf raises many kinds on damaged pages
            errors.append(f"{name} page {number}: could not extract text ({type(exc).__name__})")
    text = "\n\n".join(p.strip() for p in pages if p.strip())
    if not text:
        raise IngestError(f"{name}: the PDF has no extractable text (scanned images?); run OCR first.")
    meta_title = ""
    try:
        meta_title = str((reader.metadata or {}).get("/Title") or "").strip()
    except Exception:  # noqa: BLE001
        meta_title = ""
    return Parsed([ParsedDoc(meta_title[:200] or _stem(name), text, name, {"pages": len(reader.pages)})], errors)


# ---------------------------------------------------------------- zip

def _zip_members(data: bytes, name: str) -> tuple[zipfile.ZipFile, list[zipfile.ZipInfo]]:
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except Exception as exc:  # noqa: BLE001 - a damaged directory raises BadZipFile, NotImplementedError, IndexError ...
        raise IngestError(f"{name}: corrupt zip file ({exc}); re-create the archive.") from None
    infos = [i for i in archive.infolist()  # a nameless entry (a damaged directory) is no file
             if i.filename and not i.is_dir() and not i.filename.startswith(SKIPPED_ZIP_PREFIXES)]
    if len(infos) > MAX_ZIP_MEMBERS:
        raise IngestError(f"{name}: {len(infos)} files in the zip (limit {MAX_ZIP_MEMBERS}); split it.")
    total = sum(i.file_size for i in infos)
    packed = sum(i.compress_size for i in infos) or 1
    if total > MAX_ZIP_TOTAL:
        raise IngestError(f"{name}: the zip unpacks to {total / 2**20:.0f} MiB (limit {MAX_ZIP_TOTAL // 2**20} MiB); a zip bomb? split it.")
    for info in infos:
        ratio = info.file_size / max(info.compress_size, 1)
        if info.file_size > 1024 * 1024 and ratio > MAX_ZIP_RATIO:
            raise IngestError(f"{name}: {info.filename} compresses {ratio:.0f}:1 (limit {MAX_ZIP_RATIO}:1); this looks like a zip bomb.")
    if total > 1024 * 1024 and total / packed > MAX_ZIP_RATIO:
        raise IngestError(f"{name}: the zip compresses {total / packed:.0f}:1 overall (limit {MAX_ZIP_RATIO}:1); this looks like a zip bomb.")
    for info in infos:
        member = info.filename.replace("\\", "/")
        parts = PurePosixPath(member).parts
        if member.startswith("/") or ".." in parts or (parts and ":" in parts[0]) or posixpath.normpath(member).startswith(".."):
            raise IngestError(f"{name}: unsafe path in the zip ({info.filename!r}); paths must be relative without '..'.")
        if extension(member) == ".zip":
            raise IngestError(f"{name}: nested zip {info.filename!r}; put its files directly into one zip.")
        if stat.S_ISLNK(info.external_attr >> 16):
            raise IngestError(f"{name}: {info.filename!r} is a symbolic link; zip the files themselves, not links.")
        if info.flag_bits & 0x1:
            raise IngestError(f"{name}: {info.filename!r} is encrypted; re-create the zip without a password.")
    if not infos:
        raise IngestError(f"{name}: the zip is empty; put .txt, .md, .html, .jsonl or .pdf files in it.")
    if not any(extension(i.filename) in TEXT_TYPES | {".pdf"} for i in infos):
        raise IngestError(f"{name}: no file of a supported type in the zip; it may hold .txt, .md, .html, .jsonl "
                          "and .pdf files.")
    return archive, infos


def parse_zip(data: bytes, name: str) -> Parsed:
    archive, infos = _zip_members(data, name)
    parsed = Parsed()
    for info in infos:
        member = f"{name}/{info.filename}"
        if extension(info.filename) not in TEXT_TYPES | {".pdf"}:
            parsed.errors.append(f"{member}: unsupported file type, skipped")
            continue
        try:
            content = archive.read(info)
        except Exception as exc:  # noqa: BLE001 - a damaged member raises zlib, lzma, struct, value ... errors
            parsed.errors.append(f"{member}: could not unpack ({type(exc).__name__}: {exc})")
            continue
        try:
            part = PARSERS[extension(info.filename)](content, member)
        except IngestError as exc:
            parsed.errors.append(str(exc))
            continue
        parsed.documents += part.documents
        parsed.errors += part.errors
    if not parsed.documents:
        raise IngestError(f"{name}: no usable file in the zip ({'; '.join(parsed.errors[:5])}).")
    return parsed


PARSERS = {".txt": parse_plain, ".md": parse_plain, ".html": parse_html, ".htm": parse_html,
           ".jsonl": parse_jsonl, ".pdf": parse_pdf, ".zip": parse_zip}


def split_long(doc: ParsedDoc, limit: int = MAX_DOC_CHARS) -> list[ParsedDoc]:
    """Cut a very long text at paragraph (else line, else any) boundaries into parts of <= limit characters."""
    if len(doc.text) <= limit:
        return [doc]
    parts, start = [], 0
    while start < len(doc.text):
        end = min(start + limit, len(doc.text))
        if end < len(doc.text):
            cut = max(doc.text.rfind("\n\n", start, end), doc.text.rfind("\n", start, end))
            end = cut + 1 if cut > start else end
        parts.append(doc.text[start:end].strip())
        start = end
    parts = [p for p in parts if p]
    return [ParsedDoc(f"{doc.title} (part {i})", part, f"{doc.source}#part{i}", {**doc.metadata, "part": i})
            for i, part in enumerate(parts, start=1)]


def parse_file(data: bytes, name: str) -> Parsed:
    """Full extraction (the ingest job)."""
    ext = check_type(name)
    if not data:
        raise IngestError(f"{name}: the file is empty; upload a file with some text in it.")
    parsed = PARSERS[ext](data, name)
    parsed.documents = [part for doc in parsed.documents for part in split_long(doc)]
    return parsed


def check_file(data: bytes, name: str) -> list[str]:
    """Quick upload-time check: type, emptiness, encoding, line lengths, PDF structure, zip safety.

    Returns the problems confined to part of a text file (the broken lines of a JSONL), so the
    uploader hears about them at once; the job reports them again with the ingest result."""
    ext = check_type(name)
    if not data:
        raise IngestError(f"{name}: the file is empty; upload a file with some text in it.")
    if ext == ".pdf":
        _pdf_reader(data, name)
    elif ext == ".zip":
        _zip_members(data, name)
    else:
        return PARSERS[ext](data, name).errors  # text formats are cheap to parse fully
    return []
