"""The mapping package's stages, registered through the `sciencemap.stages` entry points."""
from __future__ import annotations

from sciencemap.stages import Stage

from mapping.cluster import ClusterConfig
from mapping.evaluation.evaluate import EvaluateConfig, measure, write_report
from mapping.knn import KnnConfig
from mapping.place import PlaceConfig
from mapping.render import RenderConfig


def _knn(cfg, layout, ctx):
    from mapping.knn import run_knn

    return run_knn(cfg, layout)


def _cluster(cfg, layout, ctx):
    from mapping.cluster import run_cluster

    return run_cluster(cfg, layout)


def _render(cfg, layout, ctx):
    if cfg.view:   # a facet map (METHODS.md §8.6)
        from mapping.facet_maps import run_facet_map

        return run_facet_map(cfg, layout)
    from mapping.render import run_render

    return run_render(cfg, layout)


def _place(cfg, layout, ctx):
    from mapping.place import run_place

    return run_place(cfg, layout)


def _evaluate(cfg, layout, ctx):
    measured = ctx.early_result("evaluate")   # measured beside the render stage (the pipeline)
    return write_report(layout, measured if measured is not None else measure(cfg, layout))


def _evaluate_beside(cfg) -> str | None:
    return "render" if cfg.beside_render else None


KNN = Stage("knn", 50, KnnConfig, _knn, summary="Build the k-nearest-neighbour graph (FAISS) of the run's "
            "embeddings: writes the edges table.")
CLUSTER = Stage("cluster", 60, ClusterConfig, _cluster, summary="Cluster the kNN graph with Leiden (CPM) at "
                "one or more resolutions: writes the clusters table.")
RENDER = Stage("render", 70, RenderConfig, _render, summary="Lay out the topics (UMAP) and render the map: "
               "writes the topics table, map.png and map.html.")
EVALUATE = Stage("evaluate", 80, EvaluateConfig, _evaluate, summary="MeSH clustering accuracy per resolution, "
                 "network statistics, report.md and metrics.json.",
                 beside=_evaluate_beside, early=measure)
PLACE = Stage("place", 75, PlaceConfig, _place, in_pipeline=False,
              summary="Place new papers (a run with their embeddings, --new) on this run's finished map: "
                      "neighbours on the map, a topic each, a position in it; writes the placed table and "
                      "the map PNGs with them under placed_maps/. Nothing of kNN, Leiden or UMAP is re-run.")
