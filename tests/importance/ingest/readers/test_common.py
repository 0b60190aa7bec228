"""What every reader shares (importance.ingest.readers): bad inputs become rejects with a reason."""
import gzip

from importance.ingest.readers import parse_file


ELIFE = "sample/elife/elife00007.xml.gz"


def test_bad_inputs_become_rejects(repo_root, of_kind):
    good = gzip.decompress((repo_root / ELIFE).read_bytes())
    cases = {
        "empty.xml": b"",
        "trunc.xml.gz": gzip.compress(good)[:5000],
        "trunc.xml": good[: len(good) // 2],
        "noid.xml": b"<article><front><article-meta><title-group><article-title>x</article-title>"
                    b"</title-group></article-meta></front></article>",
    }
    reasons = {}
    for name, data in cases.items():
        recs = list(parse_file("jats", "elife", name, data))
        assert [k for k, _ in recs] == ["reject"], name
        reasons[name] = recs[0][1]["reason"]
    assert reasons["empty.xml"] == "empty file"
    assert reasons["trunc.xml.gz"].startswith("truncated or corrupt gzip")
    assert reasons["trunc.xml"].startswith("truncated XML")
    assert "without DOI" in reasons["noid.xml"]
    # recoverable damage (an undefined entity) is parsed leniently, not rejected
    damaged = good.replace(b"</article-title>", b"&bogus;</article-title>", 1)
    assert of_kind(list(parse_file("jats", "elife", "d.xml", damaged)), "paper")


def _norm_title_by_definition(title):
    """The title key as METHODS §1.2 defines it, one character at a time (the reader's is a regex)."""
    import html
    import unicodedata
    if not title:
        return None
    t = "".join(c for c in unicodedata.normalize("NFKD", html.unescape(title)) if not unicodedata.combining(c)).lower()
    return " ".join("".join(c if c.isalnum() else " " for c in t).split()) or None


def test_norm_title_matches_its_definition_on_every_character_and_mixed_strings():
    import random
    import sys

    from importance.ingest.readers.common import norm_title

    # every ASCII character (the key's own path for ASCII text) and every 7th code point of every
    # plane, each alone and in words
    for cp in [*range(128), *range(0, sys.maxunicode + 1, 7)]:
        c = chr(cp)
        if 0xD800 <= cp <= 0xDFFF:
            continue
        for s in (c, f"Ab{c}cd_{c}9", f" {c}{c} x"):
            assert norm_title(s) == _norm_title_by_definition(s), (hex(cp), s)
    rng = random.Random(0)
    pool = "aZ9 _-.,:;'\"()[]\t\n&amp;é ü ß Ø ı İ ﬁ ² ½ 日本 ١٢ ά ̈ \u00a0\u2009\u200b—–"
    for _ in range(5000):
        s = "".join(rng.choice(pool) for _ in range(rng.randint(0, 30)))
        assert norm_title(s) == _norm_title_by_definition(s), repr(s)
    assert norm_title("The  Rôle of  __Café__ &amp; Ca²⁺ (II)") == "the role of cafe ca2 ii"


def test_a_reference_key_repeated_for_one_paper_keeps_the_first_entry(monkeypatch, of_kind):
    # The ingest relies on one entry per (citing_id, ref_key) and no longer deduplicates references in
    # Spark; parse_file_accounted holds that for any reader, the first entry in reading order winning.
    from importance.ingest.readers import FORMATS, Format, parse_file_accounted

    def reader(path, data, source):
        for pid in ("p1", "p2"):
            yield "paper", {"paper_id": pid, "source": source}
            for key, title in (("b1", "first"), ("b2", "other"), ("b1", "second")):
                yield "ref", {"citing_id": pid, "ref_key": key, "title": title}

    monkeypatch.setitem(FORMATS, "repeats_keys", Format(reader, "*"))
    refs = of_kind(list(parse_file_accounted("repeats_keys", "x", "f", b"x")), "ref")
    assert [(r["citing_id"], r["ref_key"], r["title"]) for r in refs] == [
        ("p1", "b1", "first"), ("p1", "b2", "other"), ("p2", "b1", "first"), ("p2", "b2", "other")]


def test_an_input_file_is_read_by_its_listed_uri_and_one_that_cannot_be_read_is_rejected_whole(tmp_path):
    """The ingest's tasks read each file from the path Spark lists (a file: URI, quoted); a file
    gone between the listing and the read, or a non-file URI, becomes one whole-file reject and a
    `files` row with that reason, not a failed job."""
    from collections import namedtuple

    from importance.ingest.job import _parse_rows, file_uri
    from importance.ingest.readers.common import read_input_file

    folder = tmp_path / "a b%c"
    folder.mkdir()
    good = folder / "one paper.jsonl"
    good.write_text('{"paper_id": "p1", "title": "A title", "abstract": "Words.", "bib_entries": {}}\n')
    assert read_input_file(file_uri(good)) == (good.read_bytes(), None)
    assert read_input_file(str(good)) == (good.read_bytes(), None)
    data, reason = read_input_file(file_uri(folder / "gone.jsonl"))
    assert data == b"" and reason == "cannot read the file: No such file or directory"
    assert read_input_file("hdfs://nn/x.jsonl")[1].startswith("cannot read hdfs: URIs")

    Row = namedtuple("Row", "path input")
    settings = [("s2orc", "src", False, True)]
    rows = [Row(file_uri(good), 0), Row(file_uri(folder / "gone.jsonl"), 0)]
    recs = list(_parse_rows(settings, False, rows))
    files = {r["path"]: r for k, r in recs if k == "file"}
    assert files[file_uri(good)]["status"] == "parsed" and files[file_uri(good)]["papers"] == 1
    gone = files[file_uri(folder / "gone.jsonl")]
    assert (gone["status"], gone["reason"], gone["bytes"]) == ("rejected", "cannot read the file: No such file or directory", 0)
    rejects = [r for k, r in recs if k == "reject"]
    assert [(r["record_id"], r["reason"], r["level"]) for r in rejects] == [
        ("gone.jsonl", "cannot read the file: No such file or directory", "record")]
    assert [r["paper_id"] for k, r in recs if k == "paper"] == ["s2orc:p1"]


def test_a_papers_references_mentions_sentences_and_sections_come_with_its_paper_record(repo_root):
    """ingest.job.of_kept_rows drops a duplicate paper row's references, mentions, sentences and
    sections by its (paper id, file), not by a join with every kept row: that holds only if no
    reader gives one of them without its paper's record in the same file. And the mentions meet
    only the references of papers with has_fulltext: a reader gives mentions only with the body.
    Every reader that gives them, on the real files here, full text and sections on (and off)."""
    from importance.ingest.job import file_uri
    from importance.ingest.readers import FORMATS, parse_file_accounted

    cases = [("jats", repo_root / "sample/elife"), ("jats", repo_root / "tests/data"),
             ("scisummnet", repo_root / "sample/scisummnet"), ("unarxive", repo_root / "tests/data"),
             ("clscisumm", repo_root / "tests/data/clscisumm")]
    seen = {"ref": 0, "mention": 0, "sentence": 0, "section": 0}
    for fmt, root in cases:
        globs = FORMATS[fmt].glob.strip("*.{}").split(",")
        files = [f for f in sorted(root.rglob("*")) if f.is_file() and any(f.name.endswith("." + g) for g in globs)]
        assert files, (fmt, root)
        for f in files[:6]:
            path = file_uri(f)
            recs = list(parse_file_accounted(fmt, "src", path, f.read_bytes(), bodies=True, sections=True))
            papers = {r["paper_id"]: r for k, r in recs if k == "paper"}
            for kind, rec in recs:
                if kind in seen:
                    seen[kind] += 1
                    paper = rec["citing_id"] if kind in ("ref", "mention") else rec["paper_id"]
                    assert paper in papers and rec["source_file"] == path, (f, kind, paper)
                    # the ingest joins mentions with the references of full-text papers only
                    assert kind != "mention" or papers[paper]["has_fulltext"], (f, paper)
            no_body = list(parse_file_accounted(fmt, "src", path, f.read_bytes(), bodies=False))
            assert not [r for k, r in no_body if k == "mention"] and all(
                not r["has_fulltext"] for k, r in no_body if k == "paper"), f
    assert all(seen.values()), seen
