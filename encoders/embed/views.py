"""Named views: vectors an objective writes beside the main one, in the same embedding pass.

`embeddings/` keeps one vector per paper, the one the map is made of. An objective with parts may
also declare views (encoders.objectives.base.Objective.view_specs): per paper K keyed vectors (one
per facet, or one from a head), computed from the same forward as the main vector (the tokens,
the encoder's last hidden states and the pooled vector), so a view costs no second read of the
papers nor a second pass of the encoder. They are written to `embeddings/views/<name>/` as shards
numbered like the main ones, `part-NNNNN.parquet` with (paper_id, key, vector) and K rows a paper,
and a manifest; read by sciencemap.embeddings.load_embeddings(view=name).

A view's shard is written before the main shard of the same number, so a main shard on disk means
its views are there too, and the embed job's resume needs no rule of its own.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from encoders.model import Encoder, pool
from encoders.objectives.base import ViewSpec
from encoders.training.export import PARTS_FILE, load_parts
from sciencemap.contracts import EMBEDDING_SHARD_META_KEY, EMBEDDINGS_MANIFEST, MODEL_CARD, view_schema
from sciencemap.embeddings import shard_name
from sciencemap.storage import atomic_file, write_json_atomic


def objective_views(enc: Encoder):
    """The objective a model directory was trained with (its model card's), with its exported parts
    loaded, and its views: (None, {}) for a model not trained here; views only where parts were
    exported."""
    card_path = Path(enc.path) / MODEL_CARD
    card = json.loads(card_path.read_text()) if card_path.is_file() else {}
    if not (card.get("objective") or {}).get("name"):
        return None, {}
    from encoders.config import TrainConfig
    from encoders.objectives.registry import get_objective

    known = {f.name for f in dataclasses.fields(TrainConfig)}
    cfg = TrainConfig(**{k: v for k, v in (card.get("config") or {}).items() if k in known})
    objective = get_objective(card["objective"]["name"])(cfg)
    if not (Path(enc.path) / PARTS_FILE).is_file():
        return objective, {}
    objective.set_up(enc)
    load_parts(enc.path, {name: part.module for name, part in objective.parts.items()})
    for part in objective.parts.values():
        part.module.eval()
    return objective, objective.view_specs(enc)


class ViewsForward(torch.nn.Module):
    """(input_ids, attention_mask) -> one row a document: the pooled vector, then each view's K x dim
    vectors flattened, in view_specs order (split again by `split`)."""

    def __init__(self, enc: Encoder, objective, specs: dict[str, ViewSpec]):
        super().__init__()
        self.model, self.pooling, self.objective, self.specs = objective.embed_model(enc.model), enc.pooling, objective, specs

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        pooled = pool(hidden, attention_mask, self.pooling)
        views = {name: self.objective.view_vectors(name, input_ids, attention_mask, hidden, pooled)
                 for name in self.specs}
        parts = [self.objective.main_vector(pooled, views).float()]
        for name, spec in self.specs.items():
            parts.append(views[name].reshape(len(pooled), len(spec.keys) * spec.dim).float())
        return torch.cat(parts, dim=1)


def width(dim: int, specs: dict[str, ViewSpec]) -> int:
    """Row width of a pass: the main vector (dim wide), then every view's keys."""
    return dim + sum(len(s.keys) * s.dim for s in specs.values())


def main_dim(enc: Encoder, objective) -> int:
    return objective.main_dim(enc) if objective is not None else enc.dim


def own_main_vector(objective) -> bool:
    """The objective makes its main vector itself (not the encoder's pooled one)."""
    from encoders.objectives.base import Objective

    return objective is not None and (type(objective).main_vector is not Objective.main_vector)


def split(vectors: np.ndarray, dim: int, specs: dict[str, ViewSpec]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """A pass's rows -> the main vectors (n x dim) and each view's (n x K x dim_v)."""
    main, views, at = vectors[:, :dim], {}, dim
    for name, spec in specs.items():
        w = len(spec.keys) * spec.dim
        views[name] = vectors[:, at:at + w].reshape(len(vectors), len(spec.keys), spec.dim)
        at += w
    return np.ascontiguousarray(main), views


def view_dir(embeddings_dir: Path, name: str) -> Path:
    return Path(embeddings_dir) / "views" / name


def write_view_shard(out: Path, k: int, ids: list[str], keys: tuple[str, ...], vectors: np.ndarray,
                     record: dict) -> None:
    """Shard k of a view: K rows a paper (paper_id, key, vector), papers in the main shard's order."""
    n, n_keys, dim = vectors.shape
    pa_dtype = pa.from_numpy_dtype(vectors.dtype)
    table = pa.table({
        "paper_id": pa.array(np.repeat(np.asarray(ids, dtype=object), n_keys), pa.string()),
        "key": pa.array(list(keys) * n, pa.string()),
        "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1), pa_dtype), dim),
    }, schema=view_schema(dim, pa_dtype))
    table = table.replace_schema_metadata({EMBEDDING_SHARD_META_KEY: json.dumps(record).encode()})
    out.mkdir(parents=True, exist_ok=True)
    with atomic_file(out / shard_name(k)) as tmp:
        pq.write_table(table, tmp)


def write_view_manifests(embeddings_dir: Path, manifest: dict, specs: dict[str, ViewSpec], objective: str,
                         complete: bool) -> None:
    """Each view's manifest: the main one's model, shards and settings, its keys, width and objective."""
    for name, spec in specs.items():
        d = view_dir(embeddings_dir, name)
        d.mkdir(parents=True, exist_ok=True)
        done = sorted(k for k in manifest.get("finished_shards", []) if (d / shard_name(k)).is_file())
        write_json_atomic(d / EMBEDDINGS_MANIFEST, {
            **{k: v for k, v in manifest.items() if k not in ("views", "vector", "finished_shards", "complete")},
            "view": name, "keys": list(spec.keys), "dim": spec.dim, "objective": objective,
            "finished_shards": done, "complete": complete and len(done) == manifest["n_shards"]})
