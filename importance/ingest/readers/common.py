"""Helpers shared by the readers: decompression, content checks, lenient XML, text normalisation,
record tagging.

Readers are pure Python (no Spark import) so that executors only need the `importance` package and
lxml; each yields `(kind, dict)` records that the ingest job (importance.ingest.job) turns into tables.

Content before names and structure (METHODS.md §9): a reader first asks whether the bytes are
usable at all (empty, not text, wrong encoding, not XML/JSON, truncated) and only then checks what
its format requires (root element, ids from file names), so a reject names the actual cause.
Local damage (a few bytes that are not UTF-8, a tag mismatch) is recovered and the paper kept with
a `warning` record saying what the parser reported and what was kept or lost.
"""
from __future__ import annotations

import codecs
import gzip
import html
import io
import json
import re
import unicodedata
import zlib
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from lxml import etree

from sciencemap.ids import norm_doi  # noqa: F401  (the readers' DOI key, shared with the look-up)

# Record kinds a reader may yield (see importance.ingest.INTERNAL_SCHEMAS).
PAPER, REF, MENTION, REJECT, SENTENCE, CITANCE = "paper", "ref", "mention", "reject", "sentence", "citance"
# WARNING: a record kept after lenient recovery (warnings table). FILE: what became of one input
# file (files table); a reader yields one only to say a file is skipped or auxiliary (file_status).
# SECTION: a top-level section's title, class and sentences (sections table; readers asked for them).
WARNING, FILE, SECTION = "warning", "file", "section"
DUPLICATE_REASON = "duplicate paper id"

_WS = re.compile(r"\s+")
_YEAR = re.compile(r"(1[5-9]\d\d|20\d\d)")


class BadRecord(Exception):
    """A whole input record (file or row) cannot be used; the message becomes the reject reason."""


def _is_gzip(name: str, data: bytes) -> bool:
    """By content, not name: a file named .gz that is not gzip is read as it is (and if it is no
    text either, the reject says so)."""
    return data[:2] == b"\x1f\x8b"


def open_stream(name: str, data: bytes) -> io.BufferedIOBase:
    """`data` as a binary stream, gunzipped while it is read (no second full copy in memory) when
    it is a `.gz` file; empty input raises BadRecord. A truncated archive raises EOFError/OSError
    from the read, which the reader turns into a reject that says how far it got."""
    if data is None or len(data) == 0:
        raise BadRecord("empty file")
    stream = io.BytesIO(data)
    return gzip.GzipFile(fileobj=stream) if _is_gzip(name, data) else stream


def decompress(name: str, data: bytes) -> bytes:
    """Gunzip `.gz` files (truncated archives raise BadRecord); empty input raises BadRecord."""
    if data is None or len(data) == 0:
        raise BadRecord("empty file")
    if _is_gzip(name, data):
        try:
            data = gzip.decompress(data)
        except (EOFError, OSError, zlib.error) as e:
            raise BadRecord(f"truncated or corrupt gzip: {e}") from None
        if not data.strip():
            raise BadRecord("empty file")
    elif not data.strip():
        raise BadRecord("empty file")
    return data


def section_records(paper_id: str, path: str, titles: list, classes: list, sources: list,
                    sentences: list[list[str]]) -> list[tuple[str, dict]]:
    """One SECTION record per top-level section, in order (contracts "sections")."""
    return [(SECTION, {"paper_id": paper_id, "position": pos, "title": t, "section_class": c, "class_source": src,
                       "sentences": sents, "source_file": path})
            for pos, (t, c, src, sents) in enumerate(zip(titles, classes, sources, sentences))]


def local_path(path: str) -> Path:
    """A file as the readers open it: Spark lists file: URIs (file:/a/b%20c.xml); tests give plain paths."""
    return Path(unquote(urlparse(path).path)) if path.startswith("file:") else Path(path)


def read_input_file(path: str) -> tuple[bytes, str | None]:
    """(the bytes of one input file, None), or (b"", the reason it cannot be read): what the
    readers parse. The ingest's tasks read their files here, by the paths Spark lists, rather than
    take binaryFile's content column: the JVM reading each file and pickling it to Python cost
    ≈ 11 CPU-s a GB and held every file in the heap (docs/spark.md "A file is read whole")."""
    scheme = urlparse(path).scheme
    if scheme not in ("", "file"):
        return b"", f"cannot read {scheme}: URIs: ingest reads its inputs from a local or shared filesystem path"
    try:
        return local_path(path).read_bytes(), None
    except OSError as e:
        return b"", f"cannot read the file: {e.strerror or e}"


