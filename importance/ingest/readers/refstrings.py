"""Raw reference strings -> authors, title, venue, year and the ids written in them.

Readers that only have a reference as written (unArXive `bib_entry_raw`, a JATS `mixed-citation`
holding plain text) call `parse_reference(raw, citing_year)`. The rules per citation style, the
year rule and what is left out are in docs/METHODS.md §1.2.1; in short:

1. Clean-up: LaTeX residue (`~`, ``` ``...'' ```, `--`, `5em minus 0.4em` from `\\newblock`),
   unArXive's `{{formula:...}}` / `{{cite:...}}` placeholders, HTML entities. An entry that lists
   several works ("...; M. Sato and Y. Sato, ...") is cut to the first one.
2. Ids: the first DOI (`doi:`, `https://doi.org/`, bare `10.xxxx/...`) and the first arXiv id
   (`arXiv:2104.06921`, `arxiv.org/abs/...`, `[2008.01442]`, a bare new-style id such as
   `1812.09815` when its YYMM is a real arXiv month, old style `hep-ph/0511200`, also inside
   `[arXiv:1005.0066 [hep-ph]]` and arXiv DOIs 10.48550/arXiv.*). Ids, URLs, MR numbers and
   bracketed notes with digits are removed before anything else is read, so that no year or title
   is ever taken from them.
3. The title, by the first rule that fits:
   - a quoted title (“...”, "...", ``...'', ‘...’): authors before it, venue after it (IEEE, AIP);
   - surname-first author lists (`Author, A. B.`, `Author A. B.`, `Author AB`), then what follows
     them: `2011, Journal, 734, 120` (AAS/MNRAS: a title only for books, software, reports),
     `2018. Title. In ...` (AAAI), `(2010). Title. Journal` (APA, PLOS), `: Title. Venue (2021)`
     (Springer LNCS), ` Title. Journal 45 (1997)` (AMS alpha, Nature, Vancouver);
   - name-first author lists (`A. B. Author, C. Author, and D. Author`, `Alex M Lamb and ...`):
     `Authors. [2018.] Title. Venue` (ML/CS, ACL) or `Authors, Title, Venue` (physics, AMS,
     Elsevier), where a venue that starts right after the authors means no title (APS: "Phys.
     Rev. Lett. 77, 3865 (1996)").
   The title ends at the first sentence end (". " before a capital; "I."/"II."/"2." part numbers
   are kept), at the first venue-like comma segment (journal + volume, "in ...", "vol.", a
   publisher, a year...) or at a parenthesis holding a year or a publisher. A title that still
   looks like names, a venue, an id or a page range is dropped: better no title than a wrong one.
4. The year: where the style puts it (after the authors in author-year styles; else in the part
   after the title: a parenthesised year first, then a year ending a sentence, then the last
   year), never inside page ranges, after vol./no./pp., or inside ids; and only when plausible,
   1600 <= year <= citing year + 1 (the current year + 1 when the citing year is unknown).
"""
from __future__ import annotations

import html
import re
import unicodedata
from dataclasses import dataclass, field
from datetime import date

from importance.ingest.readers.common import author, clean_ws, norm_doi

# ---------------------------------------------------------------------------- character classes

_UP = "".join(c for c in map(chr, range(0x10000)) if c.isalpha() and c.isupper())
_LO = "".join(c for c in map(chr, range(0x10000)) if c.isalpha() and c.islower())
U = f"[{re.escape(_UP)}]"           # an uppercase letter (any script)
L = f"[{re.escape(_LO)}]"           # a lowercase letter
A = r"[^\W\d_]"                     # any letter
# Every pattern below is compiled once, here: an inline re.match(rf"...{U}...") formats and hashes
# a pattern of ~3,000 characters at each call (≈ 6 µs, more than most matches cost). At ≈ 1B
# references in a 33M-paper corpus every microsecond a reference is ≈ 0.3 CPU-hours.

MIN_YEAR = 1600


def max_year(citing_year: int | None) -> int:
    """The latest plausible year of a cited work: the citing paper's year + 1 (in press), else
    the current year + 1."""
    return (citing_year if citing_year else date.today().year) + 1


def plausible_year(year, citing_year: int | None = None) -> int | None:
    """`year` when MIN_YEAR <= year <= max_year(citing_year), else None."""
    try:
        y = int(year)
    except (TypeError, ValueError):
        return None
    return y if MIN_YEAR <= y <= max_year(citing_year) else None


@dataclass
class ParsedReference:
    authors: list[dict] = field(default_factory=list)
    title: str | None = None
    venue: str | None = None
    year: int | None = None
    doi: str | None = None
    arxiv: str | None = None
    style: str = "unknown"          # the rule that read the string (docs/METHODS.md §1.2.1)


# ---------------------------------------------------------------------------- clean-up

_PLACEHOLDER = re.compile(r"\{\{(?:formula|cite|figure|table|ref)[^}]*\}\}")
_TEX_SKIP = re.compile(r"(?:\d*\.?\d+\s?em\s*(?:plus|minus)\s*)+\d*\.?\d+\s?em")
_WS = re.compile(r"\s+")
_UMLAUT = re.compile(r'(\w) ?"([aouAOU]) ?(\w)')


def clean_raw(raw: str) -> str:
    t = html.unescape(raw or "")
    if "{{" in t:
        t = _PLACEHOLDER.sub(" ", t)
    if "plus" in t or "minus" in t:  # every _TEX_SKIP match holds one
        t = _TEX_SKIP.sub(" ", t)
    t = t.replace("~", " ").replace("``", "“").replace("''", "”").replace("---", "—").replace("--", "–")
    t = t.replace("\\&", "&").replace("{", "").replace("}", "")
    # BibTeX umlaut residue: Schr "o der -> Schröder
    if '"' in t:
        t = _UMLAUT.sub(lambda m: m.group(1) + unicodedata.normalize("NFC", m.group(2) + "\u0308") + m.group(3), t)
    return _WS.sub(" ", t).strip()


# A second work in the same entry: "...263 [hep-th/9207024]; “A tour ...”" or "...30; M. Sato and ...".
_SECOND_WORK = re.compile(rf"(?<=[\d\])])\s*;\s+(?=[“\"]|(?:{U}{L}?\.[\s-]*)+{U}|{U}{L}+\.\s)")


def first_work(text: str) -> str:
    m = _SECOND_WORK.search(text) if ";" in text else None
    return text[:m.start()] if m else text


# ---------------------------------------------------------------------------- ids

