"""Concept sets, CAV fitting, projection to concept coordinates and concept selection.

Roles as in captum.concept: a concept set (:mod:`sets`: names + examples), a pluggable
fitter (:mod:`fitters`: examples -> one direction per concept), and the procedure
(:class:`CAVFitter`: repeats, significance, unit CAVs, ``project``). :mod:`projection`
is the one home of the concept maths (Z Cᵀ, C Σ Cᵀ, σ, q; MMDT paper Eq. 4-6) and
:mod:`selection` picks a small concept subset maximising the explainability-to-noise ratio.
Names are imported on first access (``from pipeline.concepts import project`` loads only
:mod:`projection`).
"""

from __future__ import annotations

import importlib

_LAZY = {
    "CAVFitter": "cav", "project": "projection", "detect_concepts": "detectors", "binarize_scores": "detectors",
    "Fitter": "fitters", "build_fitter": "fitters", "fitter_label": "fitters",
    "check_cavs": "projection", "check_covariance": "projection",
    "concept_mixture": "projection", "pooled_concept_sigma": "projection", "project_mixture": "projection",
    "mixture_sigma": "projection", "SelectionResult": "selection", "select_concepts": "selection",
    "ConceptExamples": "sets", "build_examples": "sets", "check_dataset": "sets",
    "fit_logistic_batch": "batched_logistic", "LogisticBatch": "batched_logistic",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f"pipeline.concepts.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'pipeline.concepts' has no attribute {name!r}")


def __dir__():
    return __all__
