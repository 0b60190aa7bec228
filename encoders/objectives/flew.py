"""FLeW (METHODS.md §8.3): three facet encoders, background / method / result, each trained with the
seed's triplet margin loss on its own facet's triplets ([importance] facet_signal) and on
facet-specific text: title [SEP] the abstract's sentences of that facet (the abstract facet splitter,
`jobs/facets.py splitter-label`; the title alone where the abstract has none of them).

In the objective seam: the run's encoder is the background encoder; the method and result encoders
are parts (full copies of the encoder at the start, trained at the run's learning rate on its
schedule, clipped with it, checkpointed and exported in objective_parts.safetensors, one model card
for the three). A micro-batch mixes facets: each facet's rows go through that facet's encoder, and
the loss is the mean of the rows' triplet losses. A facet without rows in a micro-batch still joins
the backward pass (a zero-weighted term), so several processes reduce the same parameters.

At embed time each encoder reads the paper's usual text (title [SEP] abstract); the view "facets"
holds the three vectors and the main vector is their weighted sum Σ w_f·E_f ([embed] facet_weights,
positive, summing to 1; equal by default). Weights are chosen per task on validation data
(bench/quality_experiment.py searches the simplex in steps of 0.1).
"""
from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import numpy as np
import torch

from sciencemap.contracts import FACETS
from sciencemap.runtime import UserError

from encoders.model import pool
from encoders.objectives.base import Part, ViewSpec
from encoders.objectives.facet_batches import FacetCollate
from encoders.objectives.triplet import TripletObjective

KIND = "flew_tokens"
FORMAT = "sciencemap.flew_tokens/1"
ITEM_SEP = ":"       # item id = "<facet>:<paper_id>" (facet names hold no colon)
PART_FACETS = FACETS[1:]   # the run's encoder is FACETS[0] (background)


def item_id(facet: str, paper_id: str) -> str:
    return f"{facet}{ITEM_SEP}{paper_id}"


def facet_of_item(item: str) -> int:
    return FACETS.index(item.split(ITEM_SEP, 1)[0])


def equal_weights() -> list[float]:
    return [1 / len(FACETS)] * len(FACETS)


def check_weights(weights) -> list[float]:
    """The facet weights as given (empty = equal): one per facet, each > 0, summing to 1."""
    w = [float(x) for x in (weights or [])] or equal_weights()
    if len(w) != len(FACETS) or any(not x > 0 for x in w) or abs(sum(w) - 1) > 1e-6:
        raise UserError(f"facet_weights {list(weights)} must be {len(FACETS)} positive numbers summing to 1 "
                        f"(background, method, result)")
    return w


