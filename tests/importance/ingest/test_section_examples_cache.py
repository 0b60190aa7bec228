"""The labelled sections' cache is gzipped JSON (no pickle): a second call reads it back equal,
without parsing the data again; a changed input file is another key."""
import importance.ingest.section_training as st
from importance.ingest.section_training import Section, cached_labelled_sections


def test_cache_round_trips_without_parsing_again(tmp_path, monkeypatch):
    data = tmp_path / "data"
    for rel in (st.ELIFE_TAR, st.SCISUMMNET_TAR, st.CLSCISUMM_TAR, st.UNARXIVE_TAR):
        (data / rel).parent.mkdir(parents=True, exist_ok=True)
        (data / rel).write_bytes(b"x")
    secs = [Section("elife", "doi:1", 0, 3, "Introduction", "text one", "I", "heading", ("_", "M")),
            Section("pmc", "pmid:2", 2, 5, None, "text two", None, "", None)]
    calls = []
    monkeypatch.setattr(st, "labelled_sections", lambda d: calls.append(d) or list(secs))
    cache = tmp_path / "cache"
    assert cached_labelled_sections(data, cache) == secs and len(calls) == 1
    [written] = cache.glob("section_examples-*.json.gz")
    assert cached_labelled_sections(data, cache) == secs and len(calls) == 1   # read back, not parsed
    assert not list(cache.glob("*.pkl"))
    (data / st.ELIFE_TAR).write_bytes(b"changed")
    cached_labelled_sections(data, cache)
    assert len(calls) == 2 and len(list(cache.glob("section_examples-*.json.gz"))) == 2