_DOI = re.compile(r"(?:doi\s*:?\s*)?(?:https?://(?:dx\.)?doi\.org/)?(10\.\d{4,9}/[^\s\"“”<>]+)", re.I)
_ARCHIVES = ("hep-ph|hep-th|hep-ex|hep-lat|gr-qc|astro-ph|cond-mat|quant-ph|nucl-th|nucl-ex|math-ph|math|"
             "physics|nlin|q-bio|q-fin|cs|stat|chao-dyn|solv-int|alg-geom|dg-ga|funct-an|q-alg|patt-sol|"
             "adap-org|comp-gas|chem-ph|atom-ph|acc-phys|ao-sci|bayes-an|cmp-lg|mtrl-th|plasm-ph|supr-con")
_ARXIV_OLD = re.compile(rf"(?<![\w-])({_ARCHIVES})(?:\.[A-Za-z]{{2}})?/(\d{{7}})(?:v\d+)?(?!\d)", re.I)
_NEW_ID = r"(\d{4})\.(\d{4,5})(?:v\d+)?(?![\d])"
_ARXIV_EXPLICIT = re.compile(rf"(?:arxiv\s*:?\s*|arxiv\.org/(?:abs/|pdf/)?|abs/){_NEW_ID}", re.I)
_ARXIV_BARE = re.compile(rf"(?<![\w./:-]){_NEW_ID}(?!\.\d)")
_DIGIT_DOT_DIGIT = re.compile(r"\d\.\d")  # in every _ARXIV_BARE match; a pattern that starts with a class scans fast
_URL = re.compile(r"(?:https?://|www\.)\S+|\b[\w.-]+\.(?:org|com|net|edu|gov|io)/\S*", re.I)
_MR = re.compile(r"\bMR\s*(?:MR\s*)?\d{5,8}(?:\s*\(\d{2,4}[a-z]?:\d+\))?")
_BRACKET_DIGITS = re.compile(r"\[[^\[\]]*\d[^\[\]]*\]")
_SUBJECT_CLASS = re.compile(rf"\[\s*(?:{_ARCHIVES})(?:\.[\w-]*)?\s*\]", re.I)  # "[hep-lat]", "[math.FA]"
_LABELS = re.compile(r"\bURL\b.*$|\[Online\]\.?|\bAvailable(?: online)?\s*:|\bascl:\d{4}\.\d{3,4}|"
                     r"\bISBN[:\s]*[\dX -]{10,17}|\barXiv\s*:|\bdoi\s*:|\bDOI\b", re.I)
_LABEL_WORDS = ("url", "[online]", "available", "ascl:", "isbn", "arxiv", "doi")  # one is in every _LABELS match

# Letters that re.I matches to ASCII letters and str.lower() does not turn into them
_RE_I_FOLDS = (("ſ", "s"), ("ı", "i"), ("i\u0307", "i"))


def _folded(text: str) -> str:
    """`text` lowercased for substring guards of re.I patterns (a pattern that needs a literal the
    text lacks cannot match: the guard skips the scan, the result is the same)."""
    low = text.lower()
    if not low.isascii():
        for odd, plain in _RE_I_FOLDS:
            low = low.replace(odd, plain)
    return low


def _valid_new_id(yymm: str, number: str) -> bool:
    """A new-style arXiv id names a real month: 0704..1412 with 4 digits, 1501.. with 5."""
    yy, mm = int(yymm[:2]), int(yymm[2:])
    if not 1 <= mm <= 12:
        return False
    return (7 <= yy <= 14 and (yy > 7 or mm >= 4)) if len(number) == 4 else yy >= 15


def find_arxiv(text: str) -> str | None:
    """The first arXiv id written in `text`, normalised: 2104.06921, hep-ph/0511200 (version and
    old-style subject class dropped)."""
    low = _folded(text)
    for rx, could_match in ((_ARXIV_EXPLICIT, "arxiv" in low or "abs/" in low), (_ARXIV_OLD, "/" in text),
                            (_ARXIV_BARE, _DIGIT_DOT_DIGIT.search(text))):
        if not could_match:
            continue
        for m in rx.finditer(text):
            if rx is _ARXIV_OLD:
                return f"{m.group(1).lower()}/{m.group(2)}"
            if _valid_new_id(m.group(1), m.group(2)):
                return f"{m.group(1)}.{m.group(2)}"
    return None


def _doi_of(match: re.Match) -> str | None:
    d = match.group(1)
    while d and d[-1] in ".,;:":
        d = d[:-1]
    for o, c in ("()", "[]"):  # a closing bracket after the DOI belongs to the text around it
        while d.endswith(c) and d.count(c) > d.count(o):
            d = d[:-1]
    return norm_doi(d)


def find_ids(text: str) -> tuple[str | None, str | None, str]:
    """(doi, arxiv id, the text with ids, URLs, MR numbers and bracketed numeric notes removed)."""
    doi, arxiv = None, None
    # Each removal replaces a span with a space, so a literal missing from `text` is missing from
    # every later `rest`: the guards below hold for all of them.
    low = _folded(text)
    m = _DOI.search(text) if "10." in text else None
    if m:
        doi = _doi_of(m)
        if doi and doi.startswith("10.48550/arxiv."):
            arxiv = find_arxiv(doi.split("arxiv.", 1)[1])
    arxiv = arxiv or find_arxiv(text)
    rest = _DOI.sub(" ", text) if m else text
    if "/" in text or "www" in low:
        rest = _URL.sub(" ", rest)
    if "MR" in text:
        rest = _MR.sub(" ", rest)
    if "[" in text:
        rest = _SUBJECT_CLASS.sub(" ", rest)
        while True:  # nested brackets: "[arXiv:1005.0066 [hep-ph]]"
            nxt = _BRACKET_DIGITS.sub(" ", rest)
            if nxt == rest:
                break
            rest = nxt
    if "arxiv" in low or "abs/" in low:
        rest = _ARXIV_EXPLICIT.sub(" ", rest)
    if "/" in text:
        rest = _ARXIV_OLD.sub(" ", rest)
    if _DIGIT_DOT_DIGIT.search(text):
        rest = _ARXIV_BARE.sub(lambda x: " " if _valid_new_id(x.group(1), x.group(2)) else x.group(0), rest)
    if any(w in low for w in _LABEL_WORDS):
        rest = _LABELS.sub(" ", rest)
    return doi, arxiv, tidy(rest)


_EMPTY_BRACKETS = re.compile(r"\(\s*[,.;]?\s*\)|\[\s*\]")
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([,.;:)\]])")
_REPEATED_SEP = re.compile(r"([,;])(?:\s*[,;])+")
_COMMA_PERIOD = re.compile(r",\s*\.")
_DOUBLE_PERIOD = re.compile(r"\.\s*\.(?!\.)")


