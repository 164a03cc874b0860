"""Concept-based explanation trees for clusters in deep representations.

``from pipeline import ConceptExplainer`` (a finished run applied to new data, docs/explain.md)
is the one name this package root exposes; it lives in the application layer and is imported on
first access (PEP 562), so ``import pipeline`` stays free of it and of every other layer.
"""

__version__ = "0.1.0"


def __getattr__(name):
    if name == "ConceptExplainer":
        from pipeline.app.explainer.concept_explainer import ConceptExplainer

        return ConceptExplainer
    raise AttributeError(f"module 'pipeline' has no attribute {name!r}")
