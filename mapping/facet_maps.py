"""Facet maps (METHODS.md §8.6): the map drawn from one key of a view instead of the main vector, e.g. the
method vectors of a FLeW or UniFAR model, so that papers sit by how they work rather than by topic.

`[render] view = "method"` (a key of the run's `facets` view; "name:key" for another view) makes the
render stage build a sub-run `<run>/maps/<key>/` that links the run's tables (papers, references,
mentions, pairs) and holds that key's vectors as its embeddings (written shard by shard from the
view's shards, never the whole matrix at once), then runs kNN, Leiden and the render on it: the same
k and resolutions as the run's own map (read from its kNN summary and clusters table), the other
settings at their defaults, and the render settings given. Everything a map run writes lands in the
sub-run (edges, clusters, topics, map.png, map.html, summaries); the run's own map is untouched.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

from sciencemap.contracts import EMBEDDINGS_MANIFEST
from sciencemap.embeddings import embedding_shards, read_manifest, shard_name, view_names
from sciencemap.layout import RunLayout
from sciencemap.runtime import UserError
from sciencemap.storage import atomic_file, write_json_atomic

LINKED_TABLES = ("papers", "references", "mentions", "pairs")
DEFAULT_VIEW = "facets"


def parse_view(spec: str) -> tuple[str, str]:
    """"method" -> ("facets", "method"); "head:head" -> ("head", "head")."""
    name, _, key = spec.rpartition(":")
    return (name or DEFAULT_VIEW), key


def view_embeddings(layout: RunLayout, view: str, key: str, dest: Path) -> dict:
    """Write the view's `key` vectors as main-format embeddings (paper_id, vector) into dest, shard by
    shard; a shard already written from the same source shard is kept (resume)."""
    src = layout.embeddings_dir / "views" / view
    if view not in view_names(layout.embeddings_dir):
        raise UserError(f"the run has no view {view!r} (views: {', '.join(view_names(layout.embeddings_dir)) or 'none'}); "
                        "a facet map needs a model trained with the flew or unifar objective, embedded")
    manifest = read_manifest(src)
    if key not in manifest.get("keys", []):
        raise UserError(f"view {view!r} has no key {key!r} (keys: {', '.join(manifest.get('keys', []))})")
    shards, dim = embedding_shards(src)
    dest.mkdir(parents=True, exist_ok=True)
    for k, s in enumerate(shards):
        out = dest / shard_name(k)
        stamp = f"{s.stat().st_size}:{s.stat().st_mtime_ns}".encode()
        if out.is_file() and (pq.read_schema(out).metadata or {}).get(b"sciencemap.view_source") == stamp:
            continue
        t = pq.read_table(s, columns=["paper_id", "key", "vector"])
        t = t.filter(pc.equal(t["key"], key)).select(["paper_id", "vector"])
        t = t.replace_schema_metadata({b"sciencemap.view_source": stamp})
        with atomic_file(out) as tmp:
            pq.write_table(t, tmp)
    write_json_atomic(dest / EMBEDDINGS_MANIFEST, {
        **{k: v for k, v in manifest.items() if k not in ("keys", "finished_shards", "complete", "view")},
        "dim": dim, "n_shards": len(shards), "finished_shards": list(range(len(shards))), "complete": True,
        "vector": {"from": f"view {view!r}, key {key!r}", "objective": manifest.get("objective")}})
    return {"view": view, "key": key, "shards": len(shards), "dim": dim}


def _link(layout: RunLayout, sub: RunLayout) -> list[str]:
    linked = []
    for t in LINKED_TABLES:
        src, dst = layout.table(t), sub.table(t)
        if src.exists() and not dst.exists():
            dst.symlink_to(src.resolve(), target_is_directory=True)
        if dst.exists():
            linked.append(t)
    return linked


def _map_settings(layout: RunLayout) -> dict:
    """k and the resolutions of the run's own map (its kNN summary and clusters table), where present."""
    from mapping.io import cluster_resolutions

    import pyarrow.dataset as ds

    out = {}
    if layout.table("edges").exists():   # k = the deepest rank of the run's kNN lists
        k = pc.max(ds.dataset(str(layout.table("edges"))).to_table(columns=["rank"])["rank"]).as_py()
        if k:
            out["k"] = int(k)
    if layout.table("clusters").exists():
        out["resolutions"] = cluster_resolutions(layout)
    return out


def run_facet_map(cfg, layout: RunLayout) -> dict:
    """kNN -> Leiden -> render on one view key, in <run>/maps/<key>/ (see the module doc)."""
    from mapping.cluster import ClusterConfig, run_cluster
    from mapping.knn import KnnConfig, run_knn
    from mapping.render import run_render

    view, key = parse_view(cfg.view)
    sub = RunLayout(layout.root / "maps" / key)
    sub.root.mkdir(parents=True, exist_ok=True)
    emb = view_embeddings(layout, view, key, sub.embeddings_dir)
    linked = _link(layout, sub)
    own = _map_settings(layout)
    knn_cfg = KnnConfig(**({"k": own["k"]} if "k" in own else {}))
    cl_cfg = ClusterConfig(**({"resolutions": own["resolutions"]} if own.get("resolutions") else {}))
    knn = run_knn(knn_cfg, sub)
    clusters = run_cluster(cl_cfg, sub)
    render = run_render(dataclasses.replace(cfg, view="", title=f"{cfg.title}: {key}"), sub)
    summary = {"facet_map": str(sub.root), "view": emb, "linked": linked, "k": knn_cfg.k,
               "resolutions": cl_cfg.resolutions, "knn_seconds": knn.get("seconds"),
               "clusters": clusters.get("per_resolution", clusters.get("resolutions")),
               "png": render.get("png"), "html": render.get("html")}
    write_json_atomic(sub.root / "facet_map.json", summary)
    return summary