def tidy(text: str) -> str:
    """Punctuation left behind by removed ids: ', ,' -> ',', '( )' -> '', ' .' -> '.'."""
    # After the first line the only whitespace is " ", so each pattern has a literal it needs (in
    # `t`, or in `t` without spaces): a pattern whose literal is missing is not run.
    t = _WS.sub(" ", text)
    if "(" in t or "[" in t:
        t = _EMPTY_BRACKETS.sub(" ", t)
    if any(" " + c in t for c in ",.;:)]"):
        t = _SPACE_BEFORE_PUNCT.sub(r"\1", t)
    packed = t.replace(" ", "")
    if ",," in packed or ",;" in packed or ";," in packed or ";;" in packed:
        t = _REPEATED_SEP.sub(r"\1", t)
        packed = t.replace(" ", "")
    if ",." in packed:
        t = _COMMA_PERIOD.sub(".", t)
        packed = t.replace(" ", "")
    if ".." in packed:
        t = _DOUBLE_PERIOD.sub(".", t)
    if "  " in t:
        t = _WS.sub(" ", t)
    return t.strip(" ,;")


# ---------------------------------------------------------------------------- names

_PARTICLES = {"van", "von", "der", "den", "de", "del", "della", "dei", "di", "da", "do", "dos", "das", "du",
              "des", "la", "le", "lo", "ter", "ten", "zu", "zur", "y", "e", "bin", "ibn", "al", "el", "'t", "d'",
              "l'", "St.", "Mac", "Mc"}
_SUFFIXES = {"Jr.", "Jr", "Sr.", "Sr", "II", "III", "IV", "2nd", "3rd"}
_GROUP_WORDS = {"collaboration", "collab.", "team", "group", "consortium", "project", "authors"}
_NOT_FIRST = {"A", "An", "The", "On", "In", "Of", "For", "To", "From", "With", "Towards", "Toward", "Using",
              "And", "Or", "Is", "Are", "How", "What", "When", "Why", "Where", "New", "About", "Beyond", "Via"}
_NOT_FIRST_IN_VENUE = {"A", "An", "On", "Of", "For", "To", "From", "With", "Towards", "Toward", "Using", "And", "Or",
                       "Is", "Are", "How", "What", "When", "Why", "Where", "About", "Beyond", "Via"}
_INIT_TOKEN = re.compile(rf"^{U}{L}?(?:\.-?|-)(?:(?:{U}|{L}){L}?(?:\.-?|-))*$")  # J. / J.-L. / A.E. / S-E.
_CAPS_TOKEN = re.compile(rf"^{U}{{1,3}}$")
_WORD_TOKEN = re.compile(rf"^(?:[dlDLO]['’])?{U}(?:{A}|['’\-])+$")
_ET_AL = re.compile(r",?\s*\bet\s*al\b\.?,?\s*$", re.I)
_AND = re.compile(r"\s*(?:,\s*)?(?:\band\b|&)\s*")
_LEADING_AND = re.compile(r"^(?:and|&)\s+")
_GLUED_INITIAL = re.compile(rf"\.(?={U})")
_LABEL_IN_NAME = re.compile(r"\s*[\[(][^\W\d_][\w\s-]{0,30}[\])]\s*")
_LOWER_INITIAL = re.compile(rf"{L}\.")


def _tokens(part: str) -> list[str]:
    # glued initials "A.Yahalom", "J.A. Wheeler" -> separate tokens
    return _GLUED_INITIAL.sub(". ", part).split()


def person_kind(part: str) -> str | None:
    """'strong' for a name with initials ("J. L. Brédas", "Alex M Lamb"), 'weak' for a name of
    capitalised words only ("Yann Ollivier", a collaboration), None when it is no name."""
    if "[" in part or "(" in part:
        part = _LABEL_IN_NAME.sub(" ", part)
    part = part.strip(" ,")  # "[LHCb]", "(ALICE)"
    toks = _tokens(part)
    if not 1 <= len(toks) <= 6 or toks[0] in _NOT_FIRST:
        return None
    strong = words = 0
    for i, t in enumerate(toks):
        if _INIT_TOKEN.match(t):
            strong += 1
        elif t in _PARTICLES or t in _SUFFIXES or _LOWER_INITIAL.fullmatch(t):
            continue  # "da Silva", "Goddard III", "D. A. d. S. Filho"
        elif t.lower() in _GROUP_WORDS and i > 0:
            words += 1
        elif _WORD_TOKEN.match(t):
            words += 1
            if _CAPS_TOKEN.match(t) and len(toks) > 1 and i < len(toks) - 1:
                strong += 1  # "Benjamin IP Rubinstein", "R Devon Hjelm"
        elif _CAPS_TOKEN.match(t) and len(toks) > 1:
            strong += 1      # "Alex M Lamb"
        else:
            return None
    if not words:
        return None
    return "strong" if strong else "weak"


def names_in(seg: str) -> tuple[list[str], bool] | None:
    """The names of one comma segment of an author list ("A. B. Author", "and C. Author",
    "D. Author et al.", "X and Y"), and whether the segment closes the list (it holds "and", "&"
    or "et al."); None when the segment is not made of names."""
    s = seg.strip()
    et_al = _ET_AL.search(s) if "al" in s.lower() else None  # every _ET_AL match holds "al"
    closes = bool(et_al)
    if et_al:  # the pattern ends at $: its one match is the end of s
        s = s[:et_al.start()] + s[et_al.end():]
    s = s.strip()
    lead = _LEADING_AND.match(s)
    if lead:
        closes, s = True, s[lead.end():]
    parts = [p for p in (_AND.split(s) if "and" in s or "&" in s else [s]) if p.strip()]
    if len(parts) > 1:
        closes = True
    if not parts:
        return ([], closes) if closes else None
    kinds = [person_kind(p) for p in parts]
    if any(k is None for k in kinds):
        return None
    return parts, closes


def _is_strong(name: str) -> bool:
    return person_kind(name) == "strong"


def person(name: str) -> dict:
    """An author() dict from a name-first name: family = the last word (with its particles)."""
    toks = [t for t in _tokens(name) if t not in _SUFFIXES]
    if any(t.lower() in _GROUP_WORDS for t in toks[1:]) or len(toks) == 1:
        return author(" ".join(toks), None)
    i = len(toks) - 1
    while i > 0 and toks[i - 1] in _PARTICLES:
        i -= 1
    return author(" ".join(toks[i:]), " ".join(toks[:i]) or None)


# ---------------------------------------------------------------------------- venues and years

