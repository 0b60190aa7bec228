"""Rebuild the embedded sample from ../shared/data (a developer tool, never run by the pipeline).

Picks eLife research articles and ScisummNet papers so that as many citation links as possible stay
inside the sample, copies the three PubMed CSVs, and picks a few more eLife articles outside the
sample that cite it (the new papers of the README's placement recipe). Output: sample/elife/*.xml.gz,
sample/scisummnet/<ACLID>/{<ACLID>.xml.gz,citing_sentences.json.gz}, sample/pubmed/*.csv.gz,
sample/new_papers/*.xml.gz.

    python sample/build_sample.py --shared ../shared/data --elife 250 --scisummnet 250
    python sample/build_sample.py --only-new-papers      # sample/new_papers alone
"""
import argparse
import collections
import gzip
import json
import re
import shutil
import tarfile
from pathlib import Path

from lxml import etree

HERE = Path(__file__).resolve().parent


def greedy_pick(nodes, edges, n):
    """Pick n nodes, each time the one with most links to the picked set (ties: degree, then id)."""
    adj = collections.defaultdict(set)
    for a, b in edges:
        if a != b:
            adj[a].add(b)
            adj[b].add(a)
    picked, inside = [], collections.Counter()
    remaining = set(nodes)
    while len(picked) < n and remaining:
        best = max(remaining, key=lambda x: (inside[x], len(adj[x]), x))
        picked.append(best)
        remaining.discard(best)
        for y in adj[best]:
            inside[y] += 1
    kept = set(picked)
    links = sum(1 for a, b in edges if a in kept and b in kept and a != b)
    return picked, links


def elife_docs(tar_path) -> dict:
    """doi -> (file name, bytes, reference DOIs) of every eLife research article in the tarball."""
    docs = {}
    with tarfile.open(tar_path) as tar:
        for m in tar:
            if not m.name.endswith(".xml"):
                continue
            data = tar.extractfile(m).read()
            root = etree.fromstring(data)
            if root.get("article-type") != "research-article":
                continue
            doi = root.findtext(".//article-meta/article-id[@pub-id-type='doi']")
            refs = [d.strip().lower() for d in root.xpath("//ref-list/ref//pub-id[@pub-id-type='doi']/text()")]
            docs[doi.lower()] = (Path(m.name).name, data, refs)
    return docs


def pick_elife(docs: dict, n, out):
    edges = [(d, r) for d, (_, _, refs) in docs.items() for r in refs if r in docs]
    picked, links = greedy_pick(list(docs), edges, n)
    out.mkdir(parents=True, exist_ok=True)
    for d in picked:
        name, data, _ = docs[d]
        (out / (name + ".gz")).write_bytes(gzip.compress(data, 9, mtime=0))
    print(f"eLife: {len(picked)} of {len(docs)} research articles, {links} in-sample citation links")


def pick_new_papers(docs: dict, n, sample_dir, out):
    """n eLife research articles that are not in the sample and cite the most sample articles (ties:
    the larger DOI, as greedy_pick): new papers for the placement recipe, which land near the map
    papers they cite."""
    in_sample = {d for d, (name, _, _) in docs.items() if (sample_dir / (name + ".gz")).is_file()}
    if not in_sample:
        raise SystemExit(f"no sample articles found in {sample_dir}")
    score = {d: sum(r in in_sample for r in refs) for d, (_, _, refs) in docs.items() if d not in in_sample}
    picked = sorted(score, key=lambda d: (score[d], d), reverse=True)[:n]
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    for d in picked:
        name, data, _ = docs[d]
        (out / (name + ".gz")).write_bytes(gzip.compress(data, 9, mtime=0))
    print(f"new papers: {len(picked)} eLife articles outside the sample, citing "
          f"{sum(score[d] for d in picked)} sample articles in all")


def pick_scisummnet(tar_path, n, out):
    xml, cites = {}, {}
    pat = re.compile(r"From-ScisummNet-2019/([^/]+)/(Reference_XML/[^/]+\.xml|citing_sentences\.json)$")
    with tarfile.open(tar_path) as tar:
        for m in tar:
            hit = pat.search(m.name)
            if not hit:
                continue
            data = tar.extractfile(m).read()
            (xml if hit.group(2).endswith(".xml") else cites)[hit.group(1)] = data
    ids = sorted(set(xml) & set(cites))
    edges = []
    for cited in ids:
        for c in json.loads(cites[cited]):
            if c["citing_paper_id"] in xml:
                edges.append((c["citing_paper_id"], cited))
    picked, links = greedy_pick(ids, set(edges), n)
    for p in picked:
        d = out / p
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{p}.xml.gz").write_bytes(gzip.compress(xml[p], 9, mtime=0))
        (d / "citing_sentences.json.gz").write_bytes(gzip.compress(cites[p], 9, mtime=0))
    print(f"ScisummNet: {len(picked)} of {len(ids)} papers, {links} in-sample citation links")


def copy_pubmed(src, out):
    out.mkdir(parents=True, exist_ok=True)
    for f in sorted(src.glob("*-data-small.csv")):
        (out / (f.name + ".gz")).write_bytes(gzip.compress(f.read_bytes(), 9, mtime=0))
    print("PubMed: copied", ", ".join(f.name for f in sorted(src.glob("*-data-small.csv"))))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", type=Path, default=HERE.parent.parent / "shared" / "data")
    ap.add_argument("--elife", type=int, default=250)
    ap.add_argument("--scisummnet", type=int, default=250)
    ap.add_argument("--new-papers", type=int, default=8, help="eLife articles outside the sample (sample/new_papers)")
    ap.add_argument("--only-new-papers", action="store_true", help="rebuild sample/new_papers only")
    a = ap.parse_args()
    docs = elife_docs(a.shared / "elife-articles" / "elife-articles-6c97171-xml.tar.gz")   # read once
    if a.only_new_papers:
        pick_new_papers(docs, a.new_papers, HERE / "elife", HERE / "new_papers")
        return
    for sub in ("elife", "scisummnet", "pubmed"):
        shutil.rmtree(HERE / sub, ignore_errors=True)
    pick_elife(docs, a.elife, HERE / "elife")
    pick_scisummnet(a.shared / "cl-scisumm" / "scisummnet-2019.tar.gz", a.scisummnet, HERE / "scisummnet")
    copy_pubmed(a.shared / "pubmed-multilabel-mesh-sample", HERE / "pubmed")
    pick_new_papers(docs, a.new_papers, HERE / "elife", HERE / "new_papers")


if __name__ == "__main__":
    main()
