"""The embed stage: every paper of a run through a model directory, Parquet in (streamed),
resumable Parquet shards out (read back by sciencemap.embeddings.load_embeddings).

    feed     the papers table as a plan of files and row groups; chunks of a shard's rows read,
             filtered (null or repeated paper_id, no text), tokenized, bucketed by length and
             padded, ahead of the model (a thread, or worker processes)
    forward  the padded batches through the model (eager or torch.compile'd, pooling inside the
             call) into vectors placed on the device, with no host-device synchronisation
    shards   shard files, their footer records, the manifest and the resume/refusal rules
    job      run_embed: processes (torchrun), defaults by device, the feed -> forward -> writer
             pipeline, progress, the summary
"""
from encoders.config import EmbedConfig
from encoders.embed.feed import (Batch, Chunk, FeedShape, FeedSpec, InputPlan, feed_chunks, pad_batch, plan_input,
                                 prepare_chunk, token_budget_batches)
from encoders.embed.forward import (COMPILE_MIN_TOKENS, COMPILE_MIN_TOKENS_CUDA, CompiledForward, PooledForward,
                                    embed_batches, embed_texts, embed_token_ids, inference_forward)
from encoders.embed.job import device_shape, feed_shape, feed_spec, run_embed, training_length

__all__ = ["COMPILE_MIN_TOKENS", "COMPILE_MIN_TOKENS_CUDA", "Batch", "Chunk", "CompiledForward", "EmbedConfig",
           "FeedShape", "FeedSpec", "InputPlan", "PooledForward", "device_shape", "embed_batches", "embed_texts",
           "embed_token_ids", "feed_chunks", "feed_shape", "feed_spec", "inference_forward", "pad_batch", "plan_input",
           "prepare_chunk", "run_embed", "token_budget_batches", "training_length"]