_YEAR = r"(?:1[6-9]\d\d|20\d\d)"
_VENUE_MARKER = re.compile(
    r"^(?:in\b|in:|edited\s+by\b|eds?\b\.?|\(eds?\.?\)|vols?\b\.?|volume\b|no\.|nos?\.\s|pp\b\.?|p\.\s|pages?\b|"
    r"chap(?:ter)?\b|sect?(?:ion)?\b\.?|art\.|paper\s+no\b|arxiv|e-?prints?\b|preprint\b|ph\.?\s?d\b|master\b|"
    r"master's|thesis\b|dissertation\b|diploma\b|habilitation\b|tech(?:nical)?\.?\s*rep|report\b|rep\.|"
    r"accessed\b|available\b|retrieved\b|url\b|submitted\b|to appear\b|accepted\b|unpublished\b|in press\b|"
    r"in preparation\b|private communication\b|personal communication\b|talk\b|presented\b|lecture notes\b|"
    r"npj\b|pearson\b|zenodo\b|github\b|software\b|(?-i:version)\b|v\d|release\b|ibid\b|springer\b|wiley\b|"
    r"elsevier\b|academic press\b|world scientific\b|crc press\b|dover\b|north[- ]holland\b|birkh|pergamon\b|"
    r"addison[- ]wesley\b|mcgraw[- ]hill\b|prentice[- ]hall\b|taylor\s*(?:&|and)\s*francis\b|siam\b|ams\b|"
    r"amer\. math|american mathematical society\b|cambridge univ|oxford univ|princeton univ|mit press\b|"
    r"university press\b|[\w-]+ university press\b|curran\b|ieee\b|acm\b|pmlr\b|jmlr\.org\b|openreview\b|"
    r"usenix\b|aaai press\b|iop\b|aip\b|ios press\b|nih public|john wiley\b|wspc\b|de gruyter\b|kluwer\b|"
    r"plenum\b|freeman\b|clarendon\b|\(|\d|new york\b|berlin\b|london\b|amsterdam\b|cham\b|heidelberg\b|"
    r"providence\b|boston\b)",
    re.I)
_SERIES = re.compile(r"\b(?:Lecture Notes|Series|Texts in|Monographs|Library|Surveys in|Studies in|"
                     r"Proceedings|Proc\.|Conference|Symposium|Workshop|Journal|Transactions|Letters|Annals|"
                     r"Bulletin|Review|Reviews|Magazine|Notices)\b")
_YEARISH = re.compile(rf"^\(?(?:(?:[A-Z][a-z]{{2,8}}\.?|\d{{1,2}})\s+)?(?:\d{{1,2}},?\s+)?{_YEAR}[a-z]?\)?\.?$")
_ABBREV = re.compile(rf"^(?:{U}{L}{{0,7}}\.|{L}{{1,5}}\.|{U}{L}{{0,7}}\.{U}{L}{{0,7}}\.?)$")
_CONNECT = {"of", "the", "and", "for", "in", "on", "de", "des", "der", "du", "und", "für", "et", "&", "d'", "la",
            "le", "di", "a", "an", "to", "y", "i", "fur", "del", "della", "van", "voor"}
_JOURNAL_VOL = re.compile(
    rf"^(?P<name>[^()\[\]]*?[^\W\d_.]\.?)(?:\s+|(?<=\.))"
    rf"(?P<vol>\d{{1,5}}[A-Za-z]?|[A-Z]{{1,2}}\d{{1,5}}|[IVXLC]{{1,6}})(?!\w|\.\d)"
    rf"(?:\s*\(\d{{1,4}}(?:[-–]\d{{1,4}})?\))?(?:\s*\({_YEAR}[a-z]?\))?"
    rf"(?:$|\s*[,:;.\d\[(]|\s+(?:no|nos|pp?|vol)\b).*$")
_JOURNAL_YEAR = re.compile(rf"^(?P<name>[^()\[\]]*?[^\W\d_.]\.?)\s*\({_YEAR}[a-z]?\)(?:[\s,.].*)?$")


def _venue_words(name: str) -> bool:
    """A journal name: capitalised words, abbreviations ("Phys.", "J."), connectors; lowercase
    words only after an abbreviation ("Phys. status solidi", "Invent. math.")."""
    toks = name.replace("—", " ").replace(":", " ").split()
    if not 1 <= len(toks) <= 12 or toks[0] in _NOT_FIRST_IN_VENUE:
        return False
    abbrev = False
    for t in toks:
        if _ABBREV.match(t):
            abbrev = True
        elif t.lower() in _CONNECT or t in ("-", "–", "/"):
            continue
        elif t[0].isupper() or t[0].isdigit():
            continue
        elif not abbrev:
            return False
    return True


_JOURNAL_ABBREV = re.compile(rf"^{U}{L}{{1,6}}\.$|^{L}{{2,5}}\.$")  # "Phys.", "Rev.", "Commun.", "math."
_ABBREV_RUN = re.compile(rf"^(?:{U}{L}{{0,7}}\.\s*){{2,}}")
_INITIALS_SURNAME = re.compile(rf"(?:{U}\.\s*)+{U}{L}+\.\s*")
_SENTENCE_IN_NAME = re.compile(rf"{A}{{5,}}\.\s+{U}{L}+(?:\s|$)")
_NAME_ENDS_SENTENCE = re.compile(rf"{A}{{5,}}\.$")


def abbreviations_only(seg: str) -> bool:
    """'Phys. Rev.', 'Nucl. Phys. Proc. Suppl.', 'J. Phys. B', 'Math. Nachr': mostly abbreviated
    words, at least one of them a short journal abbreviation (initials alone are names)."""
    toks = seg.split()
    if not toks or len(toks) > 6 or any(len(t) > 14 for t in toks):
        return False
    short = sum(1 for t in toks if _JOURNAL_ABBREV.match(t))
    n = sum(1 for t in toks if _ABBREV.match(t))
    return short >= 1 and n * 2 >= len(toks)


def abbreviation_run(text: str) -> bool:
    """The text starts with two or more abbreviations, one a short journal word: "Phys. Rev. D
    (3) 55", "J. Phys. B" (not initials and a surname: "Q. H. Nguyen.")."""
    run = _ABBREV_RUN.match(text.strip())
    return bool(run) and any(_JOURNAL_ABBREV.match(t) for t in run.group(0).split()) \
        and not _INITIALS_SURNAME.fullmatch(run.group(0))


def journal_with_volume(seg: str, relaxed: bool = False) -> bool:
    """'Phys. Rev. D 104 (2021)', 'Nature 574', 'Surveys in Differential Geometry X (2008)';
    a name with only a year ('Publ. Math. Inst. Hautes Études Sci. (2001)') needs an abbreviation.
    `relaxed` (a segment after the title's first one): lowercase words allowed ('Nature
    communications 5'). A sentence end inside the name ("... Electron. Entropy 2022") means the
    segment starts with a title, not a journal."""
    s = seg.strip()
    m = _JOURNAL_VOL.match(s)
    if m and (_SENTENCE_IN_NAME.search(m.group("name"))
              or (_NAME_ENDS_SENTENCE.search(m.group("name")) and len(m.group("name").split()) >= 6)):
        return False  # "... Electron. Entropy 2022", "... Gauge Theories. 1. Phys. Rev.": a title first
    if m and (_venue_words(m.group("name")) or relaxed and s[:1].isupper() and len(m.group("name").split()) <= 8):
        return True
    m = _JOURNAL_YEAR.match(s)
    return bool(m) and _venue_words(m.group("name")) and any(_ABBREV.match(t) for t in m.group("name").split())


