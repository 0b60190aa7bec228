"""UniFAR (METHODS.md §8.4): one encoder with facet aggregation.

- Input: title [SEP] s1 [SEP] s2 ... (the abstract's sentences: abstract_facets at training time, the
  same splitter, sciencemap.text.split_sentences, at embed time). A sentence's vector is the mean of
  its tokens (between two [SEP]); the title's the mean of the title's tokens.
- Facet queries: three learnable anchors a_f, each joined with the title vector t:
  q_f = LayerNorm(a_f + MLP([a_f; t])).
- Facet vectors: multi-head attention of q_f over the sentence vectors when the paper has at least
  MIN_SENTENCES sentences, else over its token vectors.
- Loss, per facet f of a triplet (facet triplets, [importance] facet_signal): multi-positive InfoNCE of
  the anchor's facet-f vector against every positive and negative paper of the micro-batch, by
  cosine / TAU; the positives are all papers the batch holds as positives of that anchor for f.
  Plus λ · KL(target_f || attention_f) where target_f spreads evenly over the sentences the abstract
  splitter labelled f (facets with none are skipped); λ rises linearly from KL_WEIGHT[0] to
  KL_WEIGHT[1] over training (off with unifar_kl = false).
- Learning rates: the encoder and the anchors at the run's lr (2e-5 in the recipe), the aggregator
  (MLP, attention, LayerNorm) at AGGREGATOR_LR.
- Embedding: the view "facets" holds the three facet vectors; the main vector is the three unit
  facet vectors concatenated and divided by √3 (unit length; its cosine with another paper's is the
  mean of the three facet cosines).

- Question–document loss (off unless [train] unifar_questions names a `questions` table of
  (question_id, question, paper_id)): each (question, paper) is a train row beside the facet
  triplets; the question is read as a title alone (so its facet vectors attend over its tokens)
  and scores the micro-batch's papers by the mean facet cosine, multi-positive InfoNCE (τ TAU),
  weighted by unifar_qd_weight. Each kind of row's loss is weighted by its share of the micro-batch.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from sciencemap.contracts import FACETS
from sciencemap.runtime import UserError
from sciencemap.text import clean_text, split_sentences

from encoders.objectives.base import Objective, Part, ViewSpec
from encoders.objectives.facet_batches import FacetCollate

KIND = "unifar_tokens"
FORMAT = "sciencemap.unifar_tokens/1"
MIN_SENTENCES = 3
TAU = 0.08
KL_WEIGHT = (0.3, 0.5)
AGGREGATOR_LR = 5e-5


def unifar_text(title, abstract, sep: str = "[SEP]") -> str:
    """title <sep> s1 <sep> s2 ...: the abstract's sentences (split_sentences) as [SEP]-separated spans."""
    parts = [clean_text(title)] + split_sentences([abstract])
    return f" {sep} ".join(p for p in parts if p)


def sentence_text(title, sentences, sep: str) -> str:
    return f" {sep} ".join(p for p in [clean_text(title)] + list(sentences or []) if p)


def segments(input_ids: torch.Tensor, attention_mask: torch.Tensor, sep_id: int, cls_id: int | None):
    """Per token its span: 0 = the title, i = the i-th sentence, -1 = [CLS], [SEP] or padding; and
    each paper's number of sentences (spans after the title that hold a token)."""
    is_sep = (input_ids == sep_id) & attention_mask.bool()
    seg = torch.cumsum(is_sep.long(), dim=1) - is_sep.long()       # a [SEP] belongs to the span it ends
    seg = seg.masked_fill(is_sep | ~attention_mask.bool(), -1)
    if cls_id is not None:
        seg = seg.masked_fill(input_ids == cls_id, -1)
    n_sent = (seg.max(dim=1).values).clamp(min=0)
    return seg, n_sent


