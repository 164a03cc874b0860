"""Application layer: CLI, config schema, runner, stages, cache, file loaders, reports.

The only code that touches disk, Hydra or the environment; the library (trees, concepts,
counterfactuals, encoders, metrics, clustering, validation) never imports it.
"""