def clean_ws(text: str | None) -> str | None:
    if text is None:
        return None
    try:  # str.split() and re's \s agree on every code point; split is ~3x faster (ingest calls this per field)
        text = " ".join(text.split())
    except AttributeError:  # not a string: re's TypeError, the reject reason the readers have always given
        text = _WS.sub(" ", text).strip()
    return text or None


def keyword_list(values) -> list[str]:
    """papers.keywords from raw keyword strings: whitespace collapsed and stripped, case kept as
    written, empty ones dropped, each keyword once (compared case-insensitively: the first spelling
    stays), in order."""
    out, seen = [], set()
    for v in values:
        k = clean_ws(v)
        if k and k.casefold() not in seen:
            seen.add(k.casefold())
            out.append(k)
    return out


def strip_accents(text: str) -> str:
    if text.isascii():  # most titles and names: nothing to decompose
        return text
    return "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))


# A run of characters that are not str.isalnum(): re's \w is exactly isalnum() plus '_'.
_NOT_ALNUM = re.compile(r"(?:[^\w]|_)+")
# The same on ASCII text: every character but a-z, A-Z, 0-9 to a space (str.translate's ASCII path).
_ASCII_NOT_ALNUM = str.maketrans({chr(i): chr(i) if chr(i).isalnum() else " " for i in range(128)})


def norm_title(title: str | None) -> str | None:
    """Title match key: unescaped, accents stripped, lowercase, letters/digits only, single spaces
    (every run of other characters becomes one space)."""
    if not title:
        return None
    t = html.unescape(title)
    if t.isascii():  # most titles: the same key in half the time of the regular expression
        return " ".join(t.lower().translate(_ASCII_NOT_ALNUM).split()) or None
    t = _NOT_ALNUM.sub(" ", strip_accents(t).lower()).strip()
    return t or None


def parse_year(text: str | None) -> int | None:
    if not text:
        return None
    m = _YEAR.search(text)
    return int(m.group(1)) if m else None


def reject(source_file: str, record_id: str | None, reason: str, source: str,
           level: str = "record", stage: str = "ingest") -> tuple[str, dict]:
    """level 'record' = a whole input record (counts against input records); 'item' = a part of one."""
    return REJECT, {"source_file": source_file, "record_id": record_id, "stage": stage,
                    "reason": reason, "source": source, "level": level}


def author(family: str | None, given: str | None = None, orcid: str | None = None) -> dict:
    orcid = orcid.strip().rstrip("/").rsplit("/", 1)[-1] if orcid else None
    return {"family": clean_ws(html.unescape(family)) if family else None,
            "given": clean_ws(html.unescape(given)) if given else None,
            "orcid": orcid or None}


def warning(source_file: str, record_id: str | None, text: str, source: str, stage: str = "ingest") -> tuple[str, dict]:
    """A record kept after lenient recovery: what the parser reported and what was kept or lost."""
    return WARNING, {"source_file": source_file, "record_id": record_id, "source": source, "stage": stage,
                     "warning": text[:1000]}


def file_status(status: str, reason: str, **counts) -> tuple[str, dict]:
    """Said by a reader about the file it was given when that file is no input record of its own:
    'skipped' (not read: not an input of this format) or 'auxiliary' (read with other files)."""
    if status not in ("skipped", "auxiliary"):
        raise ValueError(f"a reader declares a file skipped or auxiliary, not {status!r}")
    return FILE, {"status": status, "reason": reason, **counts}


# ---------------------------------------------------------------- content checks (before names and structure)

SNIFF_BYTES = 4096
NEWLINE = b"\n"
# UTF-32-LE's byte-order mark starts with UTF-16-LE's: longest first.
_BOMS = ((b"\x00\x00\xfe\xff", "utf-32"), (b"\xff\xfe\x00\x00", "utf-32"), (b"\xef\xbb\xbf", "utf-8-sig"),
         (b"\xfe\xff", "utf-16"), (b"\xff\xfe", "utf-16"))