class Aggregator(torch.nn.Module):
    """Facet queries from the anchors and the title vector, then attention over sentences (papers with
    at least MIN_SENTENCES) or tokens (the others), in one forward (one call per step under DDP)."""

    def __init__(self, d: int, n_facets: int):
        super().__init__()
        self.mlp = torch.nn.Sequential(torch.nn.Linear(2 * d, d), torch.nn.GELU(), torch.nn.Linear(d, d))
        self.norm = torch.nn.LayerNorm(d)
        self.attn = torch.nn.MultiheadAttention(d, max(1, d // 64), batch_first=True)

    def forward(self, anchors, title, spans, span_pad, hidden, token_pad, by_sent):
        """anchors F x d; title B x d; spans B x S x d (span_pad True = no sentence); hidden B x T x d
        (token_pad True = padding); by_sent B bool. -> (B x F x d, (rows, their F x S weights) or None)."""
        B, nf = len(title), len(anchors)
        a = anchors[None].expand(B, -1, -1)
        q = self.norm(a + self.mlp(torch.cat([a, title[:, None, :].expand(-1, nf, -1)], dim=-1)))
        out = q.new_zeros(q.shape)
        weights = None
        if by_sent.any():
            r = torch.nonzero(by_sent).flatten()
            o, w = self.attn(q[r], spans[r], spans[r], key_padding_mask=span_pad[r], need_weights=True,
                             average_attn_weights=True)
            out = out.index_copy(0, r, o)
            weights = (r, w)
        if (~by_sent).any():
            r = torch.nonzero(~by_sent).flatten()
            o, _ = self.attn(q[r], hidden[r], hidden[r], key_padding_mask=token_pad[r], need_weights=False)
            out = out.index_copy(0, r, o)
        return out, weights


class Anchors(torch.nn.Module):
    """The learnable facet anchors (their own part: the encoder's learning rate, not the aggregator's)."""

    def __init__(self, n: int, d: int):
        super().__init__()
        self.vectors = torch.nn.Parameter(torch.randn(n, d) * 0.02)

    def forward(self) -> torch.Tensor:
        return self.vectors


class UnifarObjective(Objective):
    name = "unifar"
    fields = ("unifar_kl", "unifar_questions", "unifar_qd_weight")
    score_name = "mean facet cosine"
    input_text = staticmethod(unifar_text)

    def __init__(self, cfg):
        super().__init__(cfg)
        self.kl_weight = KL_WEIGHT[0]

    @classmethod
    def check(cls, cfg) -> None:
        if cfg.bucket_tokens:
            raise UserError("the unifar objective reads one padded batch per micro-batch: set bucket_tokens = 0")

    def build(self, enc) -> dict[str, Part]:
        return {"anchors": Part(Anchors(len(FACETS), enc.dim)),
                "aggregator": Part(Aggregator(enc.dim, len(FACETS)), lr=AGGREGATOR_LR)}

    def after_step(self, enc, step: int, total: int) -> None:
        lo, hi = KL_WEIGHT
        self.kl_weight = lo + (hi - lo) * min(step, total) / max(total, 1)

    # -- the facet vectors of a padded batch
    def facet_vectors(self, enc, input_ids, attention_mask, hidden=None, training: bool = True):
        """(B x F x d facet vectors, B x F x M attention over sentences or None per paper, n_sent)."""
        if hidden is None:
            with enc.autocast():
                hidden = enc.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        hidden = hidden.float()
        tok = enc.tokenizer
        seg, n_sent = segments(input_ids, attention_mask, tok.sep_token_id, tok.cls_token_id)
        B, T, d = hidden.shape
        S = int(n_sent.max()) + 1 if len(n_sent) else 1
        onehot = F.one_hot((seg + 1).clamp(min=0), S + 1)[..., 1:].float() * (seg >= 0)[..., None]   # B x T x S
        counts = onehot.sum(dim=1)                                                                   # B x S
        spans = torch.einsum("bts,btd->bsd", onehot, hidden) / counts.clamp(min=1)[..., None]
        title = spans[:, 0]
        no_title = counts[:, 0] == 0
        if no_title.any():   # no title tokens: the mean of every real token stands in
            m = attention_mask.float()[..., None]
            title = torch.where(no_title[:, None], (hidden * m).sum(1) / m.sum(1).clamp(min=1), title)
        part = self.part if training else (lambda name: self.parts[name].module)
        by_sent = n_sent >= MIN_SENTENCES
        out, attn = part("aggregator")(part("anchors")(), title, spans[:, 1:], counts[:, 1:] == 0, hidden,
                                       ~attention_mask.bool(), by_sent)
        return out, attn, n_sent

    # -- data (encoders.training.facet_table)
    def prepare_data(self, layout, enc, sample_triplets: int = 0):
        from encoders.training.facet_table import prepare_facet_tokens

        return prepare_facet_tokens(self.name, unifar_items(enc.sep), layout, enc, self.cfg.val_max, self.cfg.seed,
                                    sample_triplets, questions=self.cfg.unifar_questions)

    def budget_inputs(self, layout) -> dict:
        from encoders.training.facet_table import facet_inputs

        return facet_inputs(self.name, layout, self.cfg.unifar_questions)

    def budget_probe(self, layout, enc, folder, sample_triplets: int) -> dict:
        from encoders.training.facet_table import build_probe

        return build_probe(unifar_items(enc.sep), layout, enc, folder, self.cfg.val_max, self.cfg.seed,
                           sample_triplets, self.cfg.unifar_questions)

    def open_data(self, folder):
        from encoders.training.facet_table import open_facet_tokens

        data, self._facet_data = open_facet_tokens(folder)
        self._val_facets = self._facet_data.row_facets["val"]
        return data

    def collate(self, data, pad_id: int, bucket_tokens: int):
        return FacetCollate(data, pad_id, self._facet_data.row_facets["train"], self._facet_data.item_labels)

    # -- the loss
    @staticmethod
    def _positives(anchor_ids, positive_ids, negative_ids, same_group: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(k x 2k positives, k x 2k own): the candidates (positives, then negatives) that are positives
        of row i, i.e. the batch's positives of rows in i's group (`same_group`, k x k) and any other
        copy of the same paper; and the candidates that are row i's anchor itself."""
        k = len(anchor_ids)
        code: dict = {}
        anchor = np.array([code.setdefault(a, len(code)) for a in anchor_ids])
        cand = np.array([code.setdefault(c, len(code)) for c in list(positive_ids) + list(negative_ids)])
        pos = np.zeros((k, 2 * k), bool)
        pos[:, :k] = same_group
        pos = (pos.astype(np.int64) @ (cand[:, None] == cand[None, :]).astype(np.int64)) > 0
        return pos, cand[None, :] == anchor[:, None]

    @staticmethod
    def _info_nce(s: torch.Tensor, pos: np.ndarray, own: np.ndarray | None = None) -> torch.Tensor:
        """Multi-positive InfoNCE of scores s (k x 2k, already / TAU): mean over rows of
        −log(Σ_pos e^s / Σ_all e^s), a row's own anchor left out unless it is a positive."""
        pos_t = torch.as_tensor(pos, device=s.device)
        if own is not None:
            s = s.masked_fill(torch.as_tensor(own, device=s.device) & ~pos_t, float("-inf"))
        return (torch.logsumexp(s, 1) - torch.logsumexp(s.masked_fill(~pos_t, float("-inf")), 1)).sum() / len(s)

    def facet_loss(self, E: torch.Tensor, k: int, facets: torch.Tensor, anchor_ids, positive_ids, negative_ids):
        """Multi-positive InfoNCE: E is (3k x F x d) for anchors, positives, negatives in batch order.
        Row i scores the 2k candidates with its facet f_i; its positives are the batch's positives of the
        same anchor and facet, and any candidate that is the same paper as one of them."""
        f = np.asarray(facets, np.int64)
        a = np.asarray(list(anchor_ids), dtype=object)
        pos, own = self._positives(anchor_ids, positive_ids, negative_ids, (a[:, None] == a[None, :]) & (f[:, None] == f[None, :]))
        Eu = F.normalize(E, dim=-1)
        ft = torch.as_tensor(f, device=E.device)
        s = torch.einsum("jid,id->ij", Eu[k:][:, ft], Eu[torch.arange(k, device=E.device), ft]) / TAU
        return self._info_nce(s, pos, own)

    def question_loss(self, E: torch.Tensor, k: int, question_ids, positive_ids, negative_ids) -> torch.Tensor:
        """The question–document loss: E is (3k x F x d) for k question rows' questions, papers and
        random other papers. Each question scores the 2k papers by the mean facet cosine (the
        diagonal of the facet similarity matrix, as retrieval does); multi-positive InfoNCE (τ TAU)
        whose positives are every paper the micro-batch gives that question."""
        q = np.asarray(list(question_ids), dtype=object)
        pos, _ = self._positives(question_ids, positive_ids, negative_ids, q[:, None] == q[None, :])
        return self._info_nce(self.score_matrix(E[:k], E[k:]) / TAU, pos)

    def kl_loss(self, attn, sentence_facets, n_sent) -> torch.Tensor:
        """KL(target || attention) per paper and facet with labelled sentences, mean over them."""
        if attn is None or sentence_facets is None:
            return torch.zeros(())
        rows, w = attn
        total, n = w.new_zeros(()), 0
        for j, r in enumerate(rows.tolist()):
            labels = sentence_facets[r][:int(n_sent[r])]
            for f in range(len(FACETS)):
                hit = [i for i, lab in enumerate(labels) if lab == f]
                if not hit:
                    continue
                target = w.new_zeros(w.shape[-1])
                target[hit] = 1.0 / len(hit)
                p = w[j, f].clamp(min=1e-8)
                total = total + (target[hit] * (target[hit].log() - p[hit].log())).sum()
                n += 1
        return total / max(n, 1)

    def batch_loss(self, enc, batch) -> torch.Tensor:
        k = len(batch)
        inputs = batch.inputs(enc.device)
        E, attn, n_sent = self.facet_vectors(enc, inputs["input_ids"], inputs["attention_mask"])
        facets = torch.as_tensor(batch.facets, dtype=torch.long)
        question = facets < 0   # question rows (unifar_questions) have no facet
        if not bool(question.any()):
            loss = self.facet_loss(E, k, facets, batch.anchor_ids, batch.positive_ids, batch.negative_ids)
        else:
            loss = E.sum() * 0.0   # every facet vector joins the backward pass, whichever rows there are
            for rows, fn in ((~question, self._doc_rows_loss), (question, self._question_rows_loss)):
                if bool(rows.any()):
                    loss = loss + fn(E, k, rows, facets, batch)
        if self.cfg.unifar_kl:
            loss = loss + self.kl_weight * self.kl_loss(attn, batch.sentence_facets, n_sent)
        return loss

    @staticmethod
    def _select(E, k: int, rows: torch.Tensor, batch):
        idx = torch.nonzero(rows).flatten()
        at = torch.cat([idx, idx + k, idx + 2 * k]).to(E.device)
        pick = lambda ids: [ids[i] for i in idx.tolist()]   # noqa: E731
        return E[at], len(idx), pick(batch.anchor_ids), pick(batch.positive_ids), pick(batch.negative_ids)

    def _doc_rows_loss(self, E, k, rows, facets, batch) -> torch.Tensor:
        Es, n, a, p, q = self._select(E, k, rows, batch)
        return self.facet_loss(Es, n, facets[rows], a, p, q) * n / k

    def _question_rows_loss(self, E, k, rows, facets, batch) -> torch.Tensor:
        Es, n, a, p, q = self._select(E, k, rows, batch)
        return self.cfg.unifar_qd_weight * self.question_loss(Es, n, a, p, q) * n / k

    # -- scores (mean facet cosine)
    def pair_scores(self, a, b):
        return (F.normalize(a, dim=-1) * F.normalize(b, dim=-1)).sum(-1).mean(-1)

    def score_matrix(self, queries, candidates):
        q, c = F.normalize(queries, dim=-1), F.normalize(candidates, dim=-1)
        return torch.einsum("qfd,cfd->qc", q, c) / q.shape[1]

    @torch.inference_mode()
    def validate(self, enc, data: dict, batch_size: int = 32) -> dict:
        """Triplet accuracy per facet (the facet's cosine), the mean facet cosine's accuracy and the loss."""
        from encoders.model import pad_rows

        n = len(data["ai"])
        if n == 0:
            return {"n": 0, "loss": None, "accuracy": None}
        was = enc.model.training
        enc.model.eval()
        order = list(dict.fromkeys(data["ai"] + data["pi"] + data["ni"]))
        vec = []
        for i in range(0, len(order), batch_size):
            ids, mask = pad_rows([data["tokens"][x] for x in order[i:i + batch_size]], enc.tokenizer.pad_token_id or 0)
            vec.append(self.facet_vectors(enc, ids.to(enc.device), mask.to(enc.device), training=False)[0].cpu())
        enc.model.train(was)
        V = torch.cat(vec)
        at = {pid: i for i, pid in enumerate(order)}
        va, vp, vn = (V[[at[x] for x in data[key]]] for key in ("ai", "pi", "ni"))
        facets = torch.as_tensor(np.asarray(self._val_facets[:n], np.int64))
        cos = lambda x, y: (F.normalize(x, dim=-1) * F.normalize(y, dim=-1)).sum(-1)  # noqa: E731
        own = lambda x: x[torch.arange(n), facets]                                      # noqa: E731
        correct = (own(cos(va, vp)) > own(cos(va, vn))).float()
        out = {"n": n, "accuracy": float(correct.mean()),
               "accuracy_mean_cosine": float((self.pair_scores(va, vp) > self.pair_scores(va, vn)).float().mean()),
               "loss": float(self.facet_loss(torch.cat([va, vp, vn]), n, facets, data["ai"], data["pi"], data["ni"]))}
        for f, name in enumerate(FACETS):
            sel = facets == f
            if sel.any():
                out[f"accuracy_{name}"] = float(correct[sel].mean())
        return out

    # -- embedding
    def view_specs(self, enc) -> dict:
        return {"facets": ViewSpec(keys=FACETS, dim=enc.dim)}

    def main_dim(self, enc) -> int:
        return len(FACETS) * enc.dim

    def view_vectors(self, name, input_ids, attention_mask, hidden, pooled) -> torch.Tensor:
        return self.facet_vectors(self._embed_enc, input_ids, attention_mask, hidden=hidden, training=False)[0]

    def set_up(self, enc) -> None:
        super().set_up(enc)
        self._embed_enc = enc

    def main_vector(self, pooled, views) -> torch.Tensor:
        v = F.normalize(views["facets"].float(), dim=-1)
        return v.reshape(len(v), -1) / math.sqrt(len(FACETS))

    def main_vector_note(self) -> dict:
        return {"from": "the three unit facet vectors concatenated, / sqrt(3) (cosine = mean facet cosine)"}


def unifar_items(sep: str):
    """UniFAR's items: one per paper, title [SEP] its abstract's sentences, with their facet labels."""
    from encoders.training.facet_table import FacetItems

    def texts(pid, title, sentences, facets, used):
        yield pid, sentence_text(title, sentences, sep), [FACETS.index(x) if x in FACETS else -1 for x in facets]
    return FacetItems(KIND, FORMAT, lambda facet, pid: pid, texts)


OBJECTIVE = UnifarObjective
