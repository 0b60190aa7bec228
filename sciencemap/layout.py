"""The run directory: where each stage reads and writes, named once.

One run is one directory; each table is a sub-directory named after its contract
(sciencemap.contracts.SCHEMAS), next to a few files (model, map, report, summaries).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RunLayout:
    """Where each stage reads and writes inside one run directory."""

    root: Path

    def table(self, name: str) -> Path:
        return self.root / name

    @property
    def model_dir(self) -> Path:
        return self.root / "model"

    @property
    def embeddings_dir(self) -> Path:
        return self.root / "embeddings"

    @property
    def chunks_view_dir(self) -> Path:
        """The view `chunks`: a vector per section chunk (encoders.embed.chunks; `lookup --text`)."""
        return self.root / "embeddings" / "views" / "chunks"

    @property
    def vectors_dir(self) -> Path:
        """The mapping stages' memory-mapped unit vectors (sciencemap.vectors)."""
        return self.root / "vectors"

    @property
    def knn_work_dir(self) -> Path:
        """The kNN search's per-query-block results while it runs (kept until the edges are written)."""
        return self.root / "knn_work"

    @property
    def knn_index_dir(self) -> Path:
        """The kNN stage's approximate index, kept for placing new papers (mapping.knn.KeptIndex)."""
        return self.root / "knn_index"

    @property
    def cluster_work_dir(self) -> Path:
        """The graph's arrays as files while the cluster stage's Leiden runs hold their own graph
        (mapping.cluster.file_backed; removed when the stage ends)."""
        return self.root / "cluster_work"

    @property
    def ingest_work_dir(self) -> Path:
        """The readers' records as Parquet per record kind while ingest runs (importance.ingest.staged_records)."""
        return self.root / "ingest_work"

    @property
    def map_png(self) -> Path:
        return self.root / "map.png"

    def map_overlay_png(self, overlay: str) -> Path:
        """map_<overlay>.png: the papers coloured by a topic overlay (field, interdisciplinarity, year)."""
        return self.root / f"map_{overlay}.png"

    @property
    def placed_dir(self) -> Path:
        """The map PNGs drawn again with placed papers (mapping.place), beside the map's own."""
        return self.root / "placed_maps"   # ("placed" is the table)

    @property
    def map_layout(self) -> Path:
        """The map's topic positions and paper-placement frames (mapping.layout.LocalLayout)."""
        return self.root / "map_layout.npz"

    @property
    def map_positions(self) -> Path:
        """paper_xy.npy: float32 map position of each vector row (NaN = not drawn)."""
        return self.root / "paper_xy.npy"

    @property
    def map_html(self) -> Path:
        return self.root / "map.html"

    @property
    def report_md(self) -> Path:
        return self.root / "report.md"

    @property
    def metrics_json(self) -> Path:
        return self.root / "metrics.json"

    @property
    def ingest_summary(self) -> Path:
        """JSON: input records, papers and rejects per source (and per reject reason)."""
        return self.root / "ingest_summary.json"

    @property
    def importance_summary(self) -> Path:
        """JSON: Table 3 rows, pair/triplet counts, share of hard negatives, resolution rate."""
        return self.root / "importance_summary.json"

    @property
    def train_log(self) -> Path:
        """JSON lines, one per logged training step."""
        return self.root / "train_log.jsonl"

    @property
    def config_used(self) -> Path:
        return self.root / "config.toml"

    @property
    def stages_json(self) -> Path:
        """The pipeline runner's record of finished stages and their settings hashes."""
        return self.root / "stages.json"

    @property
    def checkpoints_dir(self) -> Path:
        return self.root / "checkpoints"

    @property
    def train_tokens_dir(self) -> Path:
        """The training triplets tokenized once (encoders.training.triplet_table), cached by fingerprint."""
        return self.root / "train_tokens"

    @property
    def train_curve_png(self) -> Path:
        return self.root / "train_curve.png"