_SIGNATURES = ((b"PK\x03\x04", "a ZIP archive"), (b"%PDF-", "a PDF document"), (b"\x89PNG", "a PNG image"),
               (b"\xff\xd8\xff", "a JPEG image"), (b"GIF8", "a GIF image"), (b"BZh", "a bzip2 archive"),
               (b"\xfd7zXZ\x00", "an xz archive"), (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive"),
               (b"\x28\xb5\x2f\xfd", "a zstd archive"), (b"PAR1", "a Parquet file"),
               (b"\x1f\x8b", "a gzip archive inside a gzip archive"), (b"\x7fELF", "an executable"),
               (b"SQLite format 3\x00", "an SQLite database"))
# Bytes no text format here uses (tab, newline, form feed and carriage return are text).
_CONTROL = frozenset(range(0x00, 0x09)) | {0x0B, 0x7F} | frozenset(range(0x0E, 0x20))
_NOT_CONTROL = bytes(b for b in range(256) if b not in _CONTROL)


def bom_encoding(data: bytes) -> str | None:
    """The Python codec a byte-order mark names (utf-8-sig, utf-16, utf-32), or None."""
    return next((enc for bom, enc in _BOMS if data.startswith(bom)), None)


def binary_reason(head: bytes) -> str | None:
    """Why the first bytes of a (decompressed) file are no text, or None: a known binary format,
    UTF-16 without a byte-order mark, or control bytes (a NUL, or more than 1 in 100)."""
    if bom_encoding(head):
        return None
    head = head[:SNIFF_BYTES]
    for sig, what in _SIGNATURES:
        if head.startswith(sig):
            return f"not text: {what}"
    half = len(head) // 2
    if half >= 8:
        even, odd = head[0::2].count(0), head[1::2].count(0)
        if (odd > 0.3 * half and even < 0.02 * half) or (even > 0.3 * half and odd < 0.02 * half):
            return "wrong encoding: UTF-16 text without a byte-order mark (expected UTF-8)"
    control = head.translate(None, _NOT_CONTROL)
    if b"\x00" in control or len(control) > max(1, len(head) // 100):
        first = next(i for i, b in enumerate(head) if b in _CONTROL)
        return (f"not text: binary data ({len(control):,} control bytes in the first {len(head):,} bytes, "
                f"the first 0x{head[first]:02X} at byte {first})")
    return None


def not_text_reason(data: bytes) -> str | None:
    """binary_reason, and "empty file" for nothing or only whitespace."""
    if not data or data.isspace():
        return "empty file"
    return binary_reason(data)


def require_text(data: bytes) -> None:
    reason = not_text_reason(data)
    if reason:
        raise BadRecord(reason)


def utf8_problem(data: bytes, where: bool = True) -> str | None:
    """Where `data` is not valid UTF-8 ("3 byte sequences not valid UTF-8 (the first, 0xE9, on
    line 12)"; without the line when not `where`), or None when it is."""
    try:
        data.decode("utf-8")
        return None
    except UnicodeDecodeError as e:
        first = e.start
    n = data.decode("utf-8", "replace").count("\ufffd") - data.count("\ufffd".encode())
    line = f", on line {data.count(NEWLINE, 0, first) + 1:,}" if where else ""
    return f"{n:,} byte sequence{'s' if n != 1 else ''} not valid UTF-8 (the first, 0x{data[first]:02X}{line})"


def decode_text(data: bytes) -> tuple[str, str | None]:
    """The text of a file read as UTF-8 (a byte-order mark, also UTF-16's or UTF-32's, is honoured).
    Bytes that are not UTF-8 become U+FFFD; the second value then says how many and where (a
    warning for the records that hold them), else None."""
    enc = bom_encoding(data)
    if enc in ("utf-16", "utf-32"):
        try:
            return data.decode(enc), None
        except UnicodeDecodeError as e:
            raise BadRecord(f"wrong encoding: not valid {enc.upper()} after its byte-order mark "
                            f"({e.reason} at byte {e.start:,})") from None
    problem = utf8_problem(data)
    return data.decode("utf-8-sig", "replace"), (f"{problem} replaced by U+FFFD" if problem else None)


def open_text_stream(name: str, data: bytes) -> io.BufferedReader:
    """open_stream, after a look at the first (decompressed) bytes: binary content raises BadRecord
    naming it, before any line is parsed."""
    stream = io.BufferedReader(open_stream(name, data), buffer_size=4 * SNIFF_BYTES)
    try:
        head = stream.peek(SNIFF_BYTES)[:SNIFF_BYTES]
    except (EOFError, OSError, zlib.error) as e:
        raise BadRecord(f"truncated or corrupt gzip: {e}") from None
    reason = binary_reason(head)
    if reason:
        raise BadRecord(reason)
    return stream


class Utf8Repair(io.RawIOBase):
    """A binary stream that passes UTF-8 through and replaces byte sequences that are not UTF-8 by
    U+FFFD as it is read (for streamed XML: libxml2 stops at the first invalid byte); `replaced`
    counts them and `first_line` is where the first was."""

    def __init__(self, stream, chunk: int = 1 << 20):
        super().__init__()
        self._stream, self._chunk = stream, chunk
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._buf, self._eof, self._lines = b"", False, 0
        self.replaced, self.first_line = 0, None

    def readable(self) -> bool:
        return True

    def readinto(self, out) -> int:
        while not self._buf and not self._eof:
            raw = self._stream.read(self._chunk)
            self._eof = not raw
            text = self._decoder.decode(raw, final=self._eof)
            bad = text.count("\ufffd") - raw.count("\ufffd".encode())
            if bad > 0:
                if self.first_line is None:
                    self.first_line = self._lines + text[:text.index("\ufffd")].count("\n") + 1
                self.replaced += bad
            self._lines += raw.count(NEWLINE)
            self._buf = text.encode("utf-8")  # never raw: the decoder may hold a split sequence back
        n = min(len(out), len(self._buf))
        out[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n

    def note(self) -> str | None:
        if not self.replaced:
            return None
        return (f"{self.replaced:,} byte sequence{'s' if self.replaced != 1 else ''} not valid UTF-8 (the first on "
                f"line {self.first_line:,}) replaced by U+FFFD")


def starts_with(head: bytes, encoding: str = "utf-8") -> str:
    """The first characters of a file (after a byte-order mark and whitespace), for reject reasons."""
    return head[:200].decode(encoding, errors="replace").lstrip("\ufeff \t\r\n")[:40]


# ---------------------------------------------------------------- XML, strict then lenient

_XML_PARSER = dict(resolve_entities=False, no_network=True, load_dtd=False, huge_tree=True)
_XML_DECLARED = re.compile(rb"""^\s*<\?xml[^>]*?encoding\s*=\s*["']([A-Za-z0-9._-]+)["']""")
_UTF8_NAMES = ("utf-8", "utf8", "utf-8-sig")


def xml_encoding(data: bytes) -> str:
    """The encoding of an XML document: its byte-order mark, else its declaration, else UTF-8."""
    bom = bom_encoding(data)
    if bom:
        return bom
    m = _XML_DECLARED.match(data[:200])
    return m.group(1).decode("ascii").lower() if m else "utf-8"


@dataclass
class XmlRecovery:
    """What a lenient parse of a damaged XML document did. message: the strict parser's first
    error ("Opening and ending tag mismatch: ..., line 812, column 5"), None when only bytes were
    replaced; truncated: the document ends before its root's closing tag (last_line is then where
    it ends); replaced: the note on bytes that were not UTF-8."""
    message: str | None
    truncated: bool = False
    last_line: int | None = None
    replaced: str | None = None

    def describe(self, kept: str) -> str:
        """The warning: "recovered from malformed XML (line 812, ...): kept 5 sections, 143 of 150
        sentences; text after line 812 lost"."""
        causes = []
        if self.message:
            causes.append(f"recovered from {'truncated' if self.truncated else 'malformed'} XML ({self.message})")
        if self.replaced:
            causes.append(self.replaced)
        text = "; ".join(causes) + f": kept {kept}"
        if self.truncated:
            text += f"; any text after line {self.last_line:,} (where the file ends) lost"
        return text


def xml_error(e) -> str:
    """lxml's message ("... line 812, column 5"), without the "(<string>, line 812)" it appends."""
    return re.sub(r"\s*\(<string>, line \d+\)$", "", str(e).strip())


def parse_xml(data: bytes, root_tag: str, keep_truncated: bool = False):
    """Parse one XML document, the content checked first. Returns (root, XmlRecovery or None).

    Order: not text (empty, binary) -> not XML (does not start with '<') -> bytes that are not
    UTF-8 in a UTF-8 document (replaced, noted) -> strict parse -> on error: a declared encoding
    the bytes do not follow is rejected ("wrong encoding"); a document that ends before </root_tag>
    is rejected as truncated unless keep_truncated; otherwise lxml's recovering parser keeps what
    it can, and the XmlRecovery says what happened (the caller adds what was kept)."""
    require_text(data)
    enc = xml_encoding(data)
    start = starts_with(data, enc if enc not in _UTF8_NAMES else "utf-8")
    if not start.startswith("<"):
        raise BadRecord(f"not XML: the file starts with {start!r}")
    replaced = None
    if enc in _UTF8_NAMES:
        replaced = utf8_problem(data)
        if replaced:  # libxml2's recovery stops at the first invalid byte: replace them all instead
            data = data.decode("utf-8", "replace").encode("utf-8")
            replaced += " replaced by U+FFFD"
    try:
        root = etree.fromstring(data, etree.XMLParser(**_XML_PARSER))
        return root, (XmlRecovery(None, replaced=replaced) if replaced else None)
    except etree.XMLSyntaxError as e:
        msg = xml_error(e)
    except (LookupError, ValueError) as e:  # an encoding name lxml does not know
        raise BadRecord(f"wrong encoding: {e}") from None
    if "encoding" in msg.lower() or "labelled" in msg.lower():
        raise BadRecord(f"wrong encoding (declared or expected {enc.upper()}): {msg}")
    last_line = data.count(b"\n") + 1
    tail = data[-256:].decode(enc if enc not in _UTF8_NAMES else "utf-8", errors="ignore")
    truncated = f"</{root_tag}" not in tail
    if truncated and not keep_truncated:
        raise BadRecord(f"truncated XML (the file ends at line {last_line:,} without </{root_tag}>): {msg}")
    root = etree.fromstring(data, etree.XMLParser(recover=True, **_XML_PARSER))
    if root is None:
        raise BadRecord(f"{'truncated' if truncated else 'malformed'} XML, nothing recoverable: {msg}")
    return root, XmlRecovery(msg, truncated, last_line, replaced)


def kept_elements(data: bytes, root, units) -> str:
    """What a recovered tree kept of the elements the bytes open, per (tag, label): "5 sections,
    143 of 150 sentences" (n of m where some were lost)."""
    parts = []
    for tag, label in units:
        opened = len(re.findall(rb"<" + tag.encode() + rb"[\s>/]", data))
        kept = sum(1 for _ in root.iter(tag))
        parts.append(f"{kept:,} of {opened:,} {label}" if kept < opened else f"{kept:,} {label}")
    return ", ".join(parts)


def keep_warning(recovery: XmlRecovery | None, data: bytes, root, units, path: str, record_id: str,
                 source: str) -> list[tuple[str, dict]]:
    """[] after a clean parse; else the warning of the paper kept from a recovered document."""
    if recovery is None:
        return []
    return [warning(path, record_id, recovery.describe(kept_elements(data, root, units)), source)]


def json_truncated(e: json.JSONDecodeError, text: str) -> bool:
    """The parser ran into the end of the text: the error is there, or a string never closes (JSON
    strings cannot hold a raw line break, so an unterminated one ran to the end)."""
    return e.pos >= len(text.rstrip()) or e.msg.startswith("Unterminated string")


def json_error(e: json.JSONDecodeError, text: str) -> str:
    """"truncated JSON (...)" when the parser ran into the end of the text, else "malformed JSON"."""
    if json_truncated(e, text):
        return f"truncated JSON (the file ends at line {e.lineno:,} before the value is complete): {e.msg}"
    return f"malformed JSON (line {e.lineno:,}, column {e.colno:,}): {e.msg}"


def parse_json(text: str):
    """One JSON document; reasons that name the cause: not JSON, truncated, malformed."""
    start = text.lstrip("\ufeff \t\r\n")[:40]
    if start[:1] not in ('{', '[', '"'):
        raise BadRecord(f"not JSON: the file starts with {start!r}")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise BadRecord(json_error(e, text)) from None