def title_case(seg: str) -> bool:
    toks = seg.split()
    return 1 <= len(toks) <= 8 and all(t[0].isupper() or t[0].isdigit() or t.lower() in _CONNECT or _ABBREV.match(t)
                                       for t in toks)


_ENDS_WITH_YEAR = re.compile(rf"\s{_YEAR}[a-z]?\)?$")
_YEAR_IN_PARENS = re.compile(rf"\([^()]*{_YEAR}[^()]*\)")
_EDITION = re.compile(r"^(?:\w+|\d+(?:st|nd|rd|th))\s+(?:ed\.|edn\.?|edition)", re.I)
_PAGES_VOL_NO = re.compile(r"^(?:pp?\b|vol|no\.)", re.I)
_FIRST_SENTENCE_END = re.compile(r"(?<=[^\W\d_]{3})\.\s")


def is_venue_segment(seg: str, nxt: str | None = None) -> bool:
    """A comma segment that starts the venue part of a reference (see module docstring)."""
    s = seg.strip()
    if not s.strip(" ."):
        return True
    if _VENUE_MARKER.match(s) or _YEARISH.match(s):
        return True
    if journal_with_volume(s, relaxed=True) or abbreviations_only(s) or abbreviation_run(s):
        return True
    if _ENDS_WITH_YEAR.search(s):  # "Algebraic geometry—Santa Cruz 1995", "LICS 2012"
        return True
    if "(" in s and _YEAR_IN_PARENS.search(s):  # "Topics in ... (Irvine, CA, 1996)": proceedings
        return True
    if _EDITION.match(s):  # "second ed."
        return True
    if _SERIES.search(s) and title_case(s):
        return True
    if nxt is not None and title_case(s):
        n = nxt.strip()
        if n[:1].isdigit() or _YEARISH.match(n.strip(" .")) or _PAGES_VOL_NO.match(n):
            return True  # "Machine Learning, 47, 235-256": a journal name before its volume
    return False


def starts_with_venue(text: str) -> bool:
    """The text begins with a venue ("Phys. Rev. Lett. 77, ...", "Nucl. Phys. Proc. Suppl., ...",
    "arXiv preprint", "In Proceedings ...") rather than a title."""
    t = text.strip()
    if not t:
        return True
    segs = split_top(t)
    first = segs[0].strip()
    if _VENUE_MARKER.match(first) and not first.startswith("("):
        return True
    head = _FIRST_SENTENCE_END.split(first, 1)[0]  # the first sentence of the first segment
    if journal_with_volume(first) or abbreviations_only(head) or abbreviations_only(first):
        return True
    if abbreviation_run(first):
        return True
    # "Machine Learning, 47, 235-256": a title-case first segment before a volume (not when the
    # segment already holds a sentence end: "Markov Decision Processes. Wiley, 2005.")
    return (len(segs) > 1 and head == first and title_case(first) and is_venue_segment(first, segs[1])
            and not _YEARISH.match(first))


_TOP_MARKS = re.compile(r"[(\[)\]“”,]")


def split_top(text: str) -> list[str]:
    """Split at commas outside brackets, parentheses and quotes."""
    if "(" not in text and "[" not in text and "“" not in text:
        return text.split(",")  # nothing opens a group: every comma is at the top
    out, depth, quote, start = [], 0, False, 0
    for m in _TOP_MARKS.finditer(text):  # only the characters that matter, not every one
        c = m.group()
        if c in "([":
            depth += 1
        elif c in ")]":
            if depth:
                depth -= 1
        elif c in "“”":
            quote = c == "“"
        elif depth == 0 and not quote:  # a comma at the top
            out.append(text[start:m.start()])
            start = m.end()
    out.append(text[start:])
    return out


_YEAR_TOKEN = re.compile(rf"(?<![\w./:–-])({_YEAR})([a-z])?(?![\w/]|[-–]\d|[.:,]\d)")
_OPEN_PAREN_END = re.compile(r"\(\s*$")
_SENTENCE_END_START = re.compile(r"\.(?:\s|$)|$")
_PAGE_BEFORE = re.compile(r"(?<![\d–-])\b\d{1,4},\s*$")
_NOT_A_YEAR_BEFORE = re.compile(r"(?:\b(?:vols?|no|nos|pp|p|pages?|volume|art|id|number|issue)\.?\s*|[–-]\s*)$", re.I)


def find_year(text: str, citing_year: int | None) -> int | None:
    """The year of a venue part (module docstring, step 4)."""
    t = text or ""
    if "[" in t:
        t = _BRACKET_DIGITS.sub(" ", t)
    cands = []
    for m in _YEAR_TOKEN.finditer(t):
        if _NOT_A_YEAR_BEFORE.search(t[max(0, m.start() - 12):m.start()]):
            continue
        y = plausible_year(m.group(1), citing_year)
        if y is None:
            continue
        before, after = t[:m.start()], t[m.end():]
        pure = after.startswith(")") and bool(_OPEN_PAREN_END.search(before))
        paren_end = after.startswith(")")
        sentence_end = bool(_SENTENCE_END_START.match(after))
        page_like = bool(_PAGE_BEFORE.search(before))  # "Entropy 2022, 24, 1721."
        cands.append((y, pure, paren_end, sentence_end, page_like))
    if len(cands) > 1 and not all(c[4] for c in cands):
        cands = [c for c in cands if not c[4]]
    for key in (1, 3):  # a year alone in parentheses, then one ending a sentence, then the last one
        for c in cands:
            if c[key]:
                return c[0]
    return cands[-1][0] if cands else None


# ---------------------------------------------------------------------------- title boundaries

_ABBREV_WORDS = {"vs", "e.g", "i.e", "etc", "al", "fig", "figs", "eq", "eqs", "no", "vol", "st", "dr", "mr", "mrs",
                 "ms", "prof", "jr", "sr", "inc", "ltd", "co", "cf", "approx", "ca", "resp", "viz", "nr"}
_PART_NO = re.compile(r"(?:[IVX]{1,4}|\d{1,2})\.(?=\s|$)")
_STOP = re.compile(r"([.?!])(?=\s|$)")
_LAST_TOKEN = re.compile(r"(\S+)$")
_INITIALS_TOKEN = re.compile(rf"(?:{U}{L}?\.)*{U}{L}?")


