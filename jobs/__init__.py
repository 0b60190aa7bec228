"""The job doors: one per stage plus the pipeline; each parses the generated options and calls the stage."""
