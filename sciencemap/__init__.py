"""sciencemap's core, shared by the stage packages and depending on none of them.

    contracts   table schemas and metadata keys, named once
    layout      the run directory
    storage     atomic writes, Parquet table I/O
    embeddings  the embeddings table (shards + manifest): one reader for every stage
    text        missing text (None, NaN, empty) made one thing
    mesh        MeSH check tags (ingest's fields and the MeSH accuracy leave them out)
    config      TOML sections -> settings dataclasses -> generated command-line options
    runtime     user errors, logging, torchrun process groups
    stages      the stage registry (filled by the stage packages' entry points)
    pipeline    the runner;  cli: the job doors' shared command line

Importing it loads neither torch nor pyspark.
"""
