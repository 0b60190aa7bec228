"""CoSAEmb's section chunks (encoders.fulltext.chunks): tags by section class, chunks within
max_length that carry the previous chunk's last sentence, the tags added to a real tokenizer once.
Real MiniLM tokenizer, real sentences of a sample eLife article's sections."""
from __future__ import annotations

import pytest

from encoders.fulltext.chunks import (CLASS_TAGS, RELATED_WORK, SPECIAL_TOKENS, TITLE, add_special_tokens,
                                      chunk_paper, chunk_section, section_tag, token_counter)
from encoders.model import load_encoder

L = 64


@pytest.fixture(scope="module")
def enc():
    e = load_encoder("minilm", "mean", max_length=L, device="cpu")
    add_special_tokens(e.tokenizer, e.model)
    return e


@pytest.fixture(scope="module")
def sentences():
    from sciencemap.text import split_sentences

    text = ("Cells divide by mitosis. The spindle pulls the chromosomes apart at anaphase, a step that takes "
            "minutes in most animal cells and is checked by the spindle assembly checkpoint. We imaged 120 "
            "cells. Each cell was tracked for six hours under low light to limit phototoxicity, with frames "
            "every two minutes. Anaphase lasted 4.2 min on average (Fig. 1A). Cells treated with the "
            "inhibitor took twice as long, and a third of them never completed it. These results show that "
            "the checkpoint sets the pace of anaphase.")
    return split_sentences([text])


def test_tags_follow_the_section_class_and_related_work_headings():
    assert section_tag("I", "Introduction") == CLASS_TAGS["I"]
    assert section_tag("I", "Related Work") == RELATED_WORK == section_tag("I", "2. Prior work on parsing")
    assert section_tag("M", "Materials and methods") == "[MET]" and section_tag("D", "Discussion") == "[CONC]"
    assert section_tag("O", "Acknowledgements") is None and section_tag(None, "x") is None
    assert section_tag("M", "Related work") == "[MET]"     # the heading rule is for introductions only


def test_chunks_fit_max_length_and_carry_the_previous_last_sentence(enc, sentences):
    count = token_counter(enc.tokenizer)
    chunks = chunk_section("Anaphase timing", "[RES]", sentences, count, L)
    assert len(chunks) >= 3
    assert chunks[0].startswith(f"{TITLE} Anaphase timing [RES] {sentences[0]}")
    bodies = [chunks[0][len(f"{TITLE} Anaphase timing [RES] "):]] + [c.split(" [RES] ", 1)[1] for c in chunks[1:]]
    for c, body in zip(chunks, bodies):
        # within max_length, unless one sentence alone is longer (the tokenizer cuts it later)
        assert len(enc.tokenizer(c)["input_ids"]) <= L or body in sentences
    for prev, nxt in zip(bodies, chunks[1:]):
        last = next(s for s in reversed(sentences) if prev.endswith(s))
        assert nxt.startswith(f"[RES] {last} [RES] ")
    # every sentence lands in exactly one chunk's body (the carried copy aside), in order
    assert " ".join(bodies) == " ".join(sentences)


def test_chunk_paper_leaves_out_other_sections(enc, sentences):
    count = token_counter(enc.tokenizer)
    secs = [("Introduction", "I", sentences[:2]), ("Acknowledgements", "O", sentences[2:4]),
            ("Results", "R", sentences[4:])]
    out = chunk_paper("T", secs, count, L)
    assert {c for c, _, _ in out} == {"I", "R"} and all(k == 0 or c == "R" for c, k, _ in out)


def test_special_tokens_are_added_once_and_read_as_one_token(enc):
    tok = enc.tokenizer
    assert add_special_tokens(tok, enc.model) == 0          # the fixture added them already
    assert enc.model.get_input_embeddings().num_embeddings == len(tok)
    for t in SPECIAL_TOKENS:
        assert len(tok(t, add_special_tokens=False)["input_ids"]) == 1
    fresh = load_encoder("minilm", "mean", max_length=L, device="cpu")
    n0 = len(fresh.tokenizer)
    assert add_special_tokens(fresh.tokenizer, fresh.model) == len(SPECIAL_TOKENS)
    assert len(fresh.tokenizer) == n0 + len(SPECIAL_TOKENS) == fresh.model.get_input_embeddings().num_embeddings