def sentence_end(text: str, comma_style: bool = False) -> int:
    """Index just after the punctuation that ends the first sentence of `text` (len(text) when
    there is none): ". " before a capital, a digit, a quote or a venue word; "?"/"!" before a
    capital. Periods of initials and abbreviations ("vs.", "e.g.") end nothing; a part number
    ("groups. II. Completions") stays in the sentence. In the comma styles, where a comma ends the
    title, a period ends it only before a venue ("... graph theory. World Scientific, 1991")."""
    skip = -1
    for m in _STOP.finditer(text):
        p = m.start()
        if p < skip:
            continue
        after = text[m.end():].lstrip()
        at = len(text) - len(after)
        if m.group(1) == ".":
            tok = _LAST_TOKEN.search(text[:p])
            tok = tok.group(1) if tok else ""
            if _INITIALS_TOKEN.fullmatch(tok) or tok.lower().rstrip(".") in _ABBREV_WORDS:
                continue  # "M.D. Kaplan", "vs."
        if not after:
            return p + 1
        if after[0].islower() and not _VENUE_MARKER.match(after):
            continue
        part = _PART_NO.match(after) if m.group(1) == "." else None
        if part:
            end = at + part.end()
            rest = text[end:].lstrip()
            if not rest or starts_with_venue(rest):
                return end
            skip = end
            continue
        if comma_style and not _venue_follows(after):
            continue
        return p + 1
    return len(text)


def _venue_follows(after: str) -> bool:
    """What follows a period is a venue: it starts like one, or its first segment is followed by a
    year (a publisher: "Pearson Education, 2014")."""
    if starts_with_venue(after):
        return True
    segs = split_top(after)
    return len(segs) > 1 and bool(_YEARISH.match(segs[1].strip(" .")))


_GROUP_LABEL_FIRST = re.compile(r"^[\[(][^\d\])]*[\])][\s,.;:]*")
_PUBLISHER_PAREN = re.compile(rf"\s\((?=[^()]*(?:{_YEAR}|Press|Publish|Springer|Wiley|Elsevier|Verlag|Univ|"
                              r"Scientific|Books|eds?\.|Ed\.|edited))")
# "In: ...", "in M.D. Kaplan and ... (editors)", "edited by", "(eds.)", ", volume 51 of ...", ", Vol. 7"
_IN_TITLE_CUT = re.compile(rf"\s(?:In:|in:|In\s(?=[A-Z\d])|in\s+(?:{U}\.\s?)+{U}|edited by|"
                           r"\((?:eds?\.?|editors?)\)|eds\.)|,\s*(?:volume|vol\.?)\s*[\dIVX]+\b")


def title_and_venue(rest: str, comma_style: bool = False) -> tuple[str | None, str]:
    """(title, venue text) of what follows the authors: the title up to the first sentence end,
    venue-like comma segment, year/publisher parenthesis or "In:"; None when a venue comes first."""
    rest = rest.strip(" ,;:")
    rest = _GROUP_LABEL_FIRST.sub("", rest)  # "et al. [LHCb], Phys. Rev. ...": a group label
    if not rest or starts_with_venue(rest):
        return None, rest
    region = rest[:sentence_end(rest, comma_style)]
    cut = len(region)
    m = _PUBLISHER_PAREN.search(region)
    if m:
        cut = m.start()
    m = _IN_TITLE_CUT.search(region[:cut])
    if m:
        cut = m.start()
    segs = split_top(region[:cut])
    after_region = rest[len(region):].lstrip(" .,") or None
    pos = 0
    for k, seg in enumerate(segs):
        if k > 0 and is_venue_segment(seg, segs[k + 1] if k + 1 < len(segs) else after_region):
            cut = pos - 1
            break
        pos += len(seg) + 1
    return clean_title(rest[:cut]), rest[cut:]


_PAGES = re.compile(r"\b\d+\s*\(\d+(?:[-–]\d+)?\)\s*[:,]\s*\d+|\b\d+\s*:\s*\d+(?:[-–]\d+)?\b|\bpp?\.\s*\d|"
                    rf"\({_YEAR}[a-z]?\)")


_ID_WORDS = re.compile(r"https?:|www\.|\bdoi\b|arxiv|e-print|preprint\b")
_NOT_A_TITLE_START = re.compile(r"^(?:and|&|in|in:|pp?\.|vol\.|et al)\b")
_INITIAL_FIRST = re.compile(rf"^{U}{L}?\.[\s,]")
_BOOK_SERIES = re.compile(r"Library|Series|Lecture Notes|Monographs")
_IN_PREFIX = re.compile(r"^[\s,.;:]*(?:In:|in:|In\b|in\b)?\s*")
_ARXIV_VENUE = re.compile(r"arxiv|e-?print|preprint", re.I)
_VENUE_NAME_END = re.compile(r"\s\(|[,:]")
_TRAILING_VOLUME = re.compile(r"\s+\d+[A-Za-z]?$")


def _looks_like_names(t: str) -> bool:
    """An author list rather than a title: names with initials, or several names ("X and Y",
    "X, Y"); a lone run of capitalised words ("Plasticity Theory", "Gravitation") is a title."""
    segs = [s for s in split_top(t) if s.strip()]
    got = [names_in(s) for s in segs]
    if not segs or any(g is None for g in got):
        return False
    names = [n for g in got for n in g[0]]
    if any(_is_strong(n) for n in names):
        return True
    # capitalised words only: a list when comma-separated ("John Smith, Jane Doe"); "Optical
    # Coherence and Quantum Optics" is a title
    return len(segs) > 1 and all(2 <= len(_tokens(n)) <= 4 for n in names)


def clean_title(t: str | None) -> str | None:
    """The title as read, or None when it does not look like a title (module docstring, step 3)."""
    if t is None:
        return None
    if t.count("“") != t.count("”"):  # "charmed cousins ... nonet,”": a title whose opening quote is lost
        return None
    t = _WS.sub(" ", t).strip(" ,;:.-–—")
    t = t.strip("“”\"‘’' ").strip(" ,;:.")
    letters = sum(map(str.isalpha, t))
    if letters < 3 or not any(map(str.islower, t)) or len(t) > 400:
        return None
    low = t.lower()
    if _ID_WORDS.search(low):
        return None
    if _NOT_A_TITLE_START.match(low):
        return None
    if _INITIAL_FIRST.match(t):  # titles do not start with an initial
        return None
    if _looks_like_names(t):
        return None
    if journal_with_volume(t) or abbreviations_only(t) or _PAGES.search(t):
        return None
    if title_case(t) and len(t.split()) <= 6 and _BOOK_SERIES.search(t):
        return None  # a book series, not the work
    for o, c in ("()", "[]", "“”"):
        if t.count(o) != t.count(c):
            return None
    if t.count('"') % 2:
        return None
    return t


def venue_of(text: str) -> str | None:
    """A short venue name from the venue part (best effort; not used for matching)."""
    t = _IN_PREFIX.sub("", text or "")
    if _ARXIV_VENUE.match(t) or "arxiv" in t.lower()[:30]:
        return "arXiv"
    seg = _VENUE_NAME_END.split(split_top(t)[0], 1)[0]
    seg = _TRAILING_VOLUME.sub("", seg)
    return clean_ws(seg.strip(" .;:")) or None


# ---------------------------------------------------------------------------- author lists

