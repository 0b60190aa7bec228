"""The objective protocol: what the training loop asks of a training objective.

An objective reads the `triplets` table (joined to paper text, encoders.training.triplet_table),
turns rows into micro-batches, computes its loss on the pooled vectors, validates, and says what
goes into the model card. It may own parts beside the encoder (`parts`): trainable modules with
their own learning rate (facet anchors, a projection head, a predictor), which the loop puts in the
optimizer, the gradient clipping, DistributedDataParallel, the checkpoints and the exported model;
and modules saved but not trained (an EMA copy of the encoder), which it updates in `after_step`.
The loop owns everything else: optimizer, schedule, processes, checkpoints, export. Torch is
imported by the concrete objectives, not here (the registry's names are read by encoders.config,
which must import without torch).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sciencemap.text import paper_text

from encoders.objectives.batches import TripletBatch

if TYPE_CHECKING:
    import torch

    from encoders.config import TrainConfig
    from encoders.model import Encoder
    from sciencemap.layout import RunLayout


@dataclass
class Part:
    """A module an objective owns beside the encoder. trainable: in the optimizer (at `lr`, None =
    the run's lr, following the same schedule; `weight_decay` None = the run's, never on biases and
    norms), clipped with the encoder, wrapped by DistributedDataParallel; else saved but not
    trained (its values come from `after_step`). Every part is checkpointed and exported."""

    module: "torch.nn.Module"
    trainable: bool = True
    lr: float | None = None
    weight_decay: float | None = None


@dataclass(frozen=True)
class ViewSpec:
    """A named view's keys (one vector per key and paper: facets, a head) and width."""

    keys: tuple[str, ...]
    dim: int


