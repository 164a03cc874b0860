"""Concept sets, CAV fitting, projection to concept coordinates and concept selection.

Roles as in captum.concept: a concept set (:mod:`sets`: names + examples), a pluggable
fitter (:mod:`fitters`: examples -> one direction per concept), and the procedure
(:class:`CAVFitter`: repeats, significance, unit CAVs, ``project``). :mod:`projection`
carries a latent mixture into concept space (MMDT paper Eq. 4-6) and :mod:`selection`
picks a small concept subset maximising the explainability-to-noise ratio.
"""

from pipeline.concepts.cav import CAVFitter
from pipeline.concepts.projection import project
from pipeline.concepts.detectors import binarize_scores, detect_concepts
from pipeline.concepts.fitters import FITTERS, Fitter, build_fitter, register_fitter
from pipeline.concepts.projection import (
    check_cavs,
    check_covariance,
    concept_explainability_to_noise_ratio,
    concept_mixture,
    pooled_concept_sigma,
)
from pipeline.concepts.selection import SelectionResult, select_concepts
from pipeline.concepts.sets import ConceptExamples, build_examples, check_dataset

__all__ = [
    "CAVFitter", "project", "Fitter", "FITTERS", "build_fitter", "register_fitter",
    "detect_concepts", "binarize_scores", "check_cavs", "check_covariance", "concept_mixture",
    "pooled_concept_sigma", "concept_explainability_to_noise_ratio", "select_concepts",
    "SelectionResult", "ConceptExamples", "build_examples", "check_dataset",
]
