"""The embed stage: every paper of a run through a model directory, Parquet in (streamed),
resumable Parquet shards out (read back by sciencemap.embeddings.load_embeddings).

    feed     the papers table as a plan of files and row groups; a shard's rows read, filtered
             (null or repeated paper_id, no text) and tokenized
    forward  token-budget batches through the model, eager or torch.compile'd, into pooled vectors
    shards   shard files, their footer records, the manifest and the resume/refusal rules
    job      run_embed: processes (torchrun), the shard loop with read-ahead, progress, the summary
"""
from encoders.config import EmbedConfig
from encoders.embed.feed import InputPlan, ShardWork, plan_input, prepare_shard
from encoders.embed.forward import (COMPILE_MIN_TOKENS, CompiledForward, embed_texts, embed_token_ids,
                                    inference_forward, token_budget_batches)
from encoders.embed.job import run_embed

__all__ = ["COMPILE_MIN_TOKENS", "CompiledForward", "EmbedConfig", "InputPlan", "ShardWork",
           "embed_texts", "embed_token_ids", "inference_forward", "plan_input", "prepare_shard",
           "run_embed", "token_budget_batches"]
