"""Training, the same for every objective (encoders.objectives): the data an objective trains on,
tokenized once (triplet_table) and fed to each process (feed), the budget that fixes the steps
(budget), the loop (loop), its checkpoints and the exported model (export)."""