_PART_RX = r"(?:van't|van|von|der|den|de|del|della|di|da|do|dos|das|du|des|la|le|ter|ten|zu|y|bin|'t|d')"
_SW = rf"{U}(?:{A}|['’\-])*"
_SURN = rf"(?:{_PART_RX}\s+)*{_SW}(?:\s+(?:{_PART_RX}\s+)*{_SW}){{0,2}}"
_INITS = rf"{U}{L}?\.(?:\s?-?\s?(?:{U}|{L}){L}?\.)*"
_CAPS = rf"{U}{{1,3}}(?!{A})"
_GROUP = rf"(?:{_SW}\s+)*(?:Collaboration|Consortium|Team)"
_SF_ITEM = rf"(?:{_GROUP}|{_SURN},\s*{_INITS}|{_SURN}\s+{_INITS}|{_SURN}\s+{_CAPS})"
_SF_SEP = r"(?:\s*[,;]\s*(?:and\s+|&\s+)?|\s+(?:and|&)\s+)"
_SF_LIST = re.compile(rf"^(?:[—–-]{{1,3}}\.?|(?:{_SF_ITEM})(?:{_SF_SEP}(?:{_SF_ITEM}))*(?:,?\s+et\s+al\.?)?)")
_SF_ITEM_RX = re.compile(rf"(?:{_GROUP}|(?P<sa>{_SURN}),\s*(?P<ia>{_INITS})|(?P<sb>{_SURN})\s+(?P<ib>{_INITS})|"
                         rf"(?P<sc>{_SURN})\s+(?P<ic>{_CAPS}))")
_COLON_TAIL = re.compile(r"^\s*:\s")
_FULL_NAME_TAIL = re.compile(rf"^\.?\s+{_SW}\s+{U}")
_NAME_FIRST_TAIL = re.compile(rf"^\.?\s+(?:{_SW}(?:,|\.\s)|{_SW}\s+{_SW},|{_SW}\s+(?:and|&)\s+{U})")
_SPACE_THEN_TEXT = re.compile(r"^\s+\S")
_PERIOD_THEN_TEXT = re.compile(r"^\.\s+\S")
_VOLUME_OR_PAGE = re.compile(r"^(?:\d|[IVXLC]+\b|pp?\b|p\.)")
_NAME_SUFFIX = re.compile(r"^(?:Jr|Sr|III|II|IV)\.?(?:\s+|$)")
_HEAD_YEAR = re.compile(rf"^\s*\(?({_YEAR})[a-z]?\)?\s*[.,]\s+")
_TAIL_YEAR = re.compile(rf"^[.,]?\s*(?P<open>\()?(?P<year>{_YEAR})(?P<letter>[a-z])?(?(open)\))\s*(?P<sep>[.,:;]?)\s*")


def _surname_first_authors(block: str) -> list[dict]:
    out = []
    for m in _SF_ITEM_RX.finditer(block):
        if m.group("sa"):
            out.append(author(m.group("sa"), m.group("ia")))
        elif m.group("sb"):
            out.append(author(m.group("sb"), m.group("ib")))
        elif m.group("sc"):
            out.append(author(m.group("sc"), m.group("ic")))
        else:
            out.append(author(m.group(0), None))
    return out


def _surname_first(text: str, citing_year: int | None) -> ParsedReference | None:
    m = _SF_LIST.match(text)
    if not m or not m.group(0).strip():
        return None
    block, tail = m.group(0), text[m.end():]
    authors = _surname_first_authors(block) if not block.startswith(("—", "–", "-")) else []
    y = _TAIL_YEAR.match(tail)
    if y:
        year = plausible_year(y.group("year"), citing_year)
        rest = tail[y.end():]
        if y.group("sep") == "," and not y.group("open"):  # AAS / MNRAS: "2011, ApJ, 734, 120"
            return _aas(authors, year, rest)
        if y.group("sep") in (".", "") or y.group("open"):
            title, venue = title_and_venue(rest)
            return ParsedReference(authors, title, venue_of(venue), year, style="author-year")
        return None
    if _COLON_TAIL.match(tail):  # Springer LNCS "Author, A., Author, B.: Title. Venue (2021)"
        title, venue = title_and_venue(tail.lstrip(" :"))
        return ParsedReference(authors, title, venue_of(venue), find_year(venue, citing_year), style="lncs")
    ends_with_period = block.rstrip().endswith(".")
    items = list(_SF_ITEM_RX.finditer(block))
    if len(items) == 1 and not items[0].group("sa") and _FULL_NAME_TAIL.match(tail):
        return None  # "David J. Griffiths Introduction to ...": a full name, not "Surname I." + title
    if _NAME_FIRST_TAIL.match(tail):
        return None  # "Daniel A. Roberts, Sho Yaida": a name-first list, not "Surname A." items
    if (ends_with_period and _SPACE_THEN_TEXT.match(tail)) or _PERIOD_THEN_TEXT.match(tail):
        title, venue = title_and_venue(tail.lstrip(" ."))  # AMS alpha, Nature, Vancouver
        if title is None:  # "Jarrod R. McClean and ...": maybe a name-first list after all
            return None
        return ParsedReference(authors, title, venue_of(venue), find_year(venue, citing_year), style="surname-first")
    return None


def _aas(authors: list[dict], year: int | None, rest: str) -> ParsedReference:
    """AAS / MNRAS: after the year come the journal, volume and page (no title); a title only for
    books, software and reports: "2007, Numerical Recipes: The Art of ... (Cambridge ...)"."""
    segs = [s.strip() for s in split_top(rest)]
    first = segs[0] if segs else ""
    journal = (not first or first[:1].isdigit() or starts_with_venue(rest)
               or (len(segs) > 1 and _VOLUME_OR_PAGE.match(segs[1])))
    if journal:
        return ParsedReference(authors, None, venue_of(first) if first and not first[:1].isdigit() else None,
                               year, style="author-year")
    title, venue = title_and_venue(rest)
    return ParsedReference(authors, title, venue_of(venue), year, style="author-year")


def _name_first(text: str, citing_year: int | None, same_authors: bool) -> ParsedReference | None:
    segs = split_top(text)
    names: list[str] = []
    closed, period_rest, i = False, None, 0
    while i < len(segs):
        s = segs[i].strip()
        suffix = _NAME_SUFFIX.match(s)
        if suffix and names:  # "C.B. Morrey, Jr., On ..." / "Morrey, Jr. and L. Nirenberg"
            s = s[suffix.end():]
        if not s:
            i += 1
            continue
        head = _names_then_period(s)
        if head is not None:
            got, rest = head
            names += got
            period_rest = ", ".join([rest] + segs[i + 1:])
            break
        got = names_in(s)
        if got is None:
            break
        names += got[0]
        i += 1
        if got[1]:
            closed = True
            break
    if period_rest is not None:
        rest = period_rest
        style = "names-period"
    else:
        rest = ", ".join(segs[i:])
        style = "names-comma"
        if not closed and names:
            names, rest = _settle_open_list(names, segs, i)
    if not names and not same_authors:
        return None
    # "Authors. 2018. Title. In ..." (ACL) and "R. Agrawal. (1995). Title." put the year first
    y = _HEAD_YEAR.match(rest)
    head_year = plausible_year(y.group(1), citing_year) if y else None
    if y:
        rest = rest[y.end():]
    title, venue = title_and_venue(rest, comma_style=style == "names-comma")
    year = head_year or find_year(venue if title else rest, citing_year)
    return ParsedReference([person(n) for n in names], title, venue_of(venue), year, style=style)


