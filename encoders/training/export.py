"""What a finished training leaves: the model directory (Hugging Face files, sentence-transformers
files and our model card, sciencemap.contracts.MODEL_CARD) and the training curve PNG."""
from __future__ import annotations

import json
from pathlib import Path

from sciencemap.contracts import MODEL_CARD
from sciencemap.storage import atomic_dir, atomic_file

from encoders.model import Encoder


PARTS_FILE = "objective_parts.safetensors"


def save_model(enc: Encoder, dest: Path, card: dict, parts: dict | None = None) -> Path:
    """Write a Hugging Face model directory (safetensors + tokenizer) atomically, plus the
    sentence-transformers files (modules.json, pooling config) so that it loads there too. `parts`:
    the objective's modules beside the encoder (name -> module), into PARTS_FILE as
    `<name>.<parameter or buffer>` tensors (read back by load_parts)."""
    with atomic_dir(dest) as tmp:
        if parts:
            from safetensors.torch import save_file

            save_file({f"{name}.{k}": v.detach().cpu().contiguous() for name, m in parts.items()
                       for k, v in m.state_dict().items()}, str(tmp / PARTS_FILE))
        enc.model.save_pretrained(tmp)
        enc.tokenizer.save_pretrained(tmp)
        (tmp / MODEL_CARD).write_text(json.dumps(card, indent=2, default=str))
        # No Normalize module: the triplet objective trains the raw vectors (METHODS.md §4.3).
        (tmp / "modules.json").write_text(json.dumps([
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        ], indent=2))
        (tmp / "sentence_bert_config.json").write_text(json.dumps(
            {"max_seq_length": enc.max_length, "do_lower_case": False}, indent=2))
        (tmp / "1_Pooling").mkdir()
        (tmp / "1_Pooling" / "config.json").write_text(json.dumps({
            "word_embedding_dimension": enc.dim,
            "pooling_mode_cls_token": enc.pooling == "cls",
            "pooling_mode_mean_tokens": enc.pooling == "mean",
            "pooling_mode_max_tokens": False,
            "pooling_mode_mean_sqrt_len_tokens": False,
        }, indent=2))
    return Path(dest)


def load_parts(model_dir: Path, parts: dict) -> None:
    """Load an exported model's objective parts into `parts` (name -> module of the same shape)."""
    from safetensors.torch import load_file

    flat = load_file(str(Path(model_dir) / PARTS_FILE))
    for name, module in parts.items():
        module.load_state_dict({k[len(name) + 1:]: v for k, v in flat.items() if k.startswith(name + ".")})


def plot_curve(log: list[dict], dest: Path, objective: str = "triplet") -> Path:
    """Training loss per logged step and validation loss / accuracy / MRR per evaluation (PNG)."""
    from matplotlib.figure import Figure  # no pyplot: no global backend state

    tr = [r for r in log if r.get("kind") == "train"]
    va = [r for r in log if r.get("kind") == "val" and r.get("val_loss") is not None]
    fig = Figure(figsize=(8, 4.5), dpi=100)
    ax = fig.subplots()
    if tr:
        ax.plot([r["step"] for r in tr], [r["loss"] for r in tr], label="train loss", color="tab:blue")
    if va:
        ax.plot([r["step"] for r in va], [r["val_loss"] for r in va], "o-", label="validation loss",
                color="tab:orange")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel(f"{objective} loss")
    ax2 = ax.twinx()
    for key, style in (("val_accuracy", "s--"), ("val_mrr", "^:")):
        pts = [(r["step"], r[key]) for r in va if r.get(key) is not None]
        if pts:
            ax2.plot(*zip(*pts), style, label=key.replace("val_", "validation "), color="tab:green"
                     if key == "val_accuracy" else "tab:red")
    ax2.set_ylim(0, 1)
    ax2.set_ylabel("accuracy / MRR")
    lines = ax.get_legend_handles_labels()
    lines2 = ax2.get_legend_handles_labels()
    ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], loc="upper right", fontsize=8)
    ax.set_title(f"Fine-tuning: {objective} objective")
    fig.tight_layout()
    with atomic_file(dest) as tmp:
        fig.savefig(tmp, format="png")
    return Path(dest)