class FlewObjective(TripletObjective):
    name = "flew"

    @classmethod
    def check(cls, cfg) -> None:
        super().check(cfg)
        if cfg.bucket_tokens:
            raise UserError("the flew objective reads one padded batch per micro-batch: set bucket_tokens = 0")

    def build(self, enc) -> dict[str, Part]:
        return {f: Part(copy.deepcopy(enc.model)) for f in PART_FACETS}

    def facet_encoder(self, enc, f: int, training: bool = True):
        """The encoder of facet FACETS[f]: the run's own for background, else that part."""
        if f == 0:
            return enc
        name = FACETS[f]
        return dataclasses.replace(enc, model=self.part(name) if training else self.parts[name].module)

    # -- data: facet triplets on facet text
    def prepare_data(self, layout, enc, sample_triplets: int = 0):
        from encoders.training.item_store import files_state, prepare, tokenizer_digest

        if sample_triplets:
            raise UserError("the flew objective has no token or time budget yet: set max_tokens = 0 and max_hours = 0")
        facets_table = layout.table("abstract_facets")
        if not facets_table.exists():
            raise UserError(f"{facets_table} is missing: run `python jobs/facets.py splitter-label --run {layout.root}` "
                            "(FLeW trains on facet-specific text)")
        inputs = {"format": FORMAT, "triplets": files_state(layout.table("triplets")),
                  "papers": files_state(layout.table("papers")), "abstract_facets": files_state(facets_table),
                  "tokenizer": tokenizer_digest(enc.path), "max_length": enc.max_length, "sep": enc.sep,
                  "val_max": self.cfg.val_max, "seed": self.cfg.seed}
        return prepare(layout.train_tokens_dir, KIND, inputs, lambda tmp: build_facet_tokens(
            layout, tmp, enc.tokenizer, enc.max_length, enc.sep, self.cfg.val_max, self.cfg.seed))

    def open_data(self, folder):
        from encoders.training.triplet_table import open_tokens

        data = open_tokens(folder)
        ids = data.store.items.column("item_id").to_pylist()
        self._item_facets = np.asarray([facet_of_item(i) for i in ids], np.int8)
        return data

    def collate(self, data, pad_id: int, bucket_tokens: int):
        return FacetCollate(data, pad_id, self._item_facets[data.train["a"]])

    # -- the loss
    def batch_loss(self, enc, batch) -> torch.Tensor:
        k = len(batch)
        inputs = batch.inputs(enc.device)
        facets = torch.as_tensor(batch.facets, device=enc.device)
        total = inputs["input_ids"].new_zeros((), dtype=torch.float32)
        for f in range(len(FACETS)):
            rows = torch.nonzero(facets == f).flatten()
            fenc = self.facet_encoder(enc, f)
            if len(rows) == 0:   # keep every parameter in the backward pass (several processes reduce them all)
                total = total + 0.0 * sum(p.sum() for p in fenc.model.parameters())
                continue
            idx = torch.cat([rows, rows + k, rows + 2 * k])
            vec = fenc.forward({name: t[idx] for name, t in inputs.items()})
            m = len(rows)
            total = total + self.loss(vec[:m], vec[m:2 * m], vec[2 * m:]) * m
        return total / k

    # -- validation: each facet's triplets with its own encoder
    def validate(self, enc, data: dict, batch_size: int = 32) -> dict:
        from encoders.objectives.validation import evaluate

        f_of = np.asarray([facet_of_item(a) for a in data["ai"]], np.int64)
        out, n_all, sums = {"n": len(f_of)}, 0, {"loss": 0.0, "accuracy": 0.0, "mrr": 0.0}
        for f, name in enumerate(FACETS):
            sel = np.flatnonzero(f_of == f)
            if not len(sel):
                continue
            sub = {key: [data[key][i] for i in sel] for key in ("ai", "pi", "ni", "kind")}
            sub["tokens"] = data["tokens"]
            r = evaluate(self, self.facet_encoder(enc, f, training=False), sub, batch_size)
            out[f"accuracy_{name}"] = r["accuracy"]
            out[f"mrr_{name}"] = r.get("mrr")
            n_all += r["n"]
            for key in sums:
                sums[key] += (r.get(key) or 0.0) * r["n"]
        if n_all == 0:
            return {"n": 0, "loss": None, "accuracy": None}
        out.update({key: v / n_all for key, v in sums.items()})
        return out

    # -- embedding: three facet vectors and their weighted sum
    def view_specs(self, enc) -> dict:
        return {"facets": ViewSpec(keys=FACETS, dim=enc.dim)}

    def view_vectors(self, name, input_ids, attention_mask, hidden, pooled) -> torch.Tensor:
        vecs = [pooled]
        for f in PART_FACETS:
            h = self.part(f)(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            vecs.append(pool(h, attention_mask, self.cfg.pooling))
        return torch.stack(vecs, dim=1)

    def weights(self) -> list[float]:
        return check_weights(getattr(self.embed_settings, "facet_weights", None))

    def check_embed(self, embed_cfg) -> None:
        check_weights(embed_cfg.facet_weights)

    def main_vector(self, pooled, views) -> torch.Tensor:
        w = torch.tensor(self.weights(), dtype=views["facets"].dtype, device=pooled.device)
        return (views["facets"] * w[None, :, None]).sum(dim=1)

    def main_vector_note(self) -> dict:
        return {"from": "sum of the facet view's vectors, weighted", "facet_weights": self.weights()}


def build_facet_tokens(layout, folder: Path, tokenizer, max_length: int, sep: str, val_max: int, seed: int) -> dict:
    """Every facet triplet of the run, on facet text, into the item store (rows a, p, n, split, kind)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from encoders.facets.splitter import facet_text
    from encoders.training.item_store import ITEMS, ROWS, write_items, write_rows
    from encoders.training.triplet_table import _read_triplets, _val_sample, data_digest
    from sciencemap.contracts import SPLIT_TRAIN, SPLIT_VAL
    from sciencemap.storage import dataset

    df = _read_triplets(layout, facet="*")
    for col in ("anchor_id", "positive_id", "negative_id"):
        df[col] = [item_id(f, p) for f, p in zip(df["facet"], df[col])]
    need = {}
    for col in ("anchor_id", "positive_id", "negative_id"):
        for item in df[col]:
            f, pid = item.split(ITEM_SEP, 1)
            need.setdefault(pid, set()).add(f)
    wanted = pa.array(sorted(need), pa.string())
    split_of = {}
    for batch in dataset(layout.table("abstract_facets"), "run jobs/facets.py splitter-label").to_batches(columns=["paper_id", "sentences", "facets"]):
        t = pa.Table.from_batches([batch])
        t = t.filter(pc.is_in(t["paper_id"], value_set=wanted))
        for pid, s, f in zip(*(t[c].to_pylist() for c in ("paper_id", "sentences", "facets"))):
            split_of[pid] = (s or [], f or [])

    def texts():
        for batch in dataset(layout.table("papers"), "run the ingest stage first").to_batches(columns=["paper_id", "title"]):
            t = pa.Table.from_batches([batch])
            t = t.filter(pc.is_in(t["paper_id"], value_set=wanted))
            for pid, title in zip(t["paper_id"].to_pylist(), t["title"].to_pylist()):
                s, f = split_of.get(pid, ([], []))
                for facet in sorted(need[pid]):
                    yield item_id(facet, pid), facet_text(title, s, f, facet, sep)

    row_of = write_items(folder / ITEMS, texts(), tokenizer, max_length)
    has_text = df[["anchor_id", "positive_id", "negative_id"]].isin(row_of.keys()).all(axis=1)
    counts = {"triplets_total": int(len(df)), "dropped_no_text": int((~has_text).sum()),
              "papers_with_facet_split": len(split_of)}
    df = df[has_text]
    parts = [df[df["split"] == SPLIT_TRAIN], _val_sample(df[df["split"] == SPLIT_VAL], val_max, seed)]
    for name, part in zip((SPLIT_TRAIN, SPLIT_VAL), parts):
        counts[f"{name}_triplets"] = int(len(part))
        counts[f"{name}_by_facet"] = {f: int((part["facet"] == f).sum()) for f in FACETS}
    train = parts[0]
    digest = data_digest({"ai": train["anchor_id"].tolist(), "pi": train["positive_id"].tolist(),
                          "ni": train["negative_id"].tolist()})
    rows = lambda col: pa.array(  # noqa: E731
        np.concatenate([p[col].map(row_of).to_numpy(np.int32) for p in parts]), pa.int32())
    write_rows(folder / ROWS, pa.table({
        "a": rows("anchor_id"), "p": rows("positive_id"), "n": rows("negative_id"),
        "split": pa.array(np.concatenate([p["split"].to_numpy(object) for p in parts]), pa.string()),
        "kind": pa.array(np.concatenate([p["negative_kind"].fillna("").to_numpy(object) for p in parts]), pa.string())}))
    return {"counts": counts, "train_digest": digest, "papers": len(row_of)}


OBJECTIVE = FlewObjective
