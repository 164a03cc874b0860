"""Global counterfactual explanations between groups (clusters): TGT, DBM and their metrics.

Plumb et al., "Explaining Groups of Points in Low-Dimensional Representations", ICML 2020.
No hydra, no file I/O: pure functions and estimators on numpy arrays plus a torch encoder.
"""

from pipeline.counterfactuals.concept_space import (
    ConceptDecoder,
    LatentIdentity,
    concept_dbm,
    concept_pairwise_metrics,
    concept_scores,
    concept_to_latent,
    describe,
    fit_concept_tgt,
)
from pipeline.counterfactuals.dbm import dbm, group_means
from pipeline.counterfactuals.quality import (
    SELF_SIMILARITY_TARGET,
    PairwiseEvaluator,
    choose_epsilon,
    correctness,
    coverage,
    mean_off_diagonal,
    pairwise_metrics,
    self_similarity,
    similarity,
    top_k,
)
from pipeline.counterfactuals.tgt import TGT
from pipeline.counterfactuals.tuning import default_l1_grid, fit_l1_path, l1_max, sparsity_sweep, tune_l1

__all__ = [
    "TGT",
    "dbm",
    "group_means",
    "correctness",
    "coverage",
    "similarity",
    "self_similarity",
    "choose_epsilon",
    "pairwise_metrics",
    "PairwiseEvaluator",
    "mean_off_diagonal",
    "top_k",
    "SELF_SIMILARITY_TARGET",
    "tune_l1",
    "sparsity_sweep",
    "fit_l1_path",
    "l1_max",
    "default_l1_grid",
    "ConceptDecoder",
    "LatentIdentity",
    "concept_scores",
    "concept_to_latent",
    "concept_dbm",
    "fit_concept_tgt",
    "concept_pairwise_metrics",
    "describe",
]
