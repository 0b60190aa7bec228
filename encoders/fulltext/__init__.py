"""Full-text inputs of the encoders that read a paper's body (CoSAEmb, SciJEPa; METHODS.md §8.9): the
`sections` table ([ingest] keep_sections) made into tagged chunks and section pairs."""
