"""What every reader shares (importance.readers): bad inputs become rejects with a reason."""
import gzip

from importance.readers import parse_file


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
