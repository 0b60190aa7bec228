"""CoSAEmb's section chunks (METHODS.md §8.9): each section of a paper, tagged by its class, cut into
chunks of whole sentences that fit the encoder's max_length.

- Tags: Introduction "[INTR]" (a related-work heading: "[RW]"), Methods "[MET]", Results "[RES]",
  Discussion "[CONC]"; other sections (class O) are left out. "[TTL]" and "[ABS]" mark the title and
  the abstract. They are added to the tokenizer as special tokens (once) and the embeddings resized.
- A section's first chunk reads "[TTL] title [TAG] s1 s2 ...", each later one "[TAG] s_last [TAG]
  s_k ...", where s_last is the previous chunk's last sentence (the context carried over). Sentences
  are packed greedily while the chunk, with the model's two special tokens, stays within max_length;
  a sentence longer than a chunk alone becomes a chunk of its own, cut by the tokenizer. Each piece
  is tokenized once and a chunk's size is the sum of its pieces' (exact for WordPiece, which splits
  on white space first; within a token or two for byte-level BPE).
- A paper's abstract reads "[TTL] title [SEP] [ABS] abstract".
"""
from __future__ import annotations

import re
from typing import Callable, Iterable, Sequence

TITLE, ABSTRACT = "[TTL]", "[ABS]"
CLASS_TAGS = {"I": "[INTR]", "M": "[MET]", "R": "[RES]", "D": "[CONC]"}
RELATED_WORK = "[RW]"
SPECIAL_TOKENS = (TITLE, ABSTRACT, *CLASS_TAGS.values(), RELATED_WORK)
_RELATED = re.compile(r"\b(related\s+(work|research|literature)|prior\s+work|previous\s+work|literature\s+review)\b",
                      re.IGNORECASE)


def section_tag(section_class: str | None, heading: str | None) -> str | None:
    """The chunk tag of a section, or None for one left out (class O or unknown)."""
    tag = CLASS_TAGS.get(section_class or "")
    if tag == CLASS_TAGS["I"] and heading and _RELATED.search(heading):
        return RELATED_WORK
    return tag


def abstract_text(title: str | None, abstract: str | None, sep: str = "[SEP]") -> str:
    return f"{TITLE} {title or ''} {sep} {ABSTRACT} {abstract or ''}".strip()


def chunk_section(title: str | None, tag: str, sentences: Sequence[str], count: Callable[[str], int],
                  max_length: int, specials: int = 2) -> list[str]:
    """The chunks of one section (see the module doc); count(text) = its tokens without the model's
    `specials` ([CLS], [SEP])."""
    budget = max_length - specials
    chunks: list[str] = []
    sents = [s for s in sentences if s and s.strip()]
    sizes = [count(s) for s in sents]           # each sentence tokenized once: a chunk's size is the sum
    tag_size = count(tag)
    i = 0
    prefix = f"{TITLE} {title or ''} {tag}".strip()
    used = count(prefix)
    while i < len(sents):
        body, used = [sents[i]], used + sizes[i]   # at least one sentence a chunk: the text always moves on
        i += 1
        while i < len(sents) and used + sizes[i] <= budget:
            body.append(sents[i])
            used += sizes[i]
            i += 1
        chunks.append(" ".join([prefix, *body]))
        prefix, used = f"{tag} {body[-1]} {tag}", 2 * tag_size + sizes[i - 1]
    return chunks


def chunk_paper(title: str | None, sections: Iterable[tuple[str | None, str | None, Sequence[str]]],
                count: Callable[[str], int], max_length: int) -> list[tuple[str, int, str]]:
    """(section class, chunk index within the section, text) for every chunk of a paper's sections
    ((heading, class, sentences) in order); sections of no tag are left out."""
    out = []
    for heading, cls, sentences in sections:
        tag = section_tag(cls, heading)
        if tag is None:
            continue
        out += [(cls, k, text) for k, text in enumerate(chunk_section(title, tag, sentences, count, max_length))]
    return out


def token_counter(tokenizer) -> Callable[[str], int]:
    """count(text): its tokens, the model's special tokens not included."""
    return lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])


def add_special_tokens(tokenizer, model=None) -> int:
    """Add the chunk tags the tokenizer lacks as special tokens (once: a second call adds none) and
    resize the model's embeddings to match; returns how many were added."""
    vocab = tokenizer.get_vocab()
    missing = [t for t in SPECIAL_TOKENS if t not in vocab]
    if missing:
        tokenizer.add_tokens(missing, special_tokens=True)   # never split, never lower-cased
    if model is not None and model.get_input_embeddings().num_embeddings != len(tokenizer):
        model.resize_token_embeddings(len(tokenizer))
    return len(missing)