class Objective:
    """Base class of training objectives. Subclasses set `name`, `fields` and `score_name`, and
    implement `loss`, `pair_scores` and `score_matrix`; the rest has defaults that fit any
    objective training on (anchor, positive, negative) triplets."""

    name: str = ""
    # TrainConfig fields this objective reads: part of the checkpoint fingerprint and the model card.
    fields: tuple[str, ...] = ()
    # What `pair_scores` / `score_matrix` compute (validation ranks candidates by it; higher = closer).
    score_name: str = ""

    def __init__(self, cfg: "TrainConfig"):
        self.cfg = cfg
        self._parts: dict[str, Part] = {}
        self._running: dict = {}     # a part as the loop runs it (DDP-wrapped), by name

    # -- parts beside the encoder
    def build(self, enc: "Encoder") -> dict[str, Part]:
        """The objective's parts, made once the encoder is loaded (its width, its weights), on the
        encoder's device; seeded by the run (the loop seeds torch before). None by default."""
        return {}

    @property
    def parts(self) -> dict[str, Part]:
        return self._parts

    def set_up(self, enc: "Encoder") -> None:
        """Called by the loop once: build the parts and move them to the encoder's device."""
        self._parts = {name: part for name, part in self.build(enc).items()}
        for part in self._parts.values():
            part.module.to(enc.device)
            part.module.requires_grad_(part.trainable)
        self._running = {}

    def part(self, name: str) -> "torch.nn.Module":
        """The part to call in the loss: as the loop runs it (wrapped for several processes) or itself."""
        return self._running[name] if name in self._running else self._parts[name].module

    # The optimizer step the loss is computed for (set by the loop before each micro-batch): what an
    # objective draws per step from it (SIGReg's directions) is the same in a resumed run.
    step_now: int = 0

    def encoder_lr(self) -> float | None:
        """The encoder's peak learning rate when the objective has its own (SciJEPa's); None = the run's lr."""
        return None

    def after_step(self, enc: "Encoder", step: int, total: int) -> None:
        """After each optimizer step (`step` done of `total` planned): update what is not trained
        (an EMA target), advance a schedule of the objective's own. Nothing by default."""

    def parts_card(self) -> dict:
        """What the model card says of the parts (names, sizes, learning rates)."""
        return {name: {"trainable": p.trainable, "parameters": sum(t.numel() for t in p.module.parameters()),
                       **({"lr": p.lr or self.cfg.lr} if p.trainable else {})}
                for name, p in self._parts.items()}

    # -- settings
    @classmethod
    def resolve(cls, cfg: "TrainConfig", layout: "RunLayout") -> "TrainConfig":
        """Fill settings that default to something the input table records (None = 'from the data')."""
        return cfg

    @classmethod
    def check(cls, cfg: "TrainConfig") -> None:
        """Raise sciencemap.runtime.UserError for a setting this objective cannot use."""

    def settings(self) -> dict:
        return {f: getattr(self.cfg, f) for f in self.fields}

    def card(self) -> dict:
        """The model card's "objective" entry (sciencemap.contracts.MODEL_CARD)."""
        out = {"name": self.name, "settings": self.settings(), "score": self.score_name}
        return {**out, "parts": self.parts_card()} if self._parts else out

    # -- at embed time
    # The text this objective reads of a paper, in training and at embed time (its input view):
    # input_text(title, abstract, sep), a module-level function, so that the embed stage's feed
    # processes can take it and the default is recognised as such; by default title [SEP] abstract.
    input_text = staticmethod(paper_text)

    def view_specs(self, enc: "Encoder") -> dict:
        """Named views the embed stage writes beside the main vector (name -> ViewSpec: keys and
        width), from the same forward (encoders.embed.views); none by default."""
        return {}

    def view_vectors(self, name: str, input_ids: "torch.Tensor", attention_mask: "torch.Tensor",
                     hidden: "torch.Tensor", pooled: "torch.Tensor") -> "torch.Tensor":
        """View `name` of a batch (B x K x dim) from its tokens, the encoder's last hidden states and
        the pooled vectors."""
        raise NotImplementedError

    # The embed stage's settings (encoders.config.EmbedConfig), set on the objective before the
    # forward: an objective whose main vector has settings (FLeW's facet weights) reads them here.
    embed_settings = None

    def main_dim(self, enc: "Encoder") -> int:
        """Width of the main vector (the one the map is made of); the encoder's by default."""
        return enc.dim

    def main_vector(self, pooled: "torch.Tensor", views: dict) -> "torch.Tensor":
        """The main vector of a batch from the encoder's pooled vectors and this forward's views
        (name -> B x K x dim): the pooled vector by default; FLeW's weighted sum of its facet
        vectors, UniFAR's concatenation of them."""
        return pooled

    def main_vector_note(self) -> dict:
        """What the embeddings manifest says of an own main vector (it is part of what a resumed
        embedding must match: other weights, other vectors)."""
        return {"from": f"the {self.name} objective's views"}

    # The embed stage also writes the view `chunks` (a vector per section chunk, encoders.embed.chunks)
    # for a model of this objective when the run has a sections table.
    writes_chunks: bool = False

    # The branches a model of this objective can embed with ([embed] branch); the first is the default.
    branches: tuple[str, ...] = ("online",)

    def check_embed(self, embed_cfg) -> None:
        """Raise sciencemap.runtime.UserError for an embed setting this objective cannot use."""

    def embed_model(self, model: "torch.nn.Module") -> "torch.nn.Module":
        """The transformer the embed stage's forward runs (SciJEPa's target branch: the EMA encoder)."""
        return model

    # -- what it trains on
    def prepare_data(self, layout: "RunLayout", enc: "Encoder", sample_triplets: int = 0):
        """Rank 0: build or reuse the item store this objective trains on (encoders.training.item_store:
        its texts tokenized once and keyed by item id, and its rows); returns (folder, built now).
        By default the run's triplets (encoders.training.triplet_table), or a budget's sample of
        them. What `open_data` returns must offer what the loop reads: train and val rows
        (`train["a"]` gives their number), split_rows("val"), digest, counts, mean_paper_tokens()."""
        from encoders.training.triplet_table import prepare_tokens

        return prepare_tokens(layout, enc.path, enc.tokenizer, enc.max_length, enc.sep, self.cfg.val_max,
                              self.cfg.seed, sample_triplets, text_of=self.input_text)

    def budget_inputs(self, layout: "RunLayout") -> dict:
        """What a budget plan depends on beyond the run's triplets and the tokenizer (its key)."""
        return {}

    def budget_probe(self, layout: "RunLayout", enc: "Encoder", folder, sample_triplets: int) -> dict:
        """Write a budget's probe into `folder` (encoders.training.budget): a seeded sample of whole
        anchors' train rows, tokenized as `prepare_data` would; returns what its meta.json adds."""
        from encoders.training import triplet_table

        return triplet_table.build(layout, folder, enc.tokenizer, enc.max_length, enc.sep, self.cfg.val_max,
                                   self.cfg.seed, sample_triplets=sample_triplets, text_of=self.input_text)

    def open_data(self, folder):
        """Every rank: the built folder, memory-mapped."""
        from encoders.training.triplet_table import open_tokens

        return open_tokens(folder)

    # -- the batches
    def collate(self, data, pad_id: int, bucket_tokens: int):
        """What turns a micro-batch's train rows into the batch `batch_loss` reads (run in the
        loader's worker processes); None: the triplets' papers, tokenized and padded
        (encoders.training.feed.Collate)."""
        return None

    # -- the forward
    def vectors(self, enc: "Encoder", batch):
        """Anchor, positive and negative vectors from one forward pass (one padded batch): a
        pre-tokenized encoders.training.feed.TokenBatch (training), or a TripletBatch of texts."""
        if hasattr(batch, "pooled"):
            vec = batch.pooled(enc)
        else:
            vec = enc.embed_texts(list(batch.anchors) + list(batch.positives) + list(batch.negatives))
        k = len(batch)
        return vec[:k], vec[k:2 * k], vec[2 * k:]

    def batch_loss(self, enc: "Encoder", batch) -> "torch.Tensor":
        """The training step's loss on one micro-batch (keeps the autograd graph)."""
        return self.loss(*self.vectors(enc, batch), batch)

    # -- the loss and the score
    def loss(self, anchor: "torch.Tensor", positive: "torch.Tensor", negative: "torch.Tensor",
             batch: TripletBatch | None = None) -> "torch.Tensor":
        raise NotImplementedError

    def pair_scores(self, a: "torch.Tensor", b: "torch.Tensor") -> "torch.Tensor":
        """Score of each row of `a` with the same row of `b` (higher = closer)."""
        raise NotImplementedError

    def score_matrix(self, queries: "torch.Tensor", candidates: "torch.Tensor") -> "torch.Tensor":
        """queries x candidates scores (higher = closer)."""
        raise NotImplementedError

    # -- validation
    def validation_loss(self, anchor, positive, negative, batch: TripletBatch) -> float:
        """The loss on the validation triplets (by default: all of them as one batch)."""
        return float(self.loss(anchor, positive, negative, batch))

    def validate(self, enc: "Encoder", data: dict, batch_size: int = 32) -> dict:
        """Validation figures (the training log's val_* keys): loss, triplet accuracy and retrieval."""
        from encoders.objectives.validation import evaluate

        return evaluate(self, enc, data, batch_size)
