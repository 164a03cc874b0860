"""Explanation-tree estimators; every one exposes ``tree_`` as an :class:`ExplanationTree`.

The estimators are imported on first access (PEP 562): ``from pipeline.trees import MMDT``
loads only MMDT's module, not the compiled (numba) sweeps of SpEx and IMM.
"""

import importlib

_HOME = {
    "ExplanationTree": "tree", "Rule": "tree", "Condition": "tree",
    "MMDT": "mmdt", "RandomizedMMDT": "mmdt", "ConceptMMDT": "mmdt",
    "CART": "cart", "tree_from_sklearn": "cart",
    "SpExClique": "spex", "SpExGraph": "spex", "SpExKNN": "spex",
    "IMM": "imm", "EMN": "imm", "ExKMC": "imm",
    "TAO": "tao",
}
__all__ = list(_HOME)


def __getattr__(name):
    if name in _HOME:
        value = getattr(importlib.import_module(f"pipeline.trees.{_HOME[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'pipeline.trees' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_HOME))
