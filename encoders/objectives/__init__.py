"""Training objectives as plug-ins (METHODS.md §4). Each module defines one `Objective`
(encoders.objectives.base): its settings, its parts beside the encoder, its batches, its loss, its
validation and its model-card entry. The training loop (encoders.training.loop) knows objectives
only through the registry (encoders.objectives.registry): adding one is a module and a line there.
"""
