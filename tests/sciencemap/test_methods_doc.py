"""docs/METHODS.md answers every citation of it.

Code, tests, bench scripts, configs and docs cite the methods note as "METHODS.md §4", a range
"METHODS.md §6-7", a subsection "METHODS.md §4.3", or a named subsection
'METHODS.md §4 "Distances and margins"'. The note numbers its sections in its headings:
"## §4 Title" for a section, "### §4.3 Title" for a subsection of §4. A citation whose section
(or named subsection) is not there fails here, with the file and line that cites it.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

SCANNED_SUFFIXES = (".py", ".md", ".toml", ".cfg")

HEADING = re.compile(r"^(#{2,3}) §(\d+(?:\.\d+)?) +(\S.*?)\s*$")
NUMBER = r"\d+(?:\.\d+)?"
# "METHODS.md" and "§" may sit on two lines of a comment ("# METHODS.md\n# §3").
CITATION = re.compile(rf"METHODS\.md(?:\s|#)+§({NUMBER})(?:\s*[-–]\s*§?({NUMBER}))?(?:[ \t]+[\"“]([^\"”\n]+)[\"”])?")


def _norm(title: str) -> str:
    return " ".join(title.lower().split())


def headings(text: str) -> list[tuple[int, str, str]]:
    """(level, number, title) of the "## §N Title" / "### §N.M Title" lines outside code fences."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        m = None if fenced else HEADING.match(line)
        if m:
            out.append((len(m.group(1)), m.group(2), m.group(3)))
    return out


def doc_sections(text: str) -> dict[str, str]:
    """Section number ("4", "4.3") -> title."""
    return {number: title for _, number, title in headings(text)}


def citations(text: str) -> list[tuple[int, str, str | None, str | None]]:
    """(line, number, range end or None, quoted subsection name or None) per citation in text."""
    found = []
    for m in CITATION.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        found.append((line, m.group(1), m.group(2), m.group(3)))
    return found


def unresolved(text: str, sections: dict[str, str]) -> list[str]:
    """What the citations in `text` ask for that `sections` lacks, one message each."""
    names = {(num.split(".")[0], _norm(title)) for num, title in sections.items() if "." in num}
    missing = []
    for line, number, end, name in citations(text):
        wanted = [number]
        if end is not None:
            if "." in number or "." in end:
                wanted.append(end)
            else:
                wanted += [str(n) for n in range(int(number) + 1, int(end) + 1)]
        for w in wanted:
            if w not in sections:
                missing.append(f"line {line}: §{w} does not exist")
        if name is not None and (number.split(".")[0], _norm(name)) not in names:
            missing.append(f'line {line}: §{number} has no subsection "{name}"')
    return missing


def scanned_files(root: Path) -> list[Path]:
    """Tracked files plus new ones git does not ignore (so a citation fails before its commit)."""
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                             cwd=root, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the files to scan cannot be listed")
    files = [root / p for p in out.splitlines() if p.endswith(SCANNED_SUFFIXES)]
    skip = {(root / "docs" / "METHODS.md").resolve(), Path(__file__).resolve()}  # the note itself; this file's made-up examples
    return [f for f in files if f.is_file() and f.resolve() not in skip]


def github_anchor(title: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation and symbols dropped, spaces -> '-'."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


# ---------------------------------------------------------------- the checker itself

def test_checker_flags_a_missing_section_and_a_missing_name():
    sections = {"1": "One", "4": "Four", "4.3": "Distances and margins", "6": "Six", "7": "Seven"}
    ok = 'see METHODS.md §1, METHODS.md §4.3, METHODS.md §6-7 and METHODS.md §4 "Distances and  margins"'
    assert unresolved(ok, sections) == []
    assert [c[1] for c in citations("# as in METHODS.md\n# §6 and METHODS.md\n    §7")] == ["6", "7"]
    bad = 'METHODS.md §9\nMETHODS.md §5-6\nMETHODS.md §4.7\nMETHODS.md §4 "Margins"\nMETHODS.md §1 "Distances and margins"'
    assert unresolved(bad, sections) == [
        "line 1: §9 does not exist",
        "line 2: §5 does not exist",
        "line 3: §4.7 does not exist",
        'line 4: §4 has no subsection "Margins"',
        'line 5: §1 has no subsection "Distances and margins"',
    ]


# ---------------------------------------------------------------- the note and its citations

@pytest.fixture(scope="module")
def doc(repo_root) -> Path:
    return repo_root / "docs" / "METHODS.md"


def test_note_numbers_its_sections_in_order(doc):
    """§1, §2, ... consecutively; each subsection §N.1, §N.2, ... sits under its own §N."""
    assert doc.is_file(), f"{doc} is missing"
    top, current, sub = 0, None, 0
    for level, number, title in headings(doc.read_text(encoding="utf-8")):
        if level == 2:
            assert number == str(top + 1), f"heading §{number} {title}: expected §{top + 1}"
            top, current, sub = top + 1, number, 0
        else:
            assert number == f"{current}.{sub + 1}", f"heading §{number} {title}: expected §{current}.{sub + 1}"
            sub += 1
    assert top >= 7, "the note should have at least the sections §1-§7 the code cites"


def test_every_cited_section_exists(doc, repo_root):
    sections = doc_sections(doc.read_text(encoding="utf-8"))
    problems, n_citations = [], 0
    for path in scanned_files(repo_root):
        text = path.read_text(encoding="utf-8", errors="replace")
        n_citations += len(citations(text))
        problems += [f"{path.relative_to(repo_root)} {msg}" for msg in unresolved(text, sections)]
    assert n_citations > 0, "no 'METHODS.md §N' citation found at all: is the scan broken?"
    assert not problems, "citations of docs/METHODS.md that it cannot answer:\n" + "\n".join(problems)


def test_readme_links_to_the_note(doc, repo_root):
    """The README links to docs/METHODS.md, and every link (or `path/…/METHODS.md` code span) to
    it resolves: the path leads to the note and an #anchor, if any, names one of its headings."""
    readme = repo_root / "README.md"
    text = readme.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)\s]*METHODS\.md(?:#[^)\s]*)?)\)", text)
    assert targets, "README.md has no link to docs/METHODS.md"
    targets += re.findall(r"`([^`\s]*/METHODS\.md(?:#[^`\s]*)?)`", text)
    anchors = {github_anchor(line.lstrip("#")) for line in doc.read_text(encoding="utf-8").splitlines()
               if line.startswith("#")}
    for target in targets:
        path, _, anchor = target.partition("#")
        assert (readme.parent / path).resolve() == doc.resolve(), f"README points to {target}, not docs/METHODS.md"
        assert not anchor or anchor in anchors, f"README links to #{anchor}, which no heading of docs/METHODS.md gives"
