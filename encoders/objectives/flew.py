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

    # -- data: facet triplets on facet text (encoders.training.facet_table)
    def prepare_data(self, layout, enc, sample_triplets: int = 0):
        from encoders.training.facet_table import prepare_facet_tokens

        return prepare_facet_tokens(self.name, facet_items(enc.sep), layout, enc, self.cfg.val_max, self.cfg.seed,
                                    sample_triplets)

    def budget_inputs(self, layout) -> dict:
        from encoders.training.facet_table import facet_inputs

        return facet_inputs(self.name, layout)

    def budget_probe(self, layout, enc, folder, sample_triplets: int) -> dict:
        from encoders.training.facet_table import build_probe

        return build_probe(facet_items(enc.sep), layout, enc, folder, self.cfg.val_max, self.cfg.seed, sample_triplets)

    def open_data(self, folder):
        from encoders.training.facet_table import open_facet_tokens

        data, self._facet_data = open_facet_tokens(folder)
        return data

    def collate(self, data, pad_id: int, bucket_tokens: int):
        return FacetCollate(data, pad_id, self._facet_data.row_facets["train"])

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


def facet_items(sep: str):
    """FLeW's items: one per paper and facet it is used for, on that facet's text."""
    from encoders.facets.splitter import facet_text
    from encoders.training.facet_table import FacetItems

    def texts(pid, title, sentences, facets, used):
        for f in sorted(used):
            yield item_id(f, pid), facet_text(title, sentences, facets, f, sep), []
    return FacetItems(KIND, FORMAT, item_id, texts)


OBJECTIVE = FlewObjective