def _settle_open_list(names: list[str], segs: list[str], i: int) -> tuple[list[str], str]:
    """An author list that no "and"/"et al." closes: keep names up to the last one with initials;
    names of capitalised words after it stay authors only when a title (not a venue) follows them
    ("P. Rokita, Łukasz Graczykowski, Distributed simulation ..." vs "O. Cornut, Dear ImGui,
    accessed: ...")."""
    strong = [k for k, n in enumerate(names) if _is_strong(n)]
    if strong:
        keep = strong[-1] + 1
    else:
        keep = 1 if 2 <= len(_tokens(names[0])) <= 4 else 0
    if keep < len(names):
        nxt = next((s for s in segs[i:] if s.strip()), "")
        if not is_venue_segment(nxt, None) and not starts_with_venue(nxt):
            keep = len(names)
    # the segments of the dropped names go back to the title
    kept, dropped = names[:keep], len(names) - keep
    non_empty = [k for k, s in enumerate(segs[:i]) if s.strip()]
    start = non_empty[len(non_empty) - dropped] if dropped else i
    return kept, ", ".join(segs[start:])


_PERIOD_BREAK = re.compile(r"\.(?:\s|$)")
_INITIALS_ONLY = re.compile(rf"(?:{U}{L}?[.-]-?)*{U}")
_TWO_LETTER_START = re.compile(rf"{U}{L}")
_ET_AL_END = re.compile(r"\bet\s+al$")
_ABBREVIATED_WORD_NEXT = re.compile(rf"^\s*{U}{L}{{0,7}}\.")


def _names_then_period(seg: str) -> tuple[list[str], str] | None:
    """"Alex M Lamb. Professor forcing ..." -> (["Alex M Lamb"], "Professor forcing ..."): a
    segment that holds the last names of a list and the end of the author block (a period that
    does not end an initial)."""
    for m in _PERIOD_BREAK.finditer(seg):
        before = seg[:m.start()].split()
        tok = before[-1] if before else ""
        prev = before[-2] if len(before) > 1 else ""
        # "V. Vu." and "Ping Li." end a name; "Yu. Manin", "Ph. Boucaud", "S-E. Takahasi" start one
        name_start = not prev or prev in ("and", "&") or prev.endswith(",")
        if _INITIALS_ONLY.fullmatch(tok) or (_TWO_LETTER_START.fullmatch(tok) and name_start) \
                or tok in ("Jr", "Sr", "St"):
            continue
        if tok.lower() == "al" and not _ET_AL_END.search(seg[:m.start()]):
            return None
        got = names_in(seg[:m.start() + 1] if tok.lower() == "al" else seg[:m.start()])
        if got is None or not got[0] and not got[1]:
            return None
        if len(before) == 1 and _ABBREVIATED_WORD_NEXT.match(seg[m.end():]):
            return None  # "Int. J. Mod. Phys.", "Sov. Phys. JETP": a journal, not a one-word name
        return got[0], seg[m.end():].strip()
    return None


# ---------------------------------------------------------------------------- quoted titles

_OPEN_QUOTE = re.compile(r"[“‘\"„«]")
_CLOSE = {"“": "”", "‘": "’", '"': '"', "„": "“", "«": "»"}
_CLOSE_RX = {c: re.compile(re.escape(c)) for c in _CLOSE.values()}
_CLOSING_FOLLOWER = re.compile(r"[\s,.;:)\]]|$")
_BOOK_BEFORE = re.compile(r"\b(?:in|In|of the volume|chapter)\s*$")
_YEAR_BEFORE_QUOTE = re.compile(rf"\(({_YEAR})[a-z]?\)\.?\s*$")
_SAME_AUTHORS = re.compile(r"^\s*(?:[,—–-]|_{2,})")


def _quoted(text: str, citing_year: int | None) -> ParsedReference | None:
    m = _OPEN_QUOTE.search(text)
    if not m:
        return None
    close = _CLOSE[m.group(0)]
    end = text.find(close, m.end())
    if m.group(0) in "\"‘":  # the same mark opens and closes (or ’ is an apostrophe): a closing one
        # follows a non-space and precedes a space, punctuation or the end
        end = next((x.start() for x in _CLOSE_RX[close].finditer(text[m.end():])
                    if not text[m.end() + x.start() - 1].isspace()
                    and _CLOSING_FOLLOWER.match(text[m.end() + x.end():m.end() + x.end() + 1])), -1)
        end = end + m.end() if end >= 0 else -1
    if end < 0 or end - m.end() < 3:
        return None
    before, inner, after = text[:m.start()], text[m.end():end], text[end + 1:]
    if _BOOK_BEFORE.search(before.strip()):  # a quoted book title after "in"
        return None
    before_year = _YEAR_BEFORE_QUOTE.search(before)
    names_part = before[:before_year.start()] if before_year else before
    names: list[str] = []
    for s in split_top(names_part.strip(" ,.:")):
        got = names_in(s) if s.strip() else None
        if got:
            names += got[0]
    title = clean_title(inner)
    year = find_year(after, citing_year) or (plausible_year(before_year.group(1), citing_year) if before_year else None)
    return ParsedReference([person(n) for n in names], title, venue_of(after), year, style="quoted")


# ---------------------------------------------------------------------------- entry point


def parse_reference(raw: str | None, citing_year: int | None = None) -> ParsedReference:
    """Split one reference string into authors, title, venue, year and ids (module docstring)."""
    text = clean_raw(raw or "")
    if not text:
        return ParsedReference()
    text = first_work(text)
    # "——, Title" / ", Title": the previous entry's authors
    same_authors = bool(_SAME_AUTHORS.match(text))
    doi, arxiv, body = find_ids(text)
    parsed = (_quoted(body, citing_year) or _surname_first(body, citing_year)
              or _name_first(body.lstrip(" ,—–-_"), citing_year, same_authors))
    if parsed is None:
        parsed = ParsedReference(year=find_year(body, citing_year))
    parsed.doi, parsed.arxiv = doi, arxiv
    if parsed.year is not None:
        parsed.year = plausible_year(parsed.year, citing_year)
    return parsed
