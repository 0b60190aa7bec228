"""Ingest: input files -> the papers, references, mentions, rejects, warnings and files tables. The
readers (one per input format), section classification (heading rules and the learned model, with its
training), reference resolution, author keys, subject fields, and the Spark session and settings."""
